# --8<-- [start:v1]
osmosis-run validate data.jsonl --workflow my_rollout:EchoAgent --grader my_rollout:ExactMatch
# --8<-- [end:v1]
# --8<-- [start:v2]
osmosis-run validate data.jsonl -w my_rollout_v2:ShoutAgent -g my_rollout_v2:LenientMatch \
    --workflow-config my_rollout_v2:config
# --8<-- [end:v2]
