osmosis-run eval --config eval.toml --quiet   # the run of the last page: runs/v2
# --8<-- [start:ls]
ls runs/v2 runs/v2/rollouts/c.s0
# --8<-- [end:ls]
# --8<-- [start:jsonl]
head -n 1 runs/v2/results.jsonl | jq -c '{rollout_id, status, reward, passed, metrics}'
jq -r 'select(.passed == false) | .rollout_id' runs/v2/results.jsonl
# --8<-- [end:jsonl]
# --8<-- [start:show]
osmosis-run show runs/v2 c.s0
# --8<-- [end:show]
# --8<-- [start:report]
osmosis-run report runs/v2
# --8<-- [end:report]
# --8<-- [start:html]
osmosis-run report runs/v2 --html report.html
# --8<-- [end:html]
