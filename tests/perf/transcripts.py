"""The long-transcript benchmark W15: ``python -m tests.perf.transcripts``.

1,000 rollouts at concurrency 64, each sleeping 0.05 s in five sleeps of 0.01 s and returning a
256 KB transcript (32 messages of 8 KB; ``transcripts_flows.Transcript``). Each sleep's lateness
is the event loop's lag as a running rollout sees it, while the runner encodes and writes the
rollouts that finished around it (results line, result.json, trajectory.json). Figures:

- the lag's p99 over every probe of a run (target <= 10 ms), the median of ``--repeats`` runs;
  the same run with 1 KB transcripts (32 messages of 32 characters) is reported beside it;
- the eval's whole-process wall / (the 1 KB run's wall + the wall a floor-like writer needs to
  write the same bytes), target <= 1.5: what the long transcripts cost beyond writing them.
  The floor (``_FLOOR``, floor.py's code: no framework, stdlib ``json``) writes, per rollout,
  its directories, a trajectory.json, a result.json and a results line, each holding the
  transcript, as the runner does;
- the eval process's peak RSS (target <= 300 MiB), the largest of its runs.

Runs alternate (1 KB, 256 KB, floor) ``--repeats`` times after one unmeasured 1 KB run. Run
directories are on disk (the workspace) unless ``--ram`` puts them in /dev/shm; each line says
where. ``--baseline REV`` adds, to every round, the 256 KB run of that revision's build
(``baseline.py``: its own venv), so that a change is measured side by side with the build before
it on a shared machine (``baseline_*`` figures).

    python -m tests.perf.transcripts                       # W15, one JSON line
    python -m tests.perf.transcripts --scale 0.2 --repeats 1   # a quick look
    python -m tests.perf.transcripts --baseline 308f89a    # and that build's figures beside
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .baseline import Baseline
from .measure import Measured, measure
from .settle import QUIET_S, quiet_for
from .transcripts_flows import MESSAGE_BYTES_ENV, MESSAGES, PROBES
from .workloads import Bench, Check, EvalRun, Line, log, report
from .workspace import HarnessError, Workspace, osmosis_run_command

FLOWS = Path(__file__).with_name("transcripts_flows.py")
WORKFLOW, GRADER = "transcripts_flows:Transcript", "transcripts_flows:Count"
ROLLOUTS, CONCURRENCY, REPEATS = 1000, 64, 3
LONG, SHORT = 8192, 32  # characters per message: 256 KB and 1 KB transcripts
LAG_P99_MS, WALL_RATIO, RSS_MIB = 10.0, 1.5, 300.0

# floor.py's per-rollout work with the long transcript: parse a row, make the rollout's
# directories, write a trajectory, a result and a results line, each holding the transcript.
_FLOOR = """\
import json, pathlib, sys, time
from transcripts_flows import transcript
dataset, out, size = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3])
(out / "rollouts").mkdir(parents=True)
t0 = time.perf_counter()
rows = 0
with open(dataset) as f, (out / "results.jsonl").open("w") as results:
    for i, line in enumerate(f):
        row = json.loads(line)
        rid = f"r{i:08d}-s0"
        where = out / "rollouts" / rid
        (where / "artifacts").mkdir(parents=True)
        messages = transcript(rid, size)
        steps = [{"source": m["role"], "message": m["content"]} for m in messages]
        trajectory = {"schema_version": "ATIF-v1.7", "session_id": rid, "steps": steps}
        (where / "trajectory.json").write_text(json.dumps(trajectory))
        result = {"rollout_id": rid, "request": {"prompt": row["user_prompt"]},
                  "sample": {"messages": messages, "label": row["ground_truth"]}}
        (where / "result.json").write_text(json.dumps(result))
        line_out = {"rollout_id": rid, "row_index": i, "status": "success", "reward": 1.0,
                    "messages": messages}
        results.write(json.dumps(line_out) + "\\n")
        rows += 1
