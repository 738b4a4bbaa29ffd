"""A storm of hard kills, of the runner and of its writer process, then a resume: nothing lost.

Every round starts the same ``osmosis-run eval`` over a few thousand rollouts and SIGKILLs the
runner or its writer process (``_writer_child.py``) at a random moment; after a runner kill the
next round sometimes starts at once, while the orphaned writer process still holds the run
directory's lock (stopped, to be sure of it). Then one run goes to the end. The rollouts leave
one marker per execution ($EVAL_MARKERS), so the test knows what ran in every round and checks
it against what became durable. Processes are found and watched through Linux's /proc.

With ``--backend processes`` the same storm also SIGKILLs worker processes: one or two in every
round before its kill, and one in the final run. A worker's rollouts run again in the same run
(so a rollout may run once more per worker kill), and no worker process (nor its guard) of the
run may outlive it, whether the runner exits or is killed.

The storm is seeded: ``KILL_STORM_SEED=N`` replays one (the kill moments still vary with timing).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest import subprocess_env, write_jsonl
from test_eval_process import EXE

from osmosis_run.results.records import ResultLine, Summary
from osmosis_run.run.scheduler import WRITER_PROCESS_FROM
from osmosis_run.run.seam import LOST_LIMIT
from osmosis_run.store.store import BATCH, WRITE_QUEUE, read_results

SEED = int(os.environ.get("KILL_STORM_SEED", "1776"))
ROWS = 3000
CONCURRENCY = 64
KILLS = 10  # at least 3 of each kind, the rest drawn at random
MOST_LINES = 120  # a round kills after 30 to MOST_LINES new results lines
# Every round has enough left to do for a writer process (and the final run has the most).
assert KILLS * MOST_LINES < ROWS // 2 - WRITER_PROCESS_FROM
# What one kill may make run again: a rollout re-runs only if it had run (left its marker) and
# its line was not durable yet. Runner kill: up to 2 x concurrency in flight or just finished
# (a slot is released before the rollout is recorded), fewer than BATCH gathered for the next
# hand-over, and one torn frame the writer process drops. Writer kill: the same in flight, a
# batch gathered before and one after the kill (a full batch, or the next tick, surfaces the
# error), and the batches handed over but not written: ``write`` returns once at most
# WRITE_QUEUE are unanswered, so WRITE_QUEUE + 1 while it waits.
RUNNER_KILL_RERUNS = 2 * CONCURRENCY + 2 * BATCH
WRITER_KILL_RERUNS = 2 * CONCURRENCY + (WRITE_QUEUE + 3) * BATCH
# --backend processes: the workers, and how many a round kills at most. A worker kill makes its
# rollouts in flight (at most the window) run again, in the same run; a rollout lost more than
# LOST_LIMIT times in a row in one run would be recorded as a failure, so no run loses more.
WORKERS = 2
WORKER_KILLS = 2
assert WORKER_KILLS <= LOST_LIMIT
WORKER_KILL_RERUNS = CONCURRENCY
WORKER_MODULE = b"osmosis_run.backends._worker"
BACKENDS = {"local": [], "processes": ["--backend", "processes", "--workers", str(WORKERS)]}
T = TypeVar("T")
WAIT_S = 60.0  # generous: the machine may be loaded by other tests
GONE_S = 10.0  # a killed runner's workers are killed by their guards: at once, give or take load


@dataclass
class Dataset:
    """The storm's rows: what each planned rollout is and how it must end."""

    path: Path
    status: dict[str, str]  # rollout id -> the status its line must have


def write_dataset(path: Path, rng: random.Random) -> Dataset:
    """ROWS rows sleeping 10-80 ms; about 2% unreadable or without a prompt, 5% failing."""
    rows: list[Any] = []
    status: dict[str, str] = {}
    for i in range(ROWS):
        draw = rng.random()
        if draw < 0.01:
            rows.append('{"id": "broken", "prompt": ')  # not JSON: no id, so row@<index>
            status[f"row@{i}.s0"] = "invalid"
            continue
        row: dict[str, Any] = {"id": f"r{i}", "prompt": f"p{i}", "ground_truth": f"p{i}"}
        row["metadata"] = {"sleep": round(rng.uniform(0.01, 0.08), 3), "fail": draw > 0.95}
        if i % 2:
            row["ground_truth"] = "x"  # graded 0.0: still a success
        if draw < 0.02:
            del row["prompt"]
        rows.append(row)
        status[f"r{i}.s0"] = "invalid" if draw < 0.02 else "failure" if draw > 0.95 else "success"
    return Dataset(write_jsonl(path, rows), status)


