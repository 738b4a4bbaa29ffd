# from a clone of osmosis-run, after `pip install .`
osmosis-run eval --config configs/calculator.toml
