# in the clone: a run of the bundled example to report on
osmosis-run eval --config configs/calculator.toml --out runs/calc --quiet
# --8<-- [start:text]
osmosis-run report runs/calc --top 3 --lowest 3 --group-by metadata.op > report.txt
osmosis-run report runs/calc --pass-threshold 0.5 --top 0 --lowest 0
# --8<-- [end:text]
# --8<-- [start:json]
osmosis-run report runs/calc --json | jq -c '.summary | {rollouts, pass_rate, errors}'
# --8<-- [end:json]
# --8<-- [start:files]
osmosis-run report runs/calc --html report.html --junit report.xml
osmosis-run show runs/calc --worst 2
# --8<-- [end:files]
# --8<-- [start:compare]
osmosis-run grade runs/calc -g osmosis_run.examples.calculator:PartialCreditGrader \
    --out runs/calc-partial --quiet
osmosis-run compare runs/calc runs/calc-partial --html diff.html
# --8<-- [end:compare]
