"""The benchmark command: ``python -m tests.perf [--only W1,W3] [--scale F] [--keep] [--strict]``.

Also ``--no-settle`` (measure at once) and ``--baseline REV`` (W1-ram's other build).

Exit codes: 0 every requested workload was measured (whether or not its target holds); 1 with
``--strict``, a target does not hold or a workload could not be measured; 2 the benchmark cannot
run at all (floor.py not found).
"""

from __future__ import annotations

import argparse
import json
import time

from .baseline import DEFAULT_REVISION, Baseline
from .settle import QUIET_S, probe, quiet_for
from .workloads import Bench, Line, log
from .workspace import HarnessError, Workspace, find_floor, osmosis_run_command

ALL = ("W1", "W1-ram", "W2", "W3", "W4", "W5", "W6", "W8")
# The order they run in. W6 is a ratio to W1's wall, so it runs right after W1, before anything
# else changes the machine; the start-up figures (W5) come before W4 fills 1.7 GB of RAM.
# W1-ram writes to RAM only, so where it runs does not matter to the disk's figures.
ORDER = ("W1", "W6", "W1-ram", "W2", "W3", "W5", "W4", "W8")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.perf", description="Measure osmosis-run against bench/README.md."
    )
    parser.add_argument(
        "--only", help="comma-separated workloads, e.g. W1,W1-ram,W3 (default: all)"
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every row count (0.1 for a smoke run)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    parser.add_argument(
        "--no-settle",
        action="store_true",
        help="measure at once, even within 340 s of the last suite's clean-up (see settle.py)",
    )
    parser.add_argument(
        "--baseline",
        default=DEFAULT_REVISION,
        metavar="REV",
        help=f"the git revision W1-ram compares with (default {DEFAULT_REVISION}, the wave-1 build)",
    )
    args = parser.parse_args(argv)
    known = {w.upper(): w for w in ALL}
    asked = [w.strip().upper() for w in args.only.split(",")] if args.only else list(known)
    unknown = [w for w in asked if w not in known]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(ALL)}")
    if args.scale <= 0:
        parser.error("--scale must be positive")
    args.chosen = [known[w] for w in asked]
    return args


def _plan(chosen: list[str]) -> list[str]:
    """The workloads to run, in ``ORDER``; W6 re-runs W1's run, so it brings W1 along."""
    wanted = set(chosen)
    if "W6" in wanted and "W1" not in wanted:
        log("W6 re-runs W1's finished run: running W1 too")
        wanted.add("W1")
    return [w for w in ORDER if w in wanted]


def _run_one(bench: Bench, workload: str) -> Line:
    started = time.perf_counter()
    try:
        line = bench.workloads()[workload]()
    except HarnessError as exc:
        log(f"{workload}: could not be measured: {exc}")
        line = {"workload": workload, "figure": None, "holds": False, "error": str(exc)}
    log(f"{workload}: done in {time.perf_counter() - started:.1f}s")
    return line


def main(argv: list[str] | None = None) -> int:
    """Run the chosen workloads and print one JSON line each; return the exit code."""
    args = _parse(argv)
    try:
        floor = find_floor()
    except HarnessError as exc:
        log(f"error: {exc}")
        return 2
    cli = osmosis_run_command()
    try:
        baseline = Baseline(args.baseline) if "W1-ram" in args.chosen else None
    except HarnessError as exc:
        log(f"error: {exc}")
        return 2
    ws = Workspace(keep=args.keep)
    started = time.perf_counter()
    held = True
    try:
        log(f"osmosis-run: {' '.join(cli)}; floor: {floor}; workspace: {ws.root}")
        bench = Bench(ws, cli=cli, floor=floor, scale=args.scale, baseline=baseline)
        wait = 0.0 if args.no_settle else quiet_for()
        if wait:
            log(f"the last suite deleted its files {QUIET_S - wait:.0f}s ago: waiting {wait:.0f}s")
            time.sleep(wait)
        bench.prepare_baseline()  # first: pip's file work must not land between measurements
        bench.warm_up()
        disk_us = probe(ws.root / "probe")
        log(f"disk probe: {disk_us:.0f} us per floor-like rollout (75-100 when settled here)")
        for workload in _plan(args.chosen):
            line = _run_one(bench, workload)
            line["disk_probe_us"] = round(disk_us, 1)
            held = held and bool(line["holds"])
            print(json.dumps(line), flush=True)
    finally:
        ws.close()
    log(f"all done in {time.perf_counter() - started:.1f}s")
    return 1 if args.strict and not held else 0
