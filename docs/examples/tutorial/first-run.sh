# --8<-- [start:run]
osmosis-run eval data.jsonl --workflow my_rollout:EchoAgent --grader my_rollout:ExactMatch
# --8<-- [end:run]
# --8<-- [start:again]
osmosis-run eval data.jsonl --workflow my_rollout:EchoAgent --grader my_rollout:ExactMatch
# --8<-- [end:again]
# --8<-- [start:samples]
osmosis-run eval data.jsonl -w my_rollout:EchoAgent -g my_rollout:ExactMatch --samples 4 --out runs/n4
# --8<-- [end:samples]
# --8<-- [start:config]
osmosis-run eval --config eval.toml
# --8<-- [end:config]
