PORT=${PORT:-8000}
# --8<-- [start:run]
osmosis-run serve -w my_rollout:EchoAgent -g my_rollout:ExactMatch --port $PORT --out runs/served &
SERVER=$!
until curl -sf localhost:$PORT/health > /dev/null; do sleep 0.2; done   # wait until it listens

osmosis-run eval data.jsonl --server http://127.0.0.1:$PORT --samples 4 \
    --fail-under pass_rate=0.5 --out runs/remote

kill -TERM $SERVER && wait $SERVER   # drains, writes runs/served/summary.json, exits 0
# --8<-- [end:run]
osmosis-run report runs/served
