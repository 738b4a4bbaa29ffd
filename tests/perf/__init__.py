"""Benchmarks of osmosis-run: workloads W1..W6 of bench/README.md, and the model gateway's W11,
W11b and W12 (tests/perf/gateway.py); not collected by pytest.

Run them from the repository root (about 5 minutes on a 2-core machine):

    python -m tests.perf                          # all six workloads, one JSON line each
    python -m tests.perf --only W1,W3 --scale 0.1 # a quick smoke on a tenth of the rows
    python -m tests.perf --strict                 # exit 1 when a target does not hold
    python -m tests.perf.profile_w1               # W1 in-process under cProfile
    python -m tests.perf.gateway                  # the model gateway's W11, W11b, W12 alone
    python -m tests.perf.processes                # worker processes: W13, W14, W1p
    python -m tests.perf.transcripts              # long transcripts: W15
    python -m tests.perf.scale                    # a million rows: W16
    python -m tests.perf.view                     # osmosis-run view on 100,000 rollouts: W18
    python -m tests.perf.bench_construct          # _construct against pydantic's model_construct
    python -m tests.perf.bench_render             # a plain stderr writer against rich's Console

Each workload runs ``osmosis-run`` as a whole process (startup included) over datasets and
workflows built in a temporary directory, next to the I/O floor (``bench/floor.py``, found at
``<repo>/../shared/bench/floor.py`` or ``$OSMOSIS_BENCH_FLOOR``) on the same rows. stdout carries
one JSON line per workload (``workload``, ``figure``, ``target``, ``holds`` and the raw numbers);
progress goes to stderr. ``--keep`` keeps the temporary directory.
"""
