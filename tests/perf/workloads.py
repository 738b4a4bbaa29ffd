"""The workloads W1..W7 of bench/README.md (W7: issue 12), each returning the JSON line it reports.

How the README's words are read:

- "osmosis-run eval wall" is the whole process, startup included, timed around the subprocess.
- "floor wall" is the ``wall_s`` that floor.py prints: its own loop over the rows, without
  interpreter startup (floor.py defines the figure so: "a runner's wall time on the same rows,
  divided by this one's"). The floor's whole-process wall is reported beside it.
- W2's "wall" is the runner's wall from summary.json (from the first rollout to the last
  result written): the README qualifies W1's and W5's walls as "whole process, startup
  included" and not this one, whose ideal has no start-up term. The whole-process ratio is
  reported beside it as ``whole_process_figure``.
- W5 and W6 repeat the command and report the median (every run is listed).
- W1-ram's "wall of the wave-1 build side by side" is that build's whole-process wall on the
  same rows, installed in a venv of its own with this environment's dependency versions
  (baseline.py), the two programs alternating run by run in RAM, after one unmeasured run of
  each (the first full-size run in RAM pays for fresh tmpfs pages); the ratio is of the medians.
  "This build" is the working tree installed the same way (a regular install in a venv of its
  own), so that neither program pays for the other's kind of install or environment at start.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import ray_workloads
from .baseline import DEFAULT_REVISION, Baseline
from .measure import Measured, measure
from .workspace import ECHO, EXACT_MATCH, MEMORY_DIR, SLEEPY, HarnessError, Workspace

W1_ROWS, W2_ROWS, W3_ROWS, W4_SMALL, W4_BIG = 20_000, 2_000, 10_000, 20_000, 200_000
TRIVIAL_CONCURRENCY, W2_CONCURRENCY = 64, 100
SLEEP_S = 0.05
REPEATS = 5
W6_REPEATS = 3
W7_ROWS = 5_000
W1_RAM_PAIRS = 5
FLOOR_BASIS = (
    "floor wall = floor.py's printed wall_s (its loop, no interpreter startup), the mean of "
    "its runs right before and right after the eval"
)

Line = dict[str, Any]


@dataclass(frozen=True)
class Check:
    """One target: ``figure <= limit``."""

    name: str
    figure: float
    limit: float
    unit: str = ""

    @property
    def holds(self) -> bool:
        """Whether the target holds."""
        return self.figure <= self.limit

    @property
    def target(self) -> str:
        """The target as the README writes it."""
        return f"<= {self.limit:g}{self.unit}"


def report(workload: str, checks: list[Check], basis: str, **raw: Any) -> Line:
    """The JSON line of a workload: its first figure and target, whether all hold, raw numbers."""
    line: Line = {
        "workload": workload,
        "figure": round(checks[0].figure, 3),
        "target": "; ".join(c.target for c in checks),
        "holds": all(c.holds for c in checks),
        "basis": basis,
    }
    if len(checks) > 1:
        line["checks"] = [
            {"name": c.name, "figure": round(c.figure, 3), "target": c.target, "holds": c.holds}
            for c in checks
        ]
    line.update({key: _round(value) for key, value in raw.items()})
    line["loadavg_1m"] = round(os.getloadavg()[0], 2)  # the machine is shared: how busy it was
    return line


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, list):
        return [_round(v) for v in value]
    return value


def log(message: str) -> None:
    """Progress, on stderr."""
    print(f"perf: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Floor:
    """floor.py run right before and right after an eval; the floor is their mean.

    The disk's speed drifts; the mean of the two runs that bracket the eval is the floor at the
    time the eval ran (both runs are reported).
    """

    before: tuple[float, Measured]
    after: tuple[float, Measured]

    @property
    def wall_s(self) -> float:
        """The mean printed wall_s."""
        return (self.before[0] + self.after[0]) / 2

    @property
    def cpu_s(self) -> float:
        """The mean CPU time."""
        return (self.before[1].cpu_s + self.after[1].cpu_s) / 2

    def fields(self) -> dict[str, float]:
        """The raw figures of both runs, for the JSON line."""
        return {
            "floor_wall_s": self.wall_s,
            "floor_before_wall_s": self.before[0],
            "floor_after_wall_s": self.after[0],
            "floor_before_sys_s": self.before[1].sys_s,
            "floor_after_sys_s": self.after[1].sys_s,
            "floor_cpu_s": self.cpu_s,
        }


@dataclass
class EvalRun:
    """One measured ``osmosis-run eval``: the command, its process and its summary.json."""

    cmd: list[str]
    out: Path
    rows: int
    process: Measured
    summary: dict[str, Any]

    @property
    def inner_wall_s(self) -> float:
        """The runner's own wall (summary.json): no startup, no preparation."""
        return float(self.summary.get("wall_s") or 0.0)


