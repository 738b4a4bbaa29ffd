"""``python -m osmosis_run`` is ``osmosis-run``."""

from osmosis_run.cli import main

main()