@dataclass
class Kill:
    """One round of the storm: whom it kills, and whether the next round waits for the rest."""

    target: str  # "runner" or "writer"
    immediate: bool = False  # after a runner kill: start the next run while its writer finishes
    hold: bool = False  # and stop that writer until the next run waits for the directory's lock
    lines: int = 0  # results lines the round waits for before it kills
    delay: float = 0.0  # then a random moment more
    workers: list[int] = field(default_factory=list)  # first, a worker killed after each count
    exit_code: int | None = None
    stderr: str = ""
    wasted: int | None = None  # executions whose line never became durable (None: see before)

    def resumed(self) -> str:
        if self.hold:
            return " (resumed at once, its writer process stopped until the resume waits)"
        return " (resumed at once)" if self.immediate else ""

    def describe(self, number: int) -> str:
        lines = self.stderr.strip().splitlines() or [""]
        rerun = f"{self.wasted} re-run{' here and in the next run' if self.immediate else ''}"
        if self.wasted is None:
            rerun = "re-runs counted with the round before"
        workers = f" (first a worker after {' then '.join(map(str, self.workers))} lines)"
        return (
            f"round {number}: kill {self.target}{self.resumed()}{workers if self.workers else ''} "
            f"after {self.lines} lines + {self.delay:.3f} s; exit {self.exit_code}; {rerun}; "
            f"stderr {lines[0]!r} ... {lines[-1]!r}"
        )


def plan_kills(rng: random.Random, *, workers: bool = False) -> list[Kill]:
    """KILLS kills in random order, at least 3 of each; every other runner kill resumed at once.

    The first resumed at once (and others at random) finds the killed run's writer process
    stopped (SIGSTOP), holding the run directory's lock, until the resume waits for it. With
    ``workers``, each round first kills 1 to WORKER_KILLS worker processes.
    """
    targets = ["runner"] * 3 + ["writer"] * 3
    targets += [rng.choice(["runner", "writer"]) for _ in range(KILLS - 6)]
    rng.shuffle(targets)
    kills = [
        Kill(t, lines=rng.randint(30, MOST_LINES), delay=rng.uniform(0, 0.04)) for t in targets
    ]
    runner_kills = [kill for kill in kills if kill.target == "runner"]
    immediate = runner_kills[rng.randint(0, 1) :: 2]  # every other one: some of each
    for n, kill in enumerate(immediate):
        kill.immediate = True
        kill.hold = n == 0 or rng.random() < 0.5
    for kill in kills if workers else []:  # drawn last: the same seed, the same local storm
        kill.workers = plan_worker_kills(rng)
    return kills


def plan_worker_kills(rng: random.Random) -> list[int]:
    """The results lines to wait for before each of 1 to WORKER_KILLS worker kills."""
    return [rng.randint(10, 40) for _ in range(rng.randint(1, WORKER_KILLS))]


@dataclass(frozen=True)
class Process:
    """A process found in /proc: its id and start time (so a reused id is never mistaken)."""

    pid: int
    started: int

    def alive(self) -> bool:
        stat = _stat(self.pid)
        return stat is not None and stat[1] == self.started and stat[2] != "Z"


