"""``python -m tests.perf``: run the benchmark suite."""

from .run import main

raise SystemExit(main())
