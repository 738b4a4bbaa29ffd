"""The benchmarks run as ``python -m tests.perf``, never under pytest."""

collect_ignore_glob = ["*"]