def _stat(pid: int) -> tuple[int, int, str] | None:
    """A process's parent id, start time and state, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[19]), fields[0]


def children(pid: int) -> list[tuple[Process, list[bytes]]]:
    """A process's children and their command lines.

    They come from ``/proc/<pid>/task/*/children``, not a walk of all of /proc: the storm polls
    this every 10 ms, and a busy machine has thousands of processes."""
    pids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            pids += [int(child) for child in task.read_text().split()]
        except OSError:
            continue
    found: list[tuple[Process, list[bytes]]] = []
    for child in pids:
        stat = _stat(child)
        if stat is None or stat[0] != pid:
            continue
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        found.append((Process(child, stat[1]), argv))
    return found


def find_writer(runner: subprocess.Popen[bytes], results: Path) -> Process | None:
    """The runner's writer process: its child running _writer_child.py on this run's results."""
    for child, argv in children(runner.pid):
        if any(a.endswith(b"_writer_child.py") for a in argv) and os.fsencode(results) in argv:
            return child
    return None


def find_workers(runner: subprocess.Popen[bytes]) -> list[Process]:
    """The runner's live worker processes (``-m osmosis_run.backends._worker``), oldest first
    (not one killed a moment ago that the runner has yet to reap)."""
    found = [c for c, argv in children(runner.pid) if WORKER_MODULE in argv and c.alive()]
    return sorted(found, key=lambda p: (p.started, p.pid))


def workers_of(markers: Path) -> list[Process]:
    """Every live worker process (or worker's guard) of the test whose markers go to ``markers``.

    A walk of all of /proc, by command line and environment: what outlived its runner is no
    longer a child of it."""
    needle = b"\0EVAL_MARKERS=" + os.fsencode(markers) + b"\0"
    found: list[Process] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if WORKER_MODULE not in (entry / "cmdline").read_bytes():
                continue
            if needle not in b"\0" + (entry / "environ").read_bytes():
                continue
        except OSError:
            continue
        stat = _stat(int(entry.name))
        if stat is not None and stat[2] != "Z":
            found.append(Process(int(entry.name), stat[1]))
    return found


def opened(pid: int, path: Path) -> bool:
    """Whether a process has ``path`` open (the run directory, to lock it)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    target = os.fsencode(path.resolve())
    for fd in fds:
        try:
            if os.fsencode(os.readlink(fd)) == target:
                return True
        except OSError:
            continue
    return False


def wait_until(done: Callable[[], T | None], what: str, timeout: float = WAIT_S) -> T:
    """Poll ``done()`` until it returns something other than None; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = done()
        if value is not None:
            return value
        time.sleep(0.01)
    raise AssertionError(f"seed {SEED}: timed out waiting for {what}")


class LineCounter:
    """Counts the lines of results.jsonl as they are appended (reads only what is new)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.count = 0

    def read(self) -> int:
        if not self.path.exists():  # the writer process has not opened it yet
            return self.count
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        self.count += data.count(b"\n")
        return self.count


@dataclass
class Period:
    """Rounds between two moments when nothing of the run is left running."""

    durable: set[str]  # rollout ids whose line was durable when it began
    markers: Counter[str]  # executions so far, by rollout id
    kills: list[Kill] = field(default_factory=list)
    runs: int = 0  # osmosis-run processes started in it
    worker_kills: int = 0  # worker processes killed in it (each may make a rollout run again)


class Storm:
    """Runs the rounds and checks, after each, what ran against what became durable."""

    def __init__(self, tmp_path: Path, data: Dataset, backend: str = "local") -> None:
        self.dir = tmp_path / "run"
        self.results = self.dir / "results.jsonl"
        self.markers = tmp_path / "markers"
        self.markers.mkdir()
        self.data = data
        self.args = [*EXE, "eval", str(data.path), "-w", "eval_flows:FailingMarker",
                     "-g", "eval_flows:ExactMatch", "--out", str(self.dir), "-n", "1",
                     "-c", str(CONCURRENCY), "--max-error-rate", "1", *BACKENDS[backend]]  # fmt: skip
        self.env = subprocess_env(EVAL_MARKERS=str(self.markers))
        self.log: list[Kill] = []
        self.period = Period(set(), Counter())
        self.orphans: list[Process] = []
        self.held: Process | None = None  # a killed run's writer process, stopped (SIGSTOP)
        self.runner: subprocess.Popen[bytes] | None = None
        self.workers_seen: set[Process] = set()  # every worker process of the runs
        self.killed_workers: list[Process] = []  # in the current run
        self.final_workers: Sequence[int] = ()  # the final run kills a worker after each count

    def context(self) -> str:
        rounds = "\n".join(kill.describe(n) for n, kill in enumerate(self.log, start=1))
        if self.final_workers:
            after = " then ".join(map(str, self.final_workers))
            rounds += f"\nfinal run: a worker killed after {after} lines"
        return f"seed {SEED} (replay with KILL_STORM_SEED={SEED})\n{rounds}"

    def start(self, name: str) -> tuple[subprocess.Popen[bytes], Path]:
        stderr = self.dir.parent / f"{name}.stderr"
        with stderr.open("wb") as err:
            self.runner = subprocess.Popen(
                self.args, cwd=self.dir.parent, env=self.env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        self.period.runs += 1
        self.killed_workers = []
        return self.runner, stderr

    def round(self, kill: Kill) -> None:
        self.log.append(kill)
        runner, stderr = self.start(f"round{len(self.log)}")

        self.release(runner, stderr)
        found = self.writer(runner, stderr)
        self.kill_workers(runner, stderr, kill.workers)
        self.wait_lines(runner, stderr, kill.lines)
        time.sleep(kill.delay)
        self.check_running(runner, stderr)
        self.kill(kill, runner, found)
        kill.stderr = stderr.read_text(errors="replace")
        summary = self.summary()
        assert summary is None or not summary.complete, (
            f"a killed run is complete\n{self.context()}"
        )
        self.period.kills.append(kill)
        if not kill.immediate:
            self.settle()

    def writer(self, runner: subprocess.Popen[bytes], stderr: Path) -> Process:
        """The run's writer process, once it runs: the resume has read results.jsonl back, so
        lines can be counted from here."""

        def found() -> Process | None:
            self.check_running(runner, stderr)
            return find_writer(runner, self.results)

        return wait_until(found, "the writer process")

    def wait_lines(self, runner: subprocess.Popen[bytes], stderr: Path, count: int) -> None:
        """Wait for ``count`` more results lines than there are now."""
        counter = LineCounter(self.results)
        goal = counter.read() + count

        def reached() -> bool | None:
            self.check_running(runner, stderr)
            return counter.read() >= goal or None

        wait_until(reached, f"{count} more results lines")

    def check_running(self, runner: subprocess.Popen[bytes], stderr: Path) -> None:
        if runner.poll() is not None:
            raise AssertionError(
                f"exited before its kill ({runner.returncode}): {stderr.read_text()}\n"
                f"{self.context()}"
            )

    def release(self, runner: subprocess.Popen[bytes], stderr: Path) -> None:
        """Once the new run waits for the lock a stopped writer process holds, let that go on.

        Until then the new run writes nothing: no writer process, not one more line.
        """
        if self.held is None:
            return
        size = self.results.stat().st_size

        def waiting() -> bool | None:
            self.check_running(runner, stderr)
            return opened(runner.pid, self.dir) or None

        wait_until(waiting, "the resume to wait for the run directory's lock")
        time.sleep(0.2)  # a few attempts at the lock
        self.check_running(runner, stderr)
        assert find_writer(runner, self.results) is None, f"the lock let it in\n{self.context()}"
        assert self.results.stat().st_size == size, f"written under the lock\n{self.context()}"
        self.cont()

    def cont(self) -> None:
        if self.held is not None:
            if self.held.alive():
                os.kill(self.held.pid, signal.SIGCONT)
            self.held = None

    def kill_workers(
        self, runner: subprocess.Popen[bytes], stderr: Path, lines: Sequence[int]
    ) -> None:
        """SIGKILL the oldest worker process (loaded, busy) after each count of results lines."""
        if lines:
            self.writer(runner, stderr)
        for count in lines:
            self.wait_lines(runner, stderr, count)
            # Not one killed a moment ago: a worker is listed until the runner has reaped it.
            workers = wait_until(
                lambda: [w for w in find_workers(runner) if w not in self.killed_workers] or None,
                "worker processes",
            )
            self.workers_seen.update(workers)
            os.kill(workers[0].pid, signal.SIGKILL)
            self.killed_workers.append(workers[0])
            self.period.worker_kills += 1

    def kill(self, kill: Kill, runner: subprocess.Popen[bytes], writer: Process) -> None:
        self.orphans.append(writer)
        self.workers_seen.update(find_workers(runner))
        if kill.target == "runner":
            if kill.hold:
                os.kill(writer.pid, signal.SIGSTOP)
                self.held = writer
            runner.kill()
            kill.exit_code = runner.wait(WAIT_S)
            return
        assert writer.alive(), f"the writer process is gone before its kill\n{self.context()}"
        os.kill(writer.pid, signal.SIGKILL)
        kill.exit_code = runner.wait(WAIT_S)  # it notices by itself: no run hangs on a lost writer
        assert kill.exit_code != 0, f"a lost writer process went unnoticed\n{self.context()}"

    def finish(self, workers: Sequence[int] = ()) -> subprocess.CompletedProcess[str]:
        """Run the same command to the end, killing a worker after each count of ``workers``
        results lines; check the period it closes."""
        self.final_workers = workers
        runner, stderr = self.start("final")
        self.release(runner, stderr)
        self.kill_workers(runner, stderr, workers)
        runner.wait(WAIT_S)
        self.settle()
        return subprocess.CompletedProcess(self.args, runner.returncode, "", stderr.read_text())

    def stop(self) -> None:
        """After a failure: end the runner this test started, if it still runs."""
        self.cont()
        if self.runner is not None and self.runner.poll() is None:
            self.runner.kill()
            self.runner.wait(WAIT_S)

    def settle(self) -> None:
        """Wait for every process of the period to end, then check what ran against the lines."""
        wait_until(
            lambda: not any(o.alive() for o in self.orphans) or None, "writer processes to end"
        )
        self.orphans.clear()
        wait_until(
            lambda: not workers_of(self.markers) or None,
            f"the worker processes to end (they outlive their runner)\n{self.context()}",
            GONE_S,
        )
        before, durable, markers = self.period, self.durable(), self.executions()
        ran = {rid for rid in markers if markers[rid] > before.markers[rid]}
        context = self.context()
        most_runs = max(markers[rid] - before.markers[rid] for rid in ran) if ran else 0
        # A run executes a rollout once, and once more each time a worker running it is lost
        assert most_runs <= before.runs + before.worker_kills, (
            f"a rollout ran twice in one run\n{context}"
        )
        assert before.durable <= durable, (
            f"durable lines lost: {before.durable - durable}\n{context}"
        )
        assert not ran & before.durable, (
            f"ran again though durable: {ran & before.durable}\n{context}"
        )
        invalid = {rid for rid, status in self.data.status.items() if status == "invalid"}
        assert not ran & invalid, f"invalid rows ran: {ran & invalid}\n{context}"
        assert durable - before.durable <= ran | invalid, f"lines without a run\n{context}"
        executions = sum(markers[rid] - before.markers[rid] for rid in ran)
        wasted = executions - len(ran & durable)
        if before.kills:
            before.kills[0].wasted = wasted
        most = sum(
            RUNNER_KILL_RERUNS if k.target == "runner" else WRITER_KILL_RERUNS for k in before.kills
        )
        most += before.worker_kills * WORKER_KILL_RERUNS
        assert wasted <= most, (
            f"{wasted} executions wasted, at most {most} may be\n{self.context()}"
        )
        self.period = Period(durable, markers)

    def durable(self) -> set[str]:
        """The rollout ids results.jsonl holds (a torn last line is not durable); no repeats."""
        ids = [line.rollout_id for line in read_results(self.dir)]
        repeated = [rid for rid, n in Counter(ids).items() if n > 1]
        assert not repeated, f"repeated lines: {repeated}\n{self.context()}"
        return set(ids)

    def executions(self) -> Counter[str]:
        return Counter({p.name: len(p.read_text()) for p in self.markers.iterdir()})

    def summary(self) -> Summary | None:
        path = self.dir / "summary.json"
        return Summary.model_validate_json(path.read_bytes()) if path.exists() else None


def check_rollout_files(run_dir: Path, line: ResultLine, context: str) -> None:
    """result.json (and trajectory.json when there is a transcript) agree with the line."""
    where = run_dir / "rollouts" / line.rollout_id
    rollout = f"{line.rollout_id} ({line.status})"
    assert (where / "result.json").is_file(), f"{rollout}: no result.json\n{context}"
    result = json.loads((where / "result.json").read_bytes())
    assert (result["rollout_id"], result["status"]) == (line.rollout_id, line.status), context
    # The files are those of the execution whose line is durable, not of one a kill cut short
    finished = result["timings"]["finished_at"]
    assert finished == line.finished_at, f"{rollout}: result.json of another run\n{context}"
    transcript = line.status == "success"  # FailingMarker raises instead of returning one
    assert (line.messages is not None) == transcript, f"{rollout}: messages\n{context}"
    has_trajectory = (where / "trajectory.json").is_file()
    assert has_trajectory == transcript, f"{rollout}: trajectory.json {has_trajectory}\n{context}"
    if transcript:
        trajectory = json.loads((where / "trajectory.json").read_bytes())
        agrees = (trajectory["session_id"], trajectory["extra"]["osmosis"]["reward"])
        assert agrees == (line.rollout_id, line.reward), f"{rollout}: trajectory.json\n{context}"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds processes in /proc")
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_kill_storm_then_a_resume_runs_every_rollout_exactly_once(
    tmp_path: Path, backend: str
) -> None:
    rng = random.Random(SEED)
    data = write_dataset(tmp_path / "d.jsonl", rng)
    storm = Storm(tmp_path, data, backend)
    workers = backend == "processes"
    try:
        for kill in plan_kills(rng, workers=workers):
            storm.round(kill)
        final = storm.finish(plan_worker_kills(rng) if workers else ())
    finally:
        storm.stop()
    context = storm.context()
    print(context)
    statuses = Counter(data.status.values())
    errors = ROWS - statuses["success"]
    assert final.returncode == 3, f"{final.stderr}\n{context}"
    assert final.stderr.splitlines()[-1] == (
        f"FAILED: error budget: exceeded ({errors} of {ROWS} rollouts failed, "
        f"{errors / ROWS:.2%}; 1 allowed)"
    ), context
    assert "Traceback" not in final.stderr, context

    raw = storm.results.read_bytes()
    assert raw.endswith(b"\n"), f"a torn last line is left\n{context}"
    lines = [ResultLine.model_validate_json(text) for text in raw.splitlines()]
    ids = [line.rollout_id for line in lines]
    assert len(ids) == len(set(ids)) == ROWS, f"{Counter(ids).most_common(3)}\n{context}"
    assert {line.rollout_id: line.status for line in lines} == data.status, context
    for line in lines:
        check_rollout_files(storm.dir, line, context)

    summary = storm.summary()
    assert summary is not None
    assert (summary.rollouts, summary.planned, summary.complete) == (ROWS, ROWS, True), context
    assert not summary.interrupted
    assert {status: n for status, n in summary.counts.items() if n} == statuses, context
    executions = storm.executions()
    assert set(executions) == {rid for rid, s in data.status.items() if s != "invalid"}, context
    kills = Counter(kill.target for kill in storm.log)
    assert min(kills["runner"], kills["writer"]) >= 3, context
    assert any(kill.hold for kill in storm.log), context
    if workers:
        check_no_worker_left(storm, final.stderr)


def check_no_worker_left(storm: Storm, stderr: str) -> None:
    """Every worker process the runs had (and each one's guard) is gone; the final run said
    which of its workers died, each on a line of its own, and summary.json counts them."""
    context = storm.context()
    assert storm.workers_seen, context
    assert not [p for p in storm.workers_seen if p.alive()], context
    assert not workers_of(storm.markers), context
    lines = stderr.splitlines()
    for worker in storm.killed_workers:
        said = f"osmosis-run: worker process {worker.pid} died (SIGKILL); "
        assert sum(line.startswith(said) for line in lines) == 1, f"{said}\n{stderr}\n{context}"
    summary = storm.summary()
    assert summary is not None, context
    assert summary.backend is not None, context
    assert summary.backend["kind"] == "processes", context
    assert summary.backend["workers_lost"] == len(storm.killed_workers), context