wall = time.perf_counter() - t0
print(json.dumps({"rows": rows, "wall_s": round(wall, 4), "rollouts_per_s": round(rows / wall, 1)}))
"""


@dataclass(frozen=True)
class LagRun:
    """One measured eval and the lateness of every probe in it (ms)."""

    run: EvalRun
    lags_ms: list[float]
    bytes_per_rollout: float

    @property
    def p99_ms(self) -> float:
        """The 99th percentile of the lags (nearest rank)."""
        return percentile(self.lags_ms, 0.99)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile ``q`` (0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def run_size(out: Path) -> int:
    """Bytes of every file in a run directory."""
    return sum(f.stat().st_size for f in out.rglob("*") if f.is_file())


class Transcripts:
    """The W15 runs in one workspace."""

    def __init__(
        self, bench: Bench, *, rows: int, in_memory: bool, baseline: list[str] | None = None
    ) -> None:
        self.bench = bench
        self.rows = rows
        self.in_memory = in_memory
        self.baseline = baseline
        self.dataset = bench.ws.dataset(rows)

    def eval(self, size: int, name: str, *, cli: list[str] | None = None) -> LagRun:
        """One eval with ``size``-character messages; its lags read back from results.jsonl."""
        out = self.bench.ws.fresh(name, in_memory=self.in_memory)
        cmd = [
            *(cli or self.bench.cli), "eval", str(self.dataset), "--workflow", WORKFLOW,
            "--grader", GRADER, "--concurrency", str(CONCURRENCY), "--out", str(out),
        ]  # fmt: skip
        os.environ[MESSAGE_BYTES_ENV] = str(size)  # the eval process inherits it
        done = self.bench.run_eval(cmd, rows=self.rows, name=name)
        lags: list[float] = []
        with (out / "results.jsonl").open("rb") as results:
            for raw in results:
                metrics = json.loads(raw)["metrics"]
                lags += (float(metrics[f"lag_ms_{n}"]) for n in range(PROBES))
        written = run_size(out) / self.rows
        self.bench.ws.drop_from_memory(out)
        return LagRun(done, lags, written)

    def floor(self, size: int, name: str) -> tuple[float, Measured, float]:
        """The floor-like writer on the same rows: its printed wall, its process, its bytes."""
        out = self.bench.ws.fresh(f"{name}-floor", in_memory=self.in_memory)
        cmd = [sys.executable, "-c", _FLOOR, str(self.dataset), str(out), str(size)]
        process = measure(cmd, cwd=self.bench.ws.root, logs=self.bench.ws.root / "logs" / name)
        process.check("the floor-like writer")
        try:
            wall = float(json.loads(process.stdout.strip().splitlines()[-1])["wall_s"])
        except (IndexError, KeyError, ValueError) as exc:
            raise HarnessError(f"the floor printed no wall_s: {process.stdout!r}") from exc
        written = run_size(out) / self.rows
        self.bench.ws.drop_from_memory(out)
        return wall, process, written

    def w15(self, repeats: int) -> Line:
        """The runs, alternating; the line."""
        log(
            f"W15: one unmeasured 1 KB run, then {repeats} x (1 KB, 256 KB, floor), {self.rows} rows"
        )
        self.eval(SHORT, "W15-warm")
        short: list[LagRun] = []
        long: list[LagRun] = []
        before: list[LagRun] = []
        floors: list[tuple[float, Measured, float]] = []
        for n in range(repeats):
            log(f"W15: round {n + 1} of {repeats}")
            short.append(self.eval(SHORT, "W15-1k"))
            long.append(self.eval(LONG, "W15-256k"))
            if self.baseline is not None:
                before.append(self.eval(LONG, "W15-256k-baseline", cli=self.baseline))
            floors.append(self.floor(LONG, "W15"))
        line = self.line(short, long, floors, repeats)
        if before:
            line.update(baseline_figures(before))
        return line

    def line(
        self,
        short: list[LagRun],
        long: list[LagRun],
        floors: list[tuple[float, Measured, float]],
        repeats: int,
    ) -> Line:
        """The JSON line of W15."""
        p99 = statistics.median(r.p99_ms for r in long)
        short_p99 = statistics.median(r.p99_ms for r in short)
        wall = statistics.median(r.run.process.wall_s for r in long)
        short_wall = statistics.median(r.run.process.wall_s for r in short)
        floor_wall = statistics.median(f[0] for f in floors)
        rss = max(r.run.process.rss_mib for r in long)
        where = "RAM (tmpfs)" if self.in_memory and self.bench.ws.memory_root else "disk"
        return report(
            "W15",
            [
                Check("event-loop lag p99 (ms), 256 KB transcripts", p99, LAG_P99_MS, " ms"),
                Check("wall / (1 KB wall + floor wall)", wall / (short_wall + floor_wall), 1.5),
                Check("peak RSS (MiB)", rss, RSS_MIB, " MiB"),
            ],
            f"{self.rows} rollouts at concurrency {CONCURRENCY}, each sleeping {PROBES} x 0.01 s "
            f"and returning {MESSAGES} messages of {LONG} characters (1 KB run: of {SHORT}); lag: "
            "how late each asyncio.sleep(0.01) woke inside the rollouts, p99 over a run's "
            f"probes, median of {repeats} runs; wall: whole-process, median of {repeats}; floor: "
            "a floor.py-like writer's printed wall writing the same transcripts (trajectory, "
            "result, results line); peak RSS: the largest 256 KB run's; runs alternate after "
            f"one unmeasured 1 KB run; run directories on {where}",
            rows=self.rows,
            concurrency=CONCURRENCY,
            repeats=repeats,
            run_dirs=where,
            lag_p99_ms=p99,
            lag_p99s_ms=[r.p99_ms for r in long],
            lag_p50_ms=statistics.median(percentile(r.lags_ms, 0.5) for r in long),
            lag_max_ms=max(max(r.lags_ms) for r in long),
            short_lag_p99_ms=short_p99,
            short_lag_p99s_ms=[r.p99_ms for r in short],
            short_lag_p50_ms=statistics.median(percentile(r.lags_ms, 0.5) for r in short),
            short_lag_max_ms=max(max(r.lags_ms) for r in short),
            wall_s=wall,
            walls_s=[r.run.process.wall_s for r in long],
            inner_wall_s=statistics.median(r.run.inner_wall_s for r in long),
            short_wall_s=short_wall,
            short_walls_s=[r.run.process.wall_s for r in short],
            floor_wall_s=floor_wall,
            floor_walls_s=[f[0] for f in floors],
            cpu_s=statistics.median(r.run.process.cpu_s for r in long),
            short_cpu_s=statistics.median(r.run.process.cpu_s for r in short),
            floor_cpu_s=statistics.median(f[1].cpu_s for f in floors),
            rss_mib=rss,
            rss_mibs=[r.run.process.rss_mib for r in long],
            short_rss_mib=max(r.run.process.rss_mib for r in short),
            bytes_per_rollout=statistics.median(r.bytes_per_rollout for r in long),
            floor_bytes_per_rollout=statistics.median(f[2] for f in floors),
        )


def baseline_figures(runs: list[LagRun]) -> Line:
    """The baseline build's 256 KB runs, for the line."""
    figures = {
        "baseline_lag_p99_ms": statistics.median(r.p99_ms for r in runs),
        "baseline_lag_p99s_ms": [r.p99_ms for r in runs],
        "baseline_lag_max_ms": max(max(r.lags_ms) for r in runs),
        "baseline_wall_s": statistics.median(r.run.process.wall_s for r in runs),
        "baseline_walls_s": [r.run.process.wall_s for r in runs],
        "baseline_rss_mib": max(r.run.process.rss_mib for r in runs),
    }
    return {key: round(v, 4) if isinstance(v, float) else v for key, v in figures.items()}


