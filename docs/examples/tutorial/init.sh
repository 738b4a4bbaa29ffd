osmosis-run init my-agent
osmosis-run eval --config my-agent/eval.toml
