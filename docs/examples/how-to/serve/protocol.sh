# against `osmosis-run serve --config serve.toml` on port 8000
PORT=${PORT:-8000}
# --8<-- [start:protocol]
curl -s localhost:$PORT/health
curl -s -X POST localhost:$PORT/rollout -H 'content-type: application/json' -d '{
  "rollout_id": "r-1", "initial_messages": [{"role": "user", "content": "hi"}],
  "chat_completions_url": "http://127.0.0.1:4000/v1", "label": "HI",
  "agent_timeout_sec": 60, "extra_fields": {"step": 3}}' | tee admitted.json
TOKEN=$(jq -r .polling_lease_token admitted.json)
curl -s localhost:$PORT/rollout/r-1/result -H "X-Osmosis-Rollout-Lease: $TOKEN"
curl -s -X POST localhost:$PORT/rollout/cancel -H 'content-type: application/json' \
  -d '{"prefix": "r-"}'
# --8<-- [end:protocol]
