# --8<-- [start:formats]
osmosis-run validate rows.jsonl -w my_rollout:EchoAgent -g my_rollout:ExactMatch
osmosis-run eval rows.csv -w my_rollout:EchoAgent -g my_rollout:ExactMatch --quiet
python to_parquet.py && osmosis-run eval rows.parquet -w my_rollout:EchoAgent --quiet
gzip -k rows.jsonl && osmosis-run eval rows.jsonl.gz -w my_rollout:EchoAgent --quiet
# --8<-- [end:formats]
# --8<-- [start:stdin]
cat rows.jsonl | osmosis-run eval - -w my_rollout:EchoAgent -g my_rollout:ExactMatch \
    --jsonl --quiet | jq -c '{rollout_id, status, reward}'
# --8<-- [end:stdin]
# --8<-- [start:select]
osmosis-run validate rows.jsonl -w my_rollout:EchoAgent --rows 0,2-3 --samples 2
osmosis-run validate rows.jsonl -w my_rollout:EchoAgent --ids p1,p4
osmosis-run validate rows.jsonl -w my_rollout:EchoAgent --shard 1/2
osmosis-run eval rows.jsonl -w my_rollout:EchoAgent --shuffle --seed 7 --limit 3 --dry-run
# --8<-- [end:select]
# --8<-- [start:bad]
osmosis-run validate bad.jsonl -w my_rollout:EchoAgent || echo "exit code $?"
# --8<-- [end:bad]
# --8<-- [start:wrong-format]
echo '[{"user_prompt": "hello"}]' > rows.json
osmosis-run eval rows.json -w my_rollout:EchoAgent || echo "exit code $?"
# --8<-- [end:wrong-format]
