# --8<-- [start:regrade]
osmosis-run eval data.jsonl -w my_rollout:EchoAgent -g my_rollout:ExactMatch --out runs/v1
osmosis-run grade runs/v1 -g graders:Lenient --out runs/v1-lenient
osmosis-run compare runs/v1 runs/v1-lenient
# --8<-- [end:regrade]
# --8<-- [start:gate]
osmosis-run compare runs/v1-lenient runs/v1 --metric pass_rate --fail-on-regression 0.05 \
    || echo "exit code $?"
osmosis-run compare runs/v1 runs/v1-lenient --json | jq '.mean'
# --8<-- [end:gate]
