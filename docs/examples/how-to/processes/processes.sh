# --8<-- [start:basic]
osmosis-run eval data.jsonl -w my_rollout:EchoAgent -g my_rollout:ExactMatch --backend processes
osmosis-run eval data.jsonl -w my_rollout:EchoAgent --backend processes --workers 8 \
    --agent-timeout 60 --max-worker-memory 2GiB --worker-recycle 500
# --8<-- [end:basic]
# --8<-- [start:crash]
osmosis-run eval rows.jsonl -w my_rollout:EchoAgent -g fragile:NativeGrader \
    --backend processes --workers 2 --max-error-rate 1 --out runs/crash
# --8<-- [end:crash]
# --8<-- [start:stuck]
osmosis-run eval rows.jsonl -w my_rollout:EchoAgent -g fragile:StuckGrader \
    --backend processes --workers 2 --grader-timeout 1 --max-error-rate 1 --out runs/stuck \
    || echo "exit code $?"
# --8<-- [end:stuck]
