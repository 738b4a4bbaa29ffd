"""The worker-process benchmarks W13, W14 and W1p: ``python -m tests.perf.processes``.

Each workload runs the same ``osmosis-run eval`` with ``--backend processes --workers 2`` and
with the in-process backend (``local``), alternating run by run (``--repeats`` pairs, after one
unmeasured run of each), and divides the median whole-process walls (start-up, and the workers'
start-up, included):

- W13: 400 rows whose grader burns 20 ms of its thread's CPU in pure Python
  (``processes_flows.Burn``), concurrency 8 (the default ``--workers 2`` gives): processes /
  local <= 0.6 on 2 cores.
- W14: 2,000 rollouts sleeping 0.05 s (``perf_flows.Sleepy``), concurrency 200: processes /
  local <= 1.15.
- W1p: W1's 20,000 trivial rows (``perf_flows.Echo``), concurrency 64: the ratio, reported.

Run directories go to RAM (``/dev/shm``) when it has room: the figures are the backends' cost,
not the disk's. Each line also gives the runners' own walls (summary.json's ``wall_s``:
``inner_ratio``, which leaves out start-up and the workers' start and stop), the median CPU
(the eval process and what it waited for: the writer and worker processes), and the pair by
pair ratios. The machine is shared: ``loadavg_1m`` says how busy it was, and
``*_others_cpu_s`` how much CPU the rest of the machine took during each run (``/proc/stat``).

    python -m tests.perf.processes                       # W13, W14, W1p; one JSON line each
    python -m tests.perf.processes --only W14 --scale 0.2 --repeats 1   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from .settle import QUIET_S, quiet_for
from .workloads import Bench, Check, EvalRun, Line, log, report
from .workspace import ECHO, EXACT_MATCH, SLEEPY, Workspace, osmosis_run_command

FLOWS = Path(__file__).with_name("processes_flows.py")
BURN = "processes_flows:Burn"
WORKERS = 2
BACKENDS = ("local", "processes")
REPEATS = 3


@dataclass(frozen=True)
class Workload:
    """One side-by-side workload: its rows, classes, concurrency and target (None: report)."""

    name: str
    rows: int
    workflow: str
    grader: str
    concurrency: int
    limit: float | None
    what: str


WORKLOADS = {
    w.name: w
    for w in (
        Workload("W13", 400, ECHO, BURN, 8, 0.6, "a grader burning 20 ms of pure-Python CPU"),
        Workload("W14", 2000, SLEEPY, EXACT_MATCH, 200, 1.15, "a workflow sleeping 0.05 s"),
        Workload("W1p", 20_000, ECHO, EXACT_MATCH, 64, None, "W1's trivial rows"),
    )
}


def command(bench: Bench, work: Workload, backend: str, *, rows: int, out: Path) -> list[str]:
    """``osmosis-run eval`` of the workload on ``rows`` rows with ``backend``, into ``out``."""
    workers = ["--workers", str(WORKERS)] if backend == "processes" else []
    return [
        *bench.cli, "eval", str(bench.ws.dataset(rows)), "--workflow", work.workflow,
        "--grader", work.grader, "--concurrency", str(work.concurrency), "--out", str(out),
        "--backend", backend, *workers,
    ]  # fmt: skip


def busy_s() -> float:
    """CPU seconds this machine has spent on anything but idling since it started."""
    with open("/proc/stat", encoding="ascii") as stat:
        ticks = [int(n) for n in stat.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle, iowait


@dataclass(frozen=True)
class Timed:
    """One measured eval, and the CPU the rest of the machine took meanwhile."""

    run: EvalRun
    others_cpu_s: float


def run(bench: Bench, work: Workload, backend: str, *, rows: int, name: str) -> Timed:
    """One measured eval; its run directory is deleted at once when in RAM."""
    out = bench.ws.fresh(f"{name}-{backend}", in_memory=True)
    before = busy_s()
    done = bench.run_eval(command(bench, work, backend, rows=rows, out=out), rows=rows, name=name)
    others = busy_s() - before - done.process.cpu_s
    if backend == "processes":
        lost = done.summary.get("backend", {}).get("workers_lost")
        if lost:
            log(f"{name}: {lost} worker process(es) lost: {done.summary['backend']['lost']}")
    bench.ws.drop_from_memory(done.out)
    return Timed(done, others)


def side_by_side(bench: Bench, work: Workload, repeats: int) -> Line:
    """The workload with each backend, alternating; the ratio of the median walls."""
    rows = bench.rows(work.rows)
    log(f"{work.name}: one unmeasured run of each backend, {rows} rows, {work.what}")
    for backend in BACKENDS:
        run(bench, work, backend, rows=rows, name=f"{work.name}-warm")
    runs: dict[str, list[Timed]] = {backend: [] for backend in BACKENDS}
    for n in range(repeats):
        log(f"{work.name}: pair {n + 1} of {repeats} ({', '.join(BACKENDS)})")
        for backend in BACKENDS:
            runs[backend].append(run(bench, work, backend, rows=rows, name=work.name))
    walls = {b: [m.run.process.wall_s for m in done] for b, done in runs.items()}
    medians = {b: statistics.median(w) for b, w in walls.items()}
    ratio = medians["processes"] / medians["local"]

    def median(field: str, backend: str) -> float:
        return statistics.median(float(getattr(m.run.process, field)) for m in runs[backend])

    def inner(backend: str) -> float:
        return statistics.median(m.run.inner_wall_s for m in runs[backend])

    limit = float("inf") if work.limit is None else work.limit
    line = report(
        work.name,
        [Check("processes wall / local wall", ratio, limit)],
        f"{rows} rows, {work.what}, concurrency {work.concurrency}: median whole-process wall "
        f"(start-up included) of {repeats} runs with --backend processes --workers {WORKERS} / "
        f"median of {repeats} runs with --backend local, alternating after one unmeasured run "
        f"of each; run directories in {'RAM (tmpfs)' if bench.ws.memory_root else 'the workspace'}"
        "; inner_ratio: the runners' own walls (summary.json wall_s); cpu_s: the eval process "
        "with its writer and worker processes; others_cpu_s: what the rest of the machine "
        "spent meanwhile (/proc/stat), one per run",
        rows=rows,
        concurrency=work.concurrency,
        workers=WORKERS,
        pairs=repeats,
        local_wall_s=medians["local"],
        processes_wall_s=medians["processes"],
        local_walls_s=walls["local"],
        processes_walls_s=walls["processes"],
        pair_ratios=[p / q for p, q in zip(walls["processes"], walls["local"], strict=True)],
        inner_ratio=inner("processes") / inner("local"),
        local_inner_wall_s=inner("local"),
        processes_inner_wall_s=inner("processes"),
        local_cpu_s=median("cpu_s", "local"),
        processes_cpu_s=median("cpu_s", "processes"),
        local_rss_mib=median("rss_mib", "local"),
        processes_rss_mib=median("rss_mib", "processes"),
        local_others_cpu_s=[m.others_cpu_s for m in runs["local"]],
        processes_others_cpu_s=[m.others_cpu_s for m in runs["processes"]],
        workers_lost=sum(m.run.summary["backend"]["workers_lost"] for m in runs["processes"]),
    )
    if work.limit is None:
        line["target"] = "report (no target)"
        line["holds"] = True
    return line


def main(argv: list[str] | None = None) -> int:
    """Run the chosen workloads; print one JSON line each."""
    parser = argparse.ArgumentParser(prog="python -m tests.perf.processes")
    parser.add_argument("--only", default=",".join(WORKLOADS), help="e.g. W13,W14,W1p")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every row count")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="alternating pairs")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--no-settle", action="store_true", help="on disk: measure at once")
    args = parser.parse_args(argv)
    known = {name.upper(): name for name in WORKLOADS}
    asked = [w.strip().upper() for w in args.only.split(",")]
    if unknown := [w for w in asked if w not in known]:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from W13, W14, W1p")
    if args.scale <= 0 or args.repeats < 1:
        parser.error("--scale must be positive and --repeats at least 1")
    ws = Workspace(keep=args.keep)
    try:
        shutil.copy(FLOWS, ws.root)
        # No floor.py here: every figure is a ratio of two evals of the same rows.
        bench = Bench(ws, cli=osmosis_run_command(), floor=Path(os.devnull), scale=args.scale)
        wait = 0.0 if args.no_settle or ws.memory_root is not None else quiet_for()
        if wait:
            log(f"the last suite deleted its files {QUIET_S - wait:.0f}s ago: waiting {wait:.0f}s")
            time.sleep(wait)
        bench.warm_up()  # compiles osmosis-run and the flows: workers start from bytecode too
        for name in (known[w] for w in asked):
            print(json.dumps(side_by_side(bench, WORKLOADS[name], args.repeats)), flush=True)
    finally:
        ws.close()
    log("processes benchmarks done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
