cd workspace
osmosis-run validate --config configs/eval/my-rollout.toml --dataset-file data/rows.jsonl \
    --secrets-file secrets.env
osmosis-run eval --config configs/eval/my-rollout.toml --dataset-file data/rows.jsonl \
    --secrets-file secrets.env --out runs/my-rollout
