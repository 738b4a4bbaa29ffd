# --8<-- [start:run]
osmosis-run eval --config ci.toml
echo "exit code $?"
# --8<-- [end:run]
# --8<-- [start:stricter]
osmosis-run eval --config ci.toml --fail-under pass_rate=0.9 || echo "exit code $?"
# --8<-- [end:stricter]
# --8<-- [start:regression]
osmosis-run eval --config ci.toml --out runs/candidate \
    --workflow my_rollout_v2:ShoutAgent --workflow-config my_rollout_v2:config \
    --baseline runs/ci --fail-on-regression 0.05 || echo "exit code $?"
# --8<-- [end:regression]
