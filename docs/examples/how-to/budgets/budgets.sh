osmosis-run eval rows.jsonl -w slow:SlowAgent -g my_rollout:ExactMatch --concurrency 2 \
    --out runs/slow --time-limit 2s || echo "exit code $?"
osmosis-run eval rows.jsonl -w slow:SlowAgent -g my_rollout:ExactMatch --concurrency 2 \
    --out runs/slow --time-limit 2s --quiet || echo "exit code $?"
jq -c .budget runs/slow/summary.json