def main(argv: list[str] | None = None) -> int:
    """Run W15; print its JSON line."""
    parser = argparse.ArgumentParser(prog="python -m tests.perf.transcripts")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the rollout count")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="rounds of the three runs")
    parser.add_argument("--ram", action="store_true", help="run directories in /dev/shm")
    parser.add_argument("--baseline", metavar="REV", help="also run this revision's build")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--no-settle", action="store_true", help="on disk: measure at once")
    args = parser.parse_args(argv)
    if args.scale <= 0 or args.repeats < 1:
        parser.error("--scale must be positive and --repeats at least 1")
    ws = Workspace(keep=args.keep)
    try:
        shutil.copy(FLOWS, ws.root)
        bench = Bench(ws, cli=osmosis_run_command(), floor=Path(os.devnull), scale=args.scale)
        wait = 0.0 if args.no_settle or args.ram else quiet_for()
        if wait:
            log(f"the last suite deleted its files {QUIET_S - wait:.0f}s ago: waiting {wait:.0f}s")
            time.sleep(wait)
        baseline = Baseline(args.baseline).command(log) if args.baseline else None
        if baseline is not None:
            bench.baseline_cli = baseline  # warmed up with the rest
        bench.warm_up()
        if args.ram and ws.memory_root is None:
            log("--ram: /dev/shm is missing or full; run directories go to disk")
        rows = bench.rows(ROLLOUTS)
        work = Transcripts(bench, rows=rows, in_memory=args.ram, baseline=baseline)
        print(json.dumps(work.w15(args.repeats)), flush=True)
    finally:
        ws.close()
    log("transcripts benchmark done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
