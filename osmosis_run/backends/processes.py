"""Worker processes on this machine (``eval --backend processes``): crash isolation, hard
deadlines, every core.

Only the execution moves, as with Ray: the dataset, the window, deadlines, retries, metrics and
the one writer stay in the runner, so the run directory, resume, gates and reports are exactly
those of a local run (the backend is not part of the fingerprint). ``--workers N`` (default:
the CPU count) fresh interpreters (``_worker.py``), each in a process group of its own, load the
workflow and grader once and run many rollouts at once on their own event loops; each writes
its rollouts' artifacts in place, in the run directory.

``run`` sends an attempt to the least busy worker, over a socket pair: one frame there, one
back when it ends (and one when its grader starts, if the grader has a deadline or a rollout
server reports ``grading``); the frames of one pass of the event loop leave in one write. What
the runner watches, every ``TICK_S``:

- **Crashes.** A worker that dies (SIGSEGV in native code, ``os._exit``, SIGKILL from outside,
  the OOM killer) loses its in-flight attempts only: each raises ``AttemptLost`` (run again,
  not counted against ``--retries``), and, since which of them killed it is unknown, each runs
  again alone on a worker with nothing else in flight: the culprit then dies alone, and a
  rollout lost ``LOST_LIMIT + 1`` times in a row is recorded as "the worker process running
  this rollout died (SIGSEGV) 4 times in a row". The worker is replaced.
- **Hard deadlines.** Each stage of an attempt has its deadline (``--agent-timeout``,
  ``--grader-timeout``); the worker cancels it there, as a local run does. The runner counts
  from when it sent the attempt, and for the grader from when the worker said it started. Code
  that does not stop (it never yields: a ``time.sleep``, a C loop) is killed ``HARD_GRACE_S``
  later with its worker's whole process group (subprocesses it started included): that
  rollout is recorded as a ``timeout`` ("killed after not stopping at its deadline"), the
  worker's other attempts run again as lost ones. A cancelled attempt gets the same grace.
- **Memory.** With ``--max-worker-memory``, a worker whose resident memory (its own process's,
  read from ``/proc`` every ``MEMORY_EVERY_S``) passes it is killed and replaced; a rollout
  that was alone on it is recorded as a failure ("exceeded --max-worker-memory 2 GiB"),
  otherwise its attempts run again alone, so the next time the culprit is alone.
- **Recycling.** With ``--worker-recycle N``, a worker that has run N rollouts takes no more; a
  fresh one takes its place and the old one stops when its last rollout ends.

Each loss is one line on stderr as it happens, and summary.json's ``backend`` counts them.
Nothing outlives the run: ``close`` stops the workers (then kills their groups), and should the
runner itself be killed, each worker's guard process sees the runner's pipe end and kills its
group (``_worker.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from osmosis_run._construct import construct
from osmosis_run.backends._worker import Frames, Outbox
from osmosis_run.errors import BackendError, InfrastructureError
from osmosis_run.run.plan import Plan
from osmosis_run.run.seam import Attempt, AttemptLost, AttemptResult, Deadlines
from osmosis_run.run.settings.models import RunSpec, format_size
from osmosis_run.sdk.backend import DEFAULT_MAX_CONCURRENT
from osmosis_run.sdk.types import (
    ExecutionOutcome,
    ExecutionResult,
    RolloutErrorCategory,
    RolloutStatus,
)
from osmosis_run.store.layout import ROLLOUTS
from osmosis_run.store.writer import keep_from_forks

__all__ = [
    "HARD_GRACE_S",
    "Pool",
    "ProcessExecutor",
    "cpu_count",
    "describe_exit",
    "discard_warm",
    "load_spec",
    "warm_up",
]

# Past a stage's deadline, how long its code gets to stop before its worker is killed. The
# worker cancels the stage at the deadline; this covers code that yields late.
HARD_GRACE_S = 2.0
# How often deadlines and memory are checked.
TICK_S = 0.1
MEMORY_EVERY_S = 0.25
# How long a new worker gets to start and load the workflow.
READY_TIMEOUT_S = 120.0
# At the end, how long the workers get to stop before their groups are killed.
STOP_S = 2.0
# A replacement worker that cannot start is tried this many times; then its place stays empty,
# and with no worker left the run stops (exit 4).
REPLACE_TRIES = 3
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(eq=False, slots=True)
class _Call:
    """One attempt on a worker: what it waits for, and the deadline of the stage it is in."""

    tag: int
    attempt: Attempt
    future: asyncio.Future[AttemptResult]
    stage: str = "workflow"
    timeout: float | None = None  # the stage's own timeout (seconds)
    hard: float | None = None  # past it, the worker is killed (monotonic)
    workflow: ExecutionResult | None = None  # shipped when the grader has a deadline
    cancelled: bool = False  # its caller went; the worker must stop it within HARD_GRACE_S


@dataclass(eq=False)
class _Worker:
    """One worker process and what it is running."""

    process: subprocess.Popen[bytes]
    link: _Link
    calls: dict[int, _Call] = field(default_factory=dict)
    alone: bool = False  # running one rollout that was lost before, and nothing else
    retiring: bool = False  # --worker-recycle: takes nothing more, stops when idle
    ended: bool = False  # killed, died or stopped: its calls are settled
    taken: int = 0  # rollouts sent to it

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def usable(self) -> bool:
        """Whether it may take a rollout: alive (its socket open), not kept for one alone."""
        return not (self.ended or self.alone or self.link.closed.done())


class _Link(asyncio.Protocol):
    """The runner's end of one worker's socket: frames in, handed to the executor; frames out
    through an ``Outbox`` (those of one loop pass in one write)."""

    def __init__(self, on_message: Callable[[tuple[Any, ...]], None]) -> None:
        self.on_message = on_message
        self.frames = Frames()
        loop = asyncio.get_running_loop()
        self.outbox = Outbox(loop)
        self.closed: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.outbox.transport = transport

    def connection_lost(self, _exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        for message in self.frames.feed(data):
            self.on_message(message)

    def send(self, message: Any) -> None:
        self.outbox.send(message)

    def close(self) -> None:
        self.outbox.flush()
        if self.outbox.transport is not None:
            self.outbox.transport.close()


@dataclass(frozen=True, slots=True)
class Pool:
    """What a pool of workers runs, and how.

    Attributes:
        load: the settings fields a worker loads the classes from (``workflow``, ``grader``,
            their configs and overrides, ``import_paths``).
        artifact_root: where rollouts write their artifacts (``<root>/<rollout id>/artifacts``).
        workers: how many worker processes.
        per_worker: rollouts a worker runs at once by default (the pool's ``limit`` is that
            times the workers).
        window: the run's rollouts in flight (None: no limit), which sizes each worker's
            threads for ``asyncio.to_thread``.
        max_memory: bytes of resident memory a worker may hold (None: no limit).
        recycle: rollouts after which a worker is replaced (None: never).
    """

    load: dict[str, Any]
    artifact_root: str
    workers: int
    per_worker: int
    window: int | None = None
    max_memory: int | None = None
    recycle: int | None = None

    @classmethod
    def of_plan(cls, plan: Plan) -> Pool:
        """The pool of a plan's ``--workers`` options and classes."""
        run, e = plan.settings.run, plan.settings.execution
        config = plan.local_components().workflow_config
        workers = e.workers or cpu_count()
        per_worker = (
            config.concurrency.max_concurrent if config is not None else DEFAULT_MAX_CONCURRENT
        )
        limit = None if per_worker is None else workers * per_worker
        return cls(
            load=load_spec(run),
            artifact_root=str((plan.run_dir / ROLLOUTS).absolute()),
            workers=workers,
            per_worker=per_worker or 0,
            window=plan.window(limit),
            max_memory=e.max_worker_memory,
            recycle=e.worker_recycle,
        )


