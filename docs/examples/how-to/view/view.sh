osmosis-run view                                     # every run under runs/
osmosis-run view runs/ other/runs/calc-1a2b3c4d --port 8800 --no-open
