"""Profile W1 in-process: ``python -m tests.perf.profile_w1 [--ram] [--scale F] [--top N]``.

Runs the W1 workload (20,000 trivial rows + exact match, concurrency 64, full artifact tree)
through the ``osmosis-run`` entry point inside this interpreter under cProfile, imports
included, and prints the top functions by cumulative and by own time. stderr of the run goes to a
file, as in the benchmark, so that the progress display is the plain one. cProfile slows down
call-heavy Python code roughly twice as much as I/O, so read shares, not seconds. ``--ram``
writes the run to /dev/shm (W1-ram: the runner's own CPU, no disk); ``--dump FILE`` keeps the
raw profile.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

from .workloads import TRIVIAL_CONCURRENCY, W1_ROWS
from .workspace import ECHO, EXACT_MATCH, Workspace


def _run_cli(argv: list[str], stderr_path: Path) -> object:
    """``osmosis-run ARGV`` in-process; return its exit code."""
    from osmosis_run.cli import main

    saved_argv, saved_stderr = sys.argv, sys.stderr
    with stderr_path.open("w", encoding="utf-8") as stderr:
        sys.argv, sys.stderr = ["osmosis-run", *argv], stderr
        try:
            main()
        except SystemExit as exc:
            return exc.code
        finally:
            sys.argv, sys.stderr = saved_argv, saved_stderr
    return 0


def _print_stats(profile: cProfile.Profile, *, top: int) -> None:
    for order in ("cumulative", "tottime"):
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text)
        stats.sort_stats(order).print_stats(top)
        print(f"==== top {top} by {order} ====")
        print(text.getvalue().split("\n", 5)[-1].rstrip())  # drop the "N calls in" preamble


def main(argv: list[str] | None = None) -> int:
    """Profile W1 and print the tables; return the run's exit code."""
    parser = argparse.ArgumentParser(prog="python -m tests.perf.profile_w1")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply W1's 20,000 rows")
    parser.add_argument("--top", type=int, default=30, help="rows per table (default 30)")
    parser.add_argument("--dump", type=Path, help="also write the raw profile (for snakeviz)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--ram", action="store_true", help="write the run to RAM (/dev/shm)")
    args = parser.parse_args(argv)
    rows = max(1, round(W1_ROWS * args.scale))
    ws = Workspace(keep=args.keep)
    home = Path.cwd()
    try:
        dataset, out = ws.dataset(rows), ws.fresh("W1-profile", in_memory=args.ram)
        cli = [str(dataset), "--workflow", ECHO, "--grader", EXACT_MATCH]
        cli = ["eval", *cli, "--concurrency", str(TRIVIAL_CONCURRENCY), "--out", str(out)]
        os.chdir(ws.root)  # the workflow module is importable from the cwd, as in the benchmark
        profile = cProfile.Profile()
        started = time.perf_counter()
        code = profile.runcall(_run_cli, cli, ws.root / "stderr.txt")
        wall = time.perf_counter() - started
        os.chdir(home)
        print(f"W1 in-process under cProfile: {rows} rows, exit code {code}, wall {wall:.2f}s")
        _print_stats(profile, top=args.top)
        if args.dump is not None:
            profile.dump_stats(home / args.dump)
    finally:
        os.chdir(home)
        ws.close()
    return code if isinstance(code, int) else 1


if __name__ == "__main__":
    raise SystemExit(main())