def load_spec(run: RunSpec) -> dict[str, Any]:
    """What a worker loads: the classes, configs and import paths of these settings."""
    return {
        "workflow": run.workflow,
        "grader": run.grader,
        "workflow_config": run.workflow_config,
        "grader_config": run.grader_config,
        "workflow_config_overrides": run.workflow_config_overrides,
        "grader_config_overrides": run.grader_config_overrides,
        "import_paths": run.import_paths,
    }


class ProcessExecutor:
    """Run attempts on a pool of worker processes (see the module docstring).

    Args:
        pool: what the workers load, how many, their limits.
        notify: one line for stderr, as it happens (a lost worker).
        on_grading: told the rollout id when its grader starts (a rollout server reports the
            ``grading`` status from it).
    """

    def __init__(
        self,
        pool: Pool,
        *,
        notify: Callable[[str], None] | None = None,
        on_grading: Callable[[str, ExecutionResult | None], None] | None = None,
    ) -> None:
        self.pool = pool
        self.count = pool.workers
        self._slots: list[_Worker | None] = []
        self._retiring: set[_Worker] = set()
        self._changed = asyncio.Event()
        self._suspects: set[str] = set()
        self._tags = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()
        self._watch: asyncio.Task[None] | None = None
        self._broken: InfrastructureError | None = None
        self._notify = notify
        self._on_grading = on_grading
        self._started = 0
        self._losses: list[dict[str, Any]] = []
        self._made: set[str] = set()  # rollouts whose artifacts directory exists already
        self._waiting_alone = 0  # rollouts waiting for an idle worker to run alone on

    @classmethod
    def from_plan(
        cls, plan: Plan, *, notify: Callable[[str], None] | None = None
    ) -> ProcessExecutor:
        """The executor of a plan's ``--workers`` options."""
        return cls(Pool.of_plan(plan), notify=notify)

    def stats(self) -> dict[str, Any]:
        """Workers started and lost, for summary.json's ``backend``."""
        return {
            "kind": "processes",
            "workers": self.count,
            "started": self._started,
            "workers_lost": len(self._losses),
            "rollouts_rerun": sum(loss["rollouts"] for loss in self._losses),
            "lost": [dict(loss) for loss in self._losses],
        }

    @property
    def limit(self) -> int | None:
        """The workflow config's limit (else 4) per worker, times the workers (None: the
        config says no limit)."""
        return self.count * self.pool.per_worker or None

    @property
    def local_artifacts(self) -> bool:
        """Always: the workers write into the run directory (same machine)."""
        return True

    def adopt_artifacts_dirs(self, rollout_ids: Iterable[str]) -> None:
        """Directories the writer process made ahead: the worker is told so with the attempt,
        and makes none itself."""
        self._made.update(rollout_ids)

    # -- getting ready ---------------------------------------------------------------

    async def open(self) -> None:
        """Start the workers and wait for each to load the workflow.

        Raises:
            BackendError: a worker cannot start or load the classes (nothing ran).
        """
        self._slots = [None] * self.count
        spawned = take_warm(self.count)
        try:
            async with asyncio.TaskGroup() as group:
                for index in range(self.count):
                    group.create_task(self._fill(index, spawned[index] if spawned else None))
        except BaseExceptionGroup as failed:
            await self.close()
            first: BaseException = failed
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None
        except BaseException:
            await self.close()
            raise
        self._watch = asyncio.get_running_loop().create_task(self._watching())

    async def _fill(self, index: int, spawned: _Spawned | None) -> None:
        self._slots[index] = await self._start(spawned)
        self._changed.set()

    async def _start(self, spawned: _Spawned | None = None) -> _Worker:
        """A new worker (``spawned`` ahead, else now), ready: its classes loaded.

        Raises:
            BackendError: it died or said why it cannot load them.
        """
        if spawned is None:
            spawned = await asyncio.to_thread(_spawn)
        process, ours = spawned
        ready: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        worker: _Worker | None = None

        def on_message(message: tuple[Any, ...]) -> None:
            if message[0] == "ready":
                if not ready.done():
                    ready.set_result(message[1])
            elif worker is not None:
                self._received(worker, message)

        loop = asyncio.get_running_loop()
        _, link = await loop.create_unix_connection(lambda: _Link(on_message), sock=ours)
        worker = _Worker(process, link)
        pool = self.pool
        notify = self._on_grading is not None
        runner = (sys.path, dict(os.environ))  # a workspace's [env] and [secrets] included
        link.send(("setup", pool.load, pool.artifact_root, pool.window, runner, notify))
        try:
            problem = await asyncio.wait_for(_first(ready, link.closed), READY_TIMEOUT_S)
        except TimeoutError:
            self._end(worker)
            raise BackendError(
                f"a worker process did not load the workflow within {READY_TIMEOUT_S:g} s"
            ) from None
        except BaseException:  # cancelled (``close`` while it was starting): it goes too
            self._end(worker)
            await _reap(process, STOP_S)  # exited and collected while the loop still runs
            raise
        if not ready.done():  # it died first
            code = await asyncio.to_thread(process.wait)
            self._end(worker)
            raise BackendError(
                f"a worker process could not start: it {describe_exit(code, verb=True)} (its "
                "error is above)"
            )
        if problem is not None:
            self._end(worker)
            raise BackendError(f"in a worker process: {problem}")
        self._started += 1
        task = loop.create_task(self._until_gone(worker))
        self._keep(task)
        return worker

    # -- running ---------------------------------------------------------------------

    async def run(self, attempt: Attempt, deadlines: Deadlines) -> AttemptResult:  # noqa: ARG002
        """Run the attempt on a worker; ``AttemptLost`` if the worker died meanwhile.

        The worker enforces each stage's deadline; one that does not stop is killed here.
        """
        request = attempt.request
        suspect = request.id in self._suspects
        worker = await self._pick(alone=suspect)
        tag = next(self._tags)
        call = _Call(tag, attempt, asyncio.get_running_loop().create_future())
        self._enter(call, "workflow", request.agent_timeout_sec)
        worker.calls[tag] = call
        worker.taken += 1
        if self.pool.recycle is not None and worker.taken >= self.pool.recycle:
            self._retire(worker)  # this one is its last
        context = attempt.context
        worker.link.send(
            (
                "run",
                tag,
                request,
                attempt.number,
                context.chat_completions_url,
                context.api_key,
                context.seed,
                request.grader_timeout_sec is not None,
                _take(self._made, request.id),
            )
        )
        try:
            result = await call.future
        except asyncio.CancelledError:
            if tag in worker.calls:  # watched until the worker says it stopped
                call.cancelled = True
                call.hard = time.monotonic() + HARD_GRACE_S
                worker.link.send(("cancel", tag))
            raise
        except AttemptLost:
            self._suspects.add(request.id)
            raise
        finally:
            if suspect:
                worker.alone = False
                self._changed.set()
        self._suspects.discard(request.id)
        return result

    @staticmethod
    def _enter(call: _Call, stage: str, timeout: float | None) -> None:
        call.stage, call.timeout = stage, timeout
        call.hard = None if timeout is None else time.monotonic() + timeout + HARD_GRACE_S

    async def _pick(self, *, alone: bool) -> _Worker:
        """The least busy worker, or with ``alone`` an idle one, kept for this call only.

        While a rollout waits to run alone, the least busy worker takes nothing new, so that
        it drains and the rollout gets it (otherwise new rows keep every worker busy and the
        lost rollouts wait for the end of the run).

        Raises:
            InfrastructureError: no worker is left and none can be started.
        """
        if alone:
            self._waiting_alone += 1
        try:
            while True:
                live = [w for w in self._slots if w is not None and w.usable]
                if alone:
                    idle = [w for w in live if not w.calls]
                    if idle:
                        idle[0].alone = True
                        return idle[0]
                elif live:
                    if self._waiting_alone:
                        live.remove(min(live, key=lambda w: len(w.calls)))  # draining
                    if live:
                        return min(live, key=lambda w: len(w.calls))
                if self._broken is not None and all(w is None for w in self._slots):
                    raise self._broken
                self._changed.clear()
                await self._changed.wait()
        finally:
            if alone:
                self._waiting_alone -= 1

    def _received(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        kind, tag = message[0], message[1]
        call = worker.calls.get(tag)
        if call is None:
            return  # settled when the worker was killed
        if call.cancelled:  # its caller went: whatever the worker says, it has stopped
            if kind != "grading":
                del worker.calls[tag]
                self._idle(worker)
            return
        if kind == "grading":
            call.workflow = message[2]
            self._enter(call, "grader", call.attempt.request.grader_timeout_sec)
            if self._on_grading is not None:
                self._on_grading(call.attempt.request.id, call.workflow)
            return
        del worker.calls[tag]
        if kind == "done":
            outcome, workflow_ms, grader_ms = message[2]
            call.future.set_result(AttemptResult(outcome, workflow_ms, grader_ms))
        elif kind == "bug":
            call.future.set_exception(BackendError(f"a worker process raised:\n{message[2]}"))
        else:  # "cancelled" without being asked: the worker is stopping
            call.future.set_exception(AttemptLost("its worker process stopped"))
        self._idle(worker)

    def _idle(self, worker: _Worker) -> None:
        """A call left the worker: a retiring one stops once idle; wake a rollout waiting to
        run alone."""
        if worker.retiring and not worker.calls and not worker.ended:
            self._retiring.discard(worker)
            self._keep(asyncio.get_running_loop().create_task(_stop([worker])))
        if not worker.calls:
            self._changed.set()

    def _retire(self, worker: _Worker) -> None:
        """--worker-recycle: the worker takes nothing more; a fresh one takes its place."""
        worker.retiring = True
        index = self._slots.index(worker)
        self._slots[index] = None
        self._retiring.add(worker)
        self._keep(asyncio.get_running_loop().create_task(self._replace(index)))

    # -- watching ----------------------------------------------------------------------

    async def _watching(self) -> None:
        """Kill workers whose code overran its deadline, or whose memory passed the limit."""
        limit = self.pool.max_memory
        next_memory = 0.0
        while True:
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            for worker in self._workers():
                late = [c for c in worker.calls.values() if c.hard is not None and now > c.hard]
                if late:
                    self._overran(worker, late[0])
            if limit is not None and now >= next_memory:
                next_memory = now + MEMORY_EVERY_S
                for worker in self._workers():
                    rss = _rss(worker.pid)
                    if rss is not None and rss > limit:
                        self._over_memory(worker, rss, limit)

    def _workers(self) -> list[_Worker]:
        return [w for w in (*self._slots, *self._retiring) if w is not None and not w.ended]

    def _overran(self, worker: _Worker, late: _Call) -> None:
        """A stage did not stop at its deadline: the worker goes, that rollout is a timeout
        (or, cancelled, it did not stop within ``HARD_GRACE_S``: the worker goes)."""
        rollout = late.attempt.request.id
        if late.cancelled:
            del worker.calls[late.tag]
            why = f"rollout {rollout} did not stop within {HARD_GRACE_S:g} s of its cancellation"
            lost = AttemptLost(f"its worker process was killed: {why}")
            self._lose(worker, why, lost, kind="past a deadline")
            return
        seconds = late.timeout or 0.0
        failed = ExecutionResult(
            status=RolloutStatus.FAILURE,
            sample=late.workflow.sample if late.workflow is not None else None,
            err_message=(
                f"{late.stage} exceeded its {seconds:g}s deadline and was killed after not "
                f"stopping at its deadline (its worker process was replaced)"
            ),
            err_category=RolloutErrorCategory.TIMEOUT,
            extra_fields={"stage": late.stage},
        )
        if late.stage == "grader" and late.workflow is not None:
            outcome = construct(ExecutionOutcome, workflow=late.workflow, grader=failed)
        else:
            outcome = construct(ExecutionOutcome, workflow=failed, grader=None)
        del worker.calls[late.tag]
        late.future.set_result(AttemptResult(outcome, None, None))
        why = f"the {late.stage} of rollout {rollout} did not stop at its {seconds:g} s deadline"
        lost = AttemptLost(f"its worker process was killed: {why}")
        self._lose(worker, why, lost, kind="past a deadline")

    def _over_memory(self, worker: _Worker, rss: int, limit: int) -> None:
        """A worker passed --max-worker-memory: killed; a rollout alone on it is the culprit."""
        said = f"--max-worker-memory {format_size(limit)}"
        why = f"worker process {worker.pid} exceeded {said} ({format_size(rss)} resident)"
        live = [call for call in worker.calls.values() if not call.future.done()]
        if len(live) == 1 and len(worker.calls) == 1:  # alone on it: the culprit
            call = live[0]
            failed = ExecutionResult(
                status=RolloutStatus.FAILURE,
                sample=None,
                err_message=f"the worker process running this rollout exceeded {said} "
                f"({format_size(rss)} resident) and was killed",
                err_category=RolloutErrorCategory.AGENT_ERROR,
                extra_fields={"stage": call.stage},
            )
            worker.calls.clear()
            call.future.set_result(
                AttemptResult(construct(ExecutionOutcome, workflow=failed, grader=None), None, None)
            )
        lost = AttemptLost(why, repeated=f"the worker process running this rollout exceeded {said}")
        self._lose(worker, why, lost, kind="over memory", suspects=True)

    async def _until_gone(self, worker: _Worker) -> None:
        """Wait for the worker's socket to close; if nobody ended it, it died: say how."""
        await worker.link.closed
        if worker.ended:
            return
        code = await asyncio.to_thread(worker.process.wait)
        if worker.ended:
            return
        how = describe_exit(code)
        lost = AttemptLost(
            f"worker process {worker.pid} died ({how})",
            repeated=f"the worker process running this rollout died ({how})",
        )
        self._lose(
            worker, f"worker process {worker.pid} died ({how})", lost, kind=how, suspects=True
        )

    def _lose(
        self,
        worker: _Worker,
        why: str,
        lost: AttemptLost,
        *,
        kind: str,
        suspects: bool = False,
    ) -> None:
        """End the worker; its attempts run again (alone, if ``suspects``); replace it.

        ``kind`` says what happened in a word or two, for the summary: ``SIGSEGV``, ``exit
        code 3``, ``past a deadline``, ``over memory``.
        """
        if worker.ended:
            return
        calls = [call for call in worker.calls.values() if not call.future.done()]
        worker.calls.clear()
        self._end(worker)
        self._losses.append(
            {"pid": worker.pid, "kind": kind, "reason": why, "rollouts": len(calls)}
        )
        if self._notify is not None:
            if not calls:
                again = "it was replaced"
            else:
                again = (
                    "1 rollout runs again"
                    if len(calls) == 1
                    else f"{len(calls)} rollouts run again"
                )
            self._notify(f"osmosis-run: {why}; {again}")
        for call in calls:
            if suspects:
                self._suspects.add(call.attempt.request.id)
            call.future.set_exception(lost)
        if worker in self._retiring:
            self._retiring.discard(worker)
        elif worker in self._slots:
            index = self._slots.index(worker)
            self._slots[index] = None
            self._keep(asyncio.get_running_loop().create_task(self._replace(index)))
        self._changed.set()

    def _end(self, worker: _Worker) -> None:
        """Kill the worker's process group (its rollouts' subprocesses too); close its link."""
        worker.ended = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signal.SIGKILL)
        worker.link.close()
        self._keep(asyncio.get_running_loop().create_task(_reap(worker.process)))

    async def _replace(self, index: int) -> None:
        """Start a new worker in a place; after ``REPLACE_TRIES`` failures leave it empty."""
        last: BackendError | None = None
        for _ in range(REPLACE_TRIES):
            try:
                self._slots[index] = await self._start()
            except BackendError as exc:
                last = exc
                continue
            self._changed.set()
            return
        if all(w is None for w in self._slots):
            self._broken = InfrastructureError(
                f"every worker process was lost and none could be started again ({last})"
            )
        self._changed.set()

    def _keep(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop the workers (their groups killed after ``STOP_S``); nothing outlives the run."""
        if self._watch is not None:
            self._watch.cancel()
        workers = self._workers()
        await _stop(workers)
        for worker in workers:
            for call in worker.calls.values():
                if not call.future.done():
                    call.future.set_exception(AttemptLost("the run is closing"))
            worker.calls.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=STOP_S)
        self._slots = []
        self._retiring.clear()


async def _stop(workers: list[_Worker]) -> None:
    """Ask each worker to stop and collect its exit; the group of one still running after
    ``STOP_S`` (rollouts that do not stop) is killed."""
    for worker in workers:
        worker.ended = True
        worker.link.send(("stop",))
        worker.link.outbox.flush()
    if workers:
        await asyncio.wait([asyncio.ensure_future(_reap(w.process, STOP_S)) for w in workers])
    for worker in workers:
        if worker.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(worker.pid, signal.SIGKILL)
            await _reap(worker.process, STOP_S)
        worker.link.close()


async def _first(ready: asyncio.Future[str | None], closed: asyncio.Future[None]) -> str | None:
    """The worker's "ready" answer, or None as soon as its socket closed first."""
    waits: list[asyncio.Future[Any]] = [ready, closed]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    return ready.result() if ready.done() else None


async def _reap(process: subprocess.Popen[bytes], seconds: float = 10.0) -> None:
    """Collect a worker's exit status within ``seconds`` (no zombie is left)."""
    await asyncio.to_thread(_wait, process, seconds)


def _wait(process: subprocess.Popen[bytes], seconds: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(seconds)


def _take(ids: set[str], rollout_id: str) -> bool:
    """Whether ``rollout_id`` was in ``ids`` (it is not any more)."""
    if rollout_id in ids:
        ids.discard(rollout_id)
        return True
    return False


# -- starting workers ------------------------------------------------------------------

# A started worker process and the runner's end of its socket.
_Spawned = tuple[subprocess.Popen[bytes], socket.socket]
_alive: int | None = None  # the read end of the pipe every worker's guard watches
_warm: list[_Spawned] = []


def _alive_fd() -> int:
    """The pipe whose write end only this process holds (never closed: it closes when the
    process ends, however it ends, and each worker's guard then kills its group)."""
    global _alive
    if _alive is None:
        read, write = os.pipe()
        keep_from_forks(write)  # a child forked by user code does not keep the workers alive
        _alive = read
    return _alive


def _spawn() -> _Spawned:
    """Start a worker process: a fresh interpreter in a process group of its own."""
    alive = _alive_fd()
    ours, theirs = socket.socketpair()
    try:
        command = [sys.executable, "-m", "osmosis_run.backends._worker"]
        process = subprocess.Popen(
            [*command, str(theirs.fileno()), str(alive)],
            pass_fds=(theirs.fileno(), alive),
            stdin=subprocess.DEVNULL,
            stdout=2,  # user code's prints: stderr (stdout carries results lines only)
            start_new_session=True,  # killed as a group, and never by the terminal's Ctrl-C
        )
    finally:
        theirs.close()
    return process, ours


def warm_up(count: int) -> None:
    """Start ``count`` worker processes now, for the next ``ProcessExecutor.open`` to take.

    A worker spends most of its start importing Python (osmosis-run, pydantic, the user's
    code); started before the run is prepared, that overlaps with the runner's own start.
    """
    discard_warm()
    _warm.extend(_spawn() for _ in range(count))


def take_warm(count: int) -> list[_Spawned]:
    """The workers ``warm_up`` started, if there are ``count`` of them (else none)."""
    if len(_warm) != count:
        discard_warm()
        return []
    taken = _warm[:]
    _warm.clear()
    return taken


def discard_warm() -> None:
    """End workers started ahead that no run took (the run could not start)."""
    for process, sock in _warm:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        sock.close()
        _wait(process, 5.0)
    _warm.clear()


def _rss(pid: int) -> int | None:
    """A process's resident memory in bytes (Linux's /proc), or None."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity, as a container or ``taskset`` sets it),
    the default number of workers."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def describe_exit(code: int, *, verb: bool = False) -> str:
    """A process's end in words: ``SIGSEGV``, ``exit code 3`` (``verb``: "was killed by
    SIGSEGV", "exited with code 3")."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}" if verb else name
    return f"exited with code {code}" if verb else f"exit code {code}"
