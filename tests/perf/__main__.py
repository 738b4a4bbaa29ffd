"""``python -m tests.perf``: run the benchmark suite."""

from tests.perf.run import main

raise SystemExit(main())
