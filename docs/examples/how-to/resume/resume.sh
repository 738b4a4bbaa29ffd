# --8<-- [start:fails]
osmosis-run eval data.jsonl -w flaky:FlakyAgent -g my_rollout:ExactMatch --out runs/flaky \
    || echo "exit code $?"
# --8<-- [end:fails]
# --8<-- [start:retry-failed]
osmosis-run eval data.jsonl -w flaky:FlakyAgent -g my_rollout:ExactMatch --out runs/flaky \
    --retry-failed
# --8<-- [end:retry-failed]
# --8<-- [start:retries]
rm -rf tried   # flaky.py forgets what it tried: its first attempts fail again
osmosis-run eval data.jsonl -w flaky:FlakyAgent -g my_rollout:ExactMatch --out runs/retried \
    --retries 2
jq -c '{rollout_id, status, attempts}' runs/retried/results.jsonl
# --8<-- [end:retries]
# --8<-- [start:fresh]
osmosis-run eval data.jsonl -w flaky:FlakyAgent -g my_rollout:ExactMatch --out runs/retried \
    --retries 2 --fresh
ls runs/retried/rollouts
# --8<-- [end:fresh]