class Bench:
    """Runs the workloads in one workspace, at a scale of the README's row counts."""

    def __init__(
        self,
        ws: Workspace,
        *,
        cli: list[str],
        floor: Path,
        scale: float,
        baseline: Baseline | None = None,
    ) -> None:
        self.ws = ws
        self.cli = cli
        self.floor = floor
        self.scale = scale
        self.baseline = baseline
        self.baseline_cli: list[str] | None = None
        self.baseline_error: HarnessError | None = None
        # W1-ram's "this build": the working tree installed like the baseline, in its own venv.
        self.current = Baseline(None) if baseline is not None else None
        self.current_cli: list[str] | None = None
        self.w1: EvalRun | None = None

    def rows(self, count: int) -> int:
        """``count`` scaled by ``--scale``."""
        return max(1, round(count * self.scale))

    def workloads(self) -> dict[str, Callable[[], Line]]:
        """The workloads by id, in the order they run."""
        return {
            "W1": self.w1_trivial,
            "W1-ram": self.w1_ram,
            "W2": self.w2_sleeping,
            "W3": self.w3_unlimited,
            "W4": self.w4_memory,
            "W5": self.w5_startup,
            "W6": self.w6_resume,
            "W7": self.w7_remote,
            "W8": self.w8_serve,
            "W9": lambda: ray_workloads.w9(self),
            "W10": lambda: ray_workloads.w10(self),
        }

    # -- running the two programs --------------------------------------------------------

    def _measure(self, cmd: list[str], name: str) -> Measured:
        return measure(cmd, cwd=self.ws.root, logs=self.ws.root / "logs" / name)

    def run_floor(
        self, dataset: Path, name: str, *, in_memory: bool = False
    ) -> tuple[float, Measured]:
        """Run floor.py on ``dataset``; return its printed wall_s and its process."""
        out = self.ws.fresh(f"{name}-floor", in_memory=in_memory)
        process = self._measure([sys.executable, str(self.floor), str(dataset), str(out)], name)
        process.check("floor.py")
        try:
            printed = json.loads(process.stdout.strip().splitlines()[-1])
            return float(printed["wall_s"]), process
        except (IndexError, KeyError, ValueError) as exc:
            raise HarnessError(f"floor.py printed no wall_s: {process.stdout!r}") from exc

    def eval_command(
        self,
        dataset: Path,
        *,
        workflow: str,
        concurrency: int,
        out: Path,
        cli: list[str] | None = None,
    ) -> list[str]:
        """``osmosis-run eval`` (or ``cli eval``) with the exact-match grader, a fresh ``--out``."""
        return [
            *(cli or self.cli),
            "eval",
            str(dataset),
            "--workflow",
            workflow,
            "--grader",
            EXACT_MATCH,
            "--concurrency",
            str(concurrency),
            "--out",
            str(out),
        ]

    def run_eval(self, cmd: list[str], *, rows: int, name: str) -> EvalRun:
        """Run an eval command; check that every row finished with reward 1.0."""
        out = Path(cmd[cmd.index("--out") + 1])
        process = self._measure(cmd, name)
        process.check(f"osmosis-run eval ({name})")
        summary_path = out / "summary.json"
        if not summary_path.is_file():
            raise HarnessError(f"osmosis-run eval ({name}) left no {summary_path}")
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        success = summary.get("counts", {}).get("success")
        if summary.get("rollouts") != rows or success != rows or not summary.get("complete"):
            raise HarnessError(
                f"osmosis-run eval ({name}) did not finish {rows} successful rollouts: "
                f"rollouts={summary.get('rollouts')} counts={summary.get('counts')}"
            )
        return EvalRun(cmd=cmd, out=out, rows=rows, process=process, summary=summary)

    def trivial_eval(
        self,
        rows: int,
        name: str,
        *,
        quiet: bool = False,
        in_memory: bool = False,
        cli: list[str] | None = None,
    ) -> EvalRun:
        """The trivial workflow + exact match at concurrency 64 over ``rows`` rows."""
        dataset = self.ws.dataset(rows)
        out = self.ws.fresh(f"{name}-eval", in_memory=in_memory)
        cmd = self.eval_command(
            dataset, workflow=ECHO, concurrency=TRIVIAL_CONCURRENCY, out=out, cli=cli
        )
        if not quiet:
            log(
                f"{name}: osmosis-run eval, {rows} rows, trivial, concurrency {TRIVIAL_CONCURRENCY}"
            )
        return self.run_eval(cmd, rows=rows, name=name)

    def warm_up(self) -> None:
        """Run --help and a 1-row eval once, unmeasured, so that caches are warm for everyone.

        Bytecode is compiled first, as ``pip install`` does: with PYTHONDONTWRITEBYTECODE set
        (this machine sets it) an editable install would otherwise compile every module of
        osmosis-run and of the benchmark's workflows at each start.
        """
        import compileall

        import osmosis_run

        for folder in (Path(osmosis_run.__file__).parent, self.ws.root):
            compileall.compile_dir(folder, quiet=1)
        log("warm-up: osmosis-run --help and a 1-row eval (not measured)")
        self._measure([*self.cli, "--help"], "warm-up").check("osmosis-run --help")
        self.trivial_eval(1, "warm-up")
        if self.baseline_cli is not None:
            self.trivial_eval(1, "warm-up-baseline", cli=self.baseline_cli)
        if self.current_cli is not None:
            self.trivial_eval(1, "warm-up-current", cli=self.current_cli)

    def prepare_baseline(self) -> None:
        """Build (or find cached) the W1-ram baseline's venv; W1-ram reports a failure."""
        if self.baseline is None or self.baseline_cli is not None or self.baseline_error:
            return
        try:
            self.baseline_cli = self.baseline.command(log)
            if self.current is not None:
                self.current_cli = self.current.command(log)
        except HarnessError as exc:
            log(f"W1-ram: the baseline cannot be built: {exc}")
            self.baseline_error = exc

    # -- the workloads -------------------------------------------------------------------

    def floor_around(
        self, rows: int, name: str, run: Callable[[], EvalRun], *, in_memory: bool = False
    ) -> tuple[Floor, EvalRun]:
        """floor.py right before and right after ``run()``, on the same rows."""
        dataset = self.ws.dataset(rows)
        log(f"{name}: floor.py on {rows} rows (before)")
        before = self.run_floor(dataset, name, in_memory=in_memory)
        evaluated = run()
        log(f"{name}: floor.py on {rows} rows (after)")
        after = self.run_floor(dataset, name, in_memory=in_memory)
        return Floor(before, after), evaluated

    def in_ram(self, rows: int) -> dict[str, float]:
        """W1 again with both programs writing to RAM: the runner's own CPU cost, no disk.

        Not a bench target: a noise-free companion to W1, whose figure moves with the disk.
        """
        if self.ws.memory_root is None:
            return {}
        floor, run = self.floor_around(
            rows,
            "W1-ram",
            lambda: self.trivial_eval(rows, "W1-ram", in_memory=True),
            in_memory=True,
        )
        self.ws.drop_from_memory(run.out)
        return {
            "ram_figure": run.process.wall_s / floor.wall_s,
            "ram_eval_wall_s": run.process.wall_s,
            "ram_eval_inner_wall_s": run.inner_wall_s,
            "ram_floor_wall_s": floor.wall_s,
        }

    def w1_trivial(self) -> Line:
        """W1: eval wall / floor wall on 20,000 trivial rows, concurrency 64."""
        rows = self.rows(W1_ROWS)
        floor, run = self.floor_around(rows, "W1", lambda: self.trivial_eval(rows, "W1"))
        self.w1 = run
        wall = run.process.wall_s
        return report(
            "W1",
            [Check("eval wall / floor wall", wall / floor.wall_s, 1.5)],
            f"eval process wall (startup included) / {FLOOR_BASIS}",
            rows=rows,
            concurrency=TRIVIAL_CONCURRENCY,
            eval_wall_s=wall,
            eval_inner_wall_s=run.inner_wall_s,
            eval_cpu_s=run.process.cpu_s,
            eval_rss_mib=run.process.rss_mib,
            eval_rollouts_per_s=rows / wall,
            **floor.fields(),
            cpu_ratio=run.process.cpu_s / floor.cpu_s,
            **self.in_ram(rows),
        )

    def w1_ram(self) -> Line:
        """W1-ram: W1 in RAM, this build's wall / the baseline build's, the two alternating."""
        if self.ws.memory_root is None:
            raise HarnessError(f"W1-ram writes to RAM, and {MEMORY_DIR} is missing or full")
        self.prepare_baseline()
        if self.baseline is None or self.baseline_cli is None or self.current is None:
            raise self.baseline_error or HarnessError("W1-ram needs a baseline revision")
        builds = {"current": self.current_cli or self.cli, "baseline": self.baseline_cli}
        rows = self.rows(W1_ROWS)
        runs: dict[str, list[EvalRun]] = {build: [] for build in builds}

        def alternate() -> EvalRun:
            # One unmeasured run of each first: the first full-size run in RAM after the floor
            # was the slowest of its build's five in every suite run (by 0.1-0.5 s: fresh tmpfs
            # pages), and it was always this build's, the first of each pair.
            log(f"W1-ram: one unmeasured run of each build, then {W1_RAM_PAIRS} pairs")
            for build, cli in builds.items():
                warm = self.trivial_eval(
                    rows, f"W1-ram-warm-{build}", quiet=True, in_memory=True, cli=cli
                )
                self.ws.drop_from_memory(warm.out)
            log(f"W1-ram: {W1_RAM_PAIRS} x (this build, {self.baseline_name}) on {rows} rows")
            for _ in range(W1_RAM_PAIRS):
                for build, cli in builds.items():
                    run = self.trivial_eval(
                        rows, f"W1-ram-{build}", quiet=True, in_memory=True, cli=cli
                    )
                    self.ws.drop_from_memory(run.out)
                    runs[build].append(run)
            return runs["current"][-1]

        floor, _ = self.floor_around(rows, "W1-ram", alternate, in_memory=True)
        # Not osmosis-run's code, and in the walls: what each environment's site costs at start.
        startup = {
            build: self._startup_ms(python)
            for build, python in (
                ("current", self.current.python),
                ("baseline", self.baseline.python),
            )
        }
        walls = {build: [run.process.wall_s for run in done] for build, done in runs.items()}
        medians = {build: statistics.median(w) for build, w in walls.items()}

        def median_of(field: Callable[[EvalRun], float], build: str) -> float:
            return statistics.median(field(run) for run in runs[build])

        return report(
            "W1-ram",
            [
                Check(
                    f"eval wall / {self.baseline_name} wall, in RAM",
                    medians["current"] / medians["baseline"],
                    0.75,
                )
            ],
            f"median whole-process wall of {W1_RAM_PAIRS} runs of this build / median of "
            f"{W1_RAM_PAIRS} runs of {self.baseline_name} ({self.baseline.commit[:12]}), each "
            "installed from its tree into a venv of its own with this environment's dependency "
            "versions, alternating after one unmeasured run of each, both writing to RAM; "
            f"floor_figure: this build's median / {FLOOR_BASIS}",
            rows=rows,
            concurrency=TRIVIAL_CONCURRENCY,
            baseline=self.baseline.revision,
            baseline_commit=self.baseline.commit[:12],
            pairs=W1_RAM_PAIRS,
            current_walls_s=walls["current"],
            baseline_walls_s=walls["baseline"],
            current_median_s=medians["current"],
            baseline_median_s=medians["baseline"],
            pair_ratios=[c / b for c, b in zip(walls["current"], walls["baseline"], strict=True)],
            floor_figure=medians["current"] / floor.wall_s,
            baseline_floor_figure=medians["baseline"] / floor.wall_s,
            current_inner_wall_s=median_of(lambda run: run.inner_wall_s, "current"),
            baseline_inner_wall_s=median_of(lambda run: run.inner_wall_s, "baseline"),
            current_cpu_s=median_of(lambda run: run.process.cpu_s, "current"),
            baseline_cpu_s=median_of(lambda run: run.process.cpu_s, "baseline"),
            current_rss_mib=median_of(lambda run: run.process.rss_mib, "current"),
            baseline_rss_mib=median_of(lambda run: run.process.rss_mib, "baseline"),
            current_python_startup_ms=startup["current"],
            baseline_python_startup_ms=startup["baseline"],
            **floor.fields(),
        )

    def _startup_ms(self, python: str | Path) -> float:
        """Median wall of ``python -c pass`` (interpreter and site start-up), in ms."""
        runs = [self._measure([str(python), "-c", "pass"], "startup") for _ in range(REPEATS)]
        for run in runs:
            run.check(f"{python} -c pass")
        return statistics.median(run.wall_s for run in runs) * 1000

    @property
    def baseline_name(self) -> str:
        """How the lines name the baseline build."""
        if self.baseline is None:
            return "no baseline"
        if self.baseline.revision == DEFAULT_REVISION:
            return f"the wave-1 build {DEFAULT_REVISION}"
        return self.baseline.revision

    def w2_sleeping(self) -> Line:
        """W2: eval wall / ideal for 2,000 rows sleeping 50 ms, concurrency 100."""
        rows = self.rows(W2_ROWS)
        ideal = rows / W2_CONCURRENCY * SLEEP_S
        dataset = self.ws.dataset(rows)
        out = self.ws.fresh("W2-eval")
        cmd = self.eval_command(dataset, workflow=SLEEPY, concurrency=W2_CONCURRENCY, out=out)
        log(f"W2: osmosis-run eval, {rows} rows, sleeping, concurrency {W2_CONCURRENCY}")
        run = self.run_eval(cmd, rows=rows, name="W2")
        return report(
            "W2",
            [Check("run wall / ideal", run.inner_wall_s / ideal, 1.15)],
            "the runner's wall (summary.json wall_s) / (rows / concurrency x 0.05 s); "
            "whole_process_figure uses the eval process wall, startup included",
            rows=rows,
            concurrency=W2_CONCURRENCY,
            ideal_s=ideal,
            eval_inner_wall_s=run.inner_wall_s,
            eval_wall_s=run.process.wall_s,
            whole_process_figure=run.process.wall_s / ideal,
            eval_cpu_s=run.process.cpu_s,
            eval_rss_mib=run.process.rss_mib,
        )

    def w3_unlimited(self) -> Line:
        """W3: eval wall / (floor wall + 0.05 s), 10,000 rows sleeping, no concurrency limit."""
        rows = self.rows(W3_ROWS)
        dataset = self.ws.dataset(rows)

        def run() -> EvalRun:
            out = self.ws.fresh("W3-eval")
            cmd = self.eval_command(dataset, workflow=SLEEPY, concurrency=0, out=out)
            log(f"W3: osmosis-run eval, {rows} rows, sleeping, --concurrency 0 (unlimited)")
            return self.run_eval(cmd, rows=rows, name="W3")

        floor, evaluated = self.floor_around(rows, "W3", run)
        wall = evaluated.process.wall_s
        return report(
            "W3",
            [Check("eval wall / (floor wall + 0.05 s)", wall / (floor.wall_s + SLEEP_S), 2.0)],
            f"eval process wall (startup included) / ({FLOOR_BASIS} + 0.05 s)",
            rows=rows,
            concurrency="unlimited",
            eval_wall_s=wall,
            eval_inner_wall_s=evaluated.inner_wall_s,
            eval_cpu_s=evaluated.process.cpu_s,
            eval_rss_mib=evaluated.process.rss_mib,
            **floor.fields(),
        )

    def w4_memory(self) -> Line:
        """W4: peak RSS on 200,000 rows / on 20,000 rows, and the 200,000-row peak itself."""
        small_rows, big_rows = self.rows(W4_SMALL), self.rows(W4_BIG)
        # Memory does not depend on the medium; in RAM, the 800,000 files of the big run do not
        # cost a minute to delete and minutes of slow file creation after (see settle.py).
        small = self.trivial_eval(small_rows, "W4-small", in_memory=True)
        self.ws.drop_from_memory(small.out)
        big = self.trivial_eval(big_rows, "W4-big", in_memory=True)
        self.ws.drop_from_memory(big.out)
        small_rss, big_rss = small.process.rss_mib, big.process.rss_mib
        return report(
            "W4",
            [
                Check("peak RSS big / small", big_rss / small_rss, 1.10),
                Check("peak RSS big (MiB)", big_rss, 120, " MiB"),
            ],
            "ru_maxrss of each eval process, each measured in its own fresh helper process; "
            f"run directories in {'RAM (tmpfs)' if self.ws.memory_root else 'the workspace'}",
            rows_small=small_rows,
            rows_big=big_rows,
            rss_small_mib=small_rss,
            rss_big_mib=big_rss,
            wall_small_s=small.process.wall_s,
            wall_big_s=big.process.wall_s,
            rollouts_per_s_small=small_rows / small.process.wall_s,
            rollouts_per_s_big=big_rows / big.process.wall_s,
        )

    def w5_startup(self) -> Line:
        """W5: wall of ``osmosis-run --help`` and of a 1-row eval (median of 5 runs each)."""
        log(f"W5: osmosis-run --help x{REPEATS}")
        helps = [self._measure([*self.cli, "--help"], "W5-help") for _ in range(REPEATS)]
        for process in helps:
            process.check("osmosis-run --help")
        log(f"W5: osmosis-run eval of 1 row x{REPEATS}")
        evals = [self.trivial_eval(1, "W5-eval", quiet=True) for _ in range(REPEATS)]
        help_walls = [p.wall_s for p in helps]
        eval_walls = [r.process.wall_s for r in evals]
        return report(
            "W5",
            [
                Check("--help wall (s)", statistics.median(help_walls), 0.35, " s"),
                Check("1-row eval wall (s)", statistics.median(eval_walls), 1.0, " s"),
            ],
            f"whole-process wall, median of {REPEATS} runs each (after one unmeasured warm-up)",
            help_walls_s=help_walls,
            eval_walls_s=eval_walls,
            help_best_s=min(help_walls),
            eval_best_s=min(eval_walls),
            help_rss_mib=statistics.median(p.rss_mib for p in helps),
            eval_rss_mib=statistics.median(r.process.rss_mib for r in evals),
        )

    def w6_resume(self) -> Line:
        """W6: the W1 command again on its finished run (nothing left to do) / W1's wall."""
        if self.w1 is None:
            raise HarnessError("W6 needs W1's finished run, and W1 did not finish")
        w1 = self.w1
        log(f"W6: the W1 command again on its finished run x{W6_REPEATS}")
        runs = [self.run_eval(w1.cmd, rows=w1.rows, name="W6") for _ in range(W6_REPEATS)]
        walls = [r.process.wall_s for r in runs]
        wall = statistics.median(walls)
        return report(
            "W6",
            [Check("resume wall / W1 wall", wall / w1.process.wall_s, 0.15)],
            f"median of {W6_REPEATS} whole-process re-runs of the W1 command / W1 eval wall",
            rows=w1.rows,
            resume_wall_s=wall,
            resume_walls_s=walls,
            w1_wall_s=w1.process.wall_s,
            resume_rss_mib=statistics.median(r.process.rss_mib for r in runs),
        )

    def w7_remote(self) -> Line:
        """W7: ``eval --server`` against ``osmosis-run serve`` / in-process eval, same rows.

        The in-process eval runs right before and right after the served one; its wall is their
        mean (the machine's speed drifts). Both run at concurrency 64, the server too.
        """
        from .remote import serve

        rows = self.rows(W7_ROWS)
        dataset = self.ws.dataset(rows)
        before = self.trivial_eval(rows, "W7-local")
        out = self.ws.fresh("W7-server")
        with serve(self.cli, cwd=self.ws.root, out=out, concurrency=TRIVIAL_CONCURRENCY) as server:
            log(f"W7: osmosis-run eval --server {server.url}, {rows} rows, trivial")
            cmd = [*self.cli, "eval", str(dataset), "--server", server.url]
            cmd += ["--concurrency", str(TRIVIAL_CONCURRENCY), "--out", str(self.ws.fresh("W7"))]
            served = self.run_eval(cmd, rows=rows, name="W7")
            server_cpu = server.cpu_s()
        after = self.trivial_eval(rows, "W7-local")
        local = (before.process.wall_s + after.process.wall_s) / 2
        return report(
            "W7",
            [Check("eval --server wall / in-process eval wall", served.process.wall_s / local, 4)],
            "whole-process wall of eval --server against osmosis-run serve on loopback / mean "
            "whole-process wall of the in-process eval right before and right after it",
            rows=rows,
            concurrency=TRIVIAL_CONCURRENCY,
            server_eval_wall_s=served.process.wall_s,
            server_eval_inner_wall_s=served.inner_wall_s,
            server_eval_cpu_s=served.process.cpu_s,
            server_eval_rss_mib=served.process.rss_mib,
            server_cpu_s=server_cpu,
            local_wall_s=local,
            local_walls_s=[before.process.wall_s, after.process.wall_s],
            local_cpu_s=(before.process.cpu_s + after.process.cpu_s) / 2,
        )

    def w8_serve(self) -> Line:
        """W8 (tests/perf/w8_serve.py), run in the interop Python (osmosis-ai installed)."""
        from .w8_serve import ROLLOUTS, interop_python

        python = interop_python()
        script = Path(__file__).with_name("w8_serve.py")
        cmd = [python, str(script), "--rollouts", str(self.rows(ROLLOUTS))]
        process = self._measure(cmd, "w8")
        process.check("W8")
        line: Line = json.loads(process.stdout.strip().splitlines()[-1])
        return line
