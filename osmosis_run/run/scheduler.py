"""The eval engine: rows in, graded rollouts out, through a bounded window of tasks.

A ``Scheduler`` executes one ``Plan`` (``run/plan.py``: everything decided before a rollout
runs). ``Scheduler.open`` opens the run directory; ``run()`` streams the selected rows (a row
feed, ``run/feeds.py``) through the rollout lifecycle (``run/lifecycle.py``: its attempts through
an ``Executor``, ``run/seam.py``, within the run's ``Deadlines``, ``run/deadlines.py``, then its
records) with at most ``concurrency`` rollouts in flight, and hands every finished rollout to the
store and then to the reporter. ``stop()`` (Ctrl-C) cancels what is in flight; what finished is
kept, and the run resumes where it stopped.

Faults, and what each one leaves (every planned rollout ends with exactly one results line,
except those a stop or an infrastructure failure leaves unfinished, and then the run resumes):

- whatever user code raises, ``BaseException`` included, is that rollout's failure (LocalBackend);
  a value that cannot be written as JSON is that rollout's ``validation_error``;
- rows of a stream (stdin, a FIFO) are read by a thread (``ThreadFeed``), so a slow producer
  never holds the event loop; a regular file's rows are made on the loop (``InlineFeed``);
- a rollout past its deadline is cancelled; one that ignores the cancellation is recorded as a
  timeout after ``ABANDON_GRACE_S`` more and abandoned (its task is left to itself); one that
  returns after its deadline (blocking code held the loop) is a timeout too;
- a stop cancels the rollouts in flight and waits ``STOP_GRACE_S`` at most for them; a run
  budget that runs out (``--time-limit``, ``--max-cost``, ``--max-tokens``: ``run/budgets.py``)
  stops the run the same way, and ``RunOutcome.budget`` says which;
- a watchdog thread names the rollout that holds the event loop for ``BLOCKED_AFTER_S``;
- a full disk or a lost writer process ends the run with ``RunOutcome.failure`` and a summary of
  what is durable; an executor's unexpected exception (the lifecycle's ``"stop"`` policy), or a
  bug in osmosis-run, stops the run and is raised from ``run()`` with its traceback.

The rollouts' tasks are tracked in a set rather than an ``asyncio.TaskGroup``: a task group waits
for every task, and a rollout that swallows its cancellation would then hold the run forever.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from osmosis_run.errors import DatasetError, InfrastructureError, OsmosisRunError
from osmosis_run.results.outcome import is_error
from osmosis_run.results.records import BudgetStop, ResultLine, Summary
from osmosis_run.run.budgets import Budgets, stop_message
from osmosis_run.run.dataset import is_stream, iter_rows, rollout_id
from osmosis_run.run.deadlines import ABANDON_GRACE_S, BLOCKED_AFTER_S, Deadlines, Watchdog
from osmosis_run.run.feeds import Feed, InlineFeed, ThreadFeed, open_stream
from osmosis_run.run.lifecycle import TICK_S, Lifecycle
from osmosis_run.run.plan import Plan
from osmosis_run.run.rollouts import Job, invalid_line, request_of, rollout_seed
from osmosis_run.run.seam import Executor, ModelGateway
from osmosis_run.run.selection import select
from osmosis_run.run.settings import settings_to_toml
from osmosis_run.sdk.context import RolloutContext
from osmosis_run.sdk.types import ExecutionOutcome, ExecutionRequest
from osmosis_run.store.layout import INVOCATION, RUN_CONFIG
from osmosis_run.store.store import RunStore, infrastructure_error, read_results

__all__ = ["Reporter", "RunOutcome", "Scheduler"]

LOOKAHEAD = 256
DIR_BATCH = 64
# File-system work (making artifacts directories ahead, writing finished rollouts) goes to a
# writer process (see writer.py) when a run has at least this many rollouts to do; below it,
# starting one costs more than it saves.
WRITER_PROCESS_FROM = 200
STALL_CHECK_S = 5.0
STALL_AFTER_S = 60.0
# After a stop, rollouts in flight get this long to end before they are abandoned.
STOP_GRACE_S = 2.0
# A finished rollout is recorded this many turns of the event loop later, with the others that
# finished meanwhile: the rollouts its slot lets start begin first (a burst of rollouts finishing
# together must not delay the next ones by its bookkeeping), and one callback records a burst.
RECORD_AFTER_TURNS = 2
# A burst is recorded this long at most per turn of the event loop (see _record_finished).
RECORD_SLICE_S = 0.002
_UNRECORDED = object()


class Reporter(Protocol):
    """Receives progress; the CLI renders it. Called on the event loop: keep it cheap."""

    def started(self, *, run_dir: Path, planned: int | None, done: int, kept_failures: int) -> None:
        """The run is about to start: ``done`` rollouts were finished before.

        ``kept_failures`` of those failed (failure, timeout or invalid) and are kept as they are
        (``--retry-failed`` would run them again).
        """

    def already_done(self, raw: bytes) -> None:
        """A results line an earlier invocation wrote (no newline); only with ``--jsonl``.

        Called for every such line, in file order, after ``started`` and before any
        ``rollout_finished``: a pipeline's output is the whole run's results.
        """

    def rollout_finished(self, line: ResultLine, raw: bytes) -> None:
        """One rollout finished and was handed to the writer; ``raw`` is its results line."""

    def stalled(self, rollout_id: str, seconds: float) -> None:
        """A rollout has been running for ``seconds`` (reported once per rollout)."""

    def notice(self, message: str) -> None:
        """One line for stderr, as it happens (a backend's news: a lost Ray actor)."""

    def blocked(self, rollout_id: str | None, seconds: float) -> None:
        """The event loop has been held for ``seconds`` by one rollout's synchronous code.

        Called from a watchdog THREAD (the event loop is the thing that is stuck), at most once
        per rollout: it must only write a line to stderr.
        """


@dataclass
class RunOutcome:
    """What a run left: where, its summary, whether it was interrupted, and why it failed.

    ``failure`` is set when the run could not go on: the machine failed under it
    (``InfrastructureError``: a full disk, a lost writer process) or a streamed dataset turned
    out to be another one (``DatasetError``). ``summary`` then counts what is durable in
    results.jsonl, and the run resumes once the cause is fixed. ``budget`` is set (and
    ``interrupted`` true) when a run budget stopped it. ``abandoned`` counts rollouts
    whose code ignored cancellation and may still be running: the process should exit rather
    than wait for them.
    """

    run_dir: Path
    summary: Summary
    interrupted: bool
    failure: OsmosisRunError | None = None
    abandoned: int = 0
    budget: BudgetStop | None = None


@dataclass(slots=True)
class _DirBatch:
    """A batch of artifacts directories the writer process is making."""

    future: Future[list[str]]
    waiter: asyncio.Future[list[str]] | None = None
    ready: bool = False

    async def wait(self) -> None:
        """Wait until the batch is made; one event-loop wake-up serves the whole batch.

        Raises:
            OSError: the writer process failed.
        """
        if self.ready:
            return
        if self.future.done():
            self.future.result()
            self.ready = True  # the batch's other rollouts need not ask the future again
            return
        if self.waiter is None:
            self.waiter = asyncio.wrap_future(self.future)
        # Shielded: a rollout cancelled while it waits must not cancel its batch-mates' wait.
        await asyncio.shield(self.waiter)


class Scheduler:
    """Execute a ``Plan``: its rollouts through an ``Executor``, their records into the store.

    Made by ``Scheduler.open``, which opens the run directory; ``run()`` then runs every
    rollout not finished before.

    Args:
        plan: what to run (``prepare(settings)``).
        executor: what runs each attempt (the engine imports no concrete one).
        store: the opened run directory.
        reporter: receives progress (the CLI renders it).
        stall_after_s: a rollout running this long without a deadline is reported once.
        blocked_after_s: a rollout holding the event loop this long is reported once.
        stop_grace_s: after a stop, how long rollouts in flight get to end.
        abandon_grace_s: past its deadline, how long a rollout gets to honour its cancellation.
        sleep: how retries wait (tests pass a fake clock).
        rng: the jitter of retry back-off.
        gateway: the model gateway between the rollouts and the model (None: direct).

    Attributes:
        deadlines: the run's ``Deadlines``, handed to the executor with every attempt.
        lifecycle: each rollout's attempts and records (``on_executor_error="stop"``).
    """

    def __init__(
        self,
        plan: Plan,
        executor: Executor,
        store: RunStore,
        *,
        reporter: Reporter | None = None,
        stall_after_s: float = STALL_AFTER_S,
        blocked_after_s: float = BLOCKED_AFTER_S,
        stop_grace_s: float = STOP_GRACE_S,
        abandon_grace_s: float = ABANDON_GRACE_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        gateway: ModelGateway | None = None,
    ) -> None:
        self.plan = plan
        self.gateway = gateway
        self.settings = plan.settings
        self.executor = executor
        self.store = store
        self.reporter = reporter
        self.stall_after_s = stall_after_s
        self.blocked_after_s = blocked_after_s
        self.stop_grace_s = stop_grace_s
        self.selection = plan.selection
        self.planned = plan.planned
        self.deadlines = Deadlines(abandon_grace_s=abandon_grace_s)
        s = self.settings
        self.budgets = Budgets.of(s)
        self._budget_stop: BudgetStop | None = None
        self._opening = False  # the executor is getting ready (see _ran_out)
        self.lifecycle = Lifecycle(
            executor,
            store,
            deadlines=self.deadlines,
            pass_threshold=s.after.pass_threshold,
            samples=s.run.samples,
            group_by=s.after.group_by,
            attempts=s.execution.retries + 1,
            messages=not s.output.no_messages,
            gateway=gateway,
            on_executor_error="stop",  # eval's policy: the run stops, the error is raised
            sleep=sleep,
            rng=rng,
        )
        # rollout id -> the row hash its results line recorded (None in runs from before).
        self._finished: dict[str, str | None] = {}
        self._resumed = 0
        self._kept_failures = 0
        self._earlier: list[bytes] = []  # earlier results lines to stream, with --jsonl
        # A complete run's summary.json, when it is resumed with nothing left to do.
        self._kept: Summary | None = None
        self._endpoint = RolloutContext(
            chat_completions_url=self.settings.execution.chat_completions_url or "",
            api_key=self.settings.execution.api_key_value(),
        )
        if gateway is not None:  # the rollouts talk to the gateway, with the run's own key
            self._endpoint.api_key = gateway.api_key
        self._running: dict[str, float] = {}  # rollout id -> when it started: O(concurrency)
        self._tasks: dict[str, asyncio.Task[None]] = {}  # rollout id -> its task, while it runs
        self._unreported: list[tuple[ResultLine, bytes]] = []
        # Rollouts finished and not recorded yet (recorded a few loop turns later, together).
        self._finished_jobs: list[
            tuple[Job, ExecutionRequest, ExecutionOutcome, dict[str, float | None], int]
        ] = []
        self._halting = False
        self._failure: OsmosisRunError | None = None
        self._bug: BaseException | None = None
        self._main: asyncio.Task[Any] | None = None
        self._watchdog: Watchdog | None = None
        self._started = 0.0

    @classmethod
    def open(
        cls,
        plan: Plan,
        executor: Executor,
        *,
        writer_process_from: int | None = WRITER_PROCESS_FROM,
        **options: Any,
    ) -> Scheduler:
        """Open the plan's run directory (locked) and take back what finished before.

        Args:
            plan: what to run.
            executor: what runs each attempt.
            writer_process_from: how many rollouts to do make a run large enough to write
                through a writer process (None: never).
            **options: the keyword arguments of ``Scheduler``.

        Raises:
            OsmosisRunError: the run directory cannot be used (exit code 2).
        """
        s = plan.settings
        key = s.execution.api_key_value()
        gateway: ModelGateway | None = options.get("gateway")
        run_key = gateway.api_key if gateway is not None else None  # what rollouts are handed
        secrets = tuple(v for v in (key, run_key, *plan.secrets) if v)
        store = RunStore(plan.run_dir, secrets=secrets)
        store.open(plan.fingerprint, fresh=s.output.fresh)
        try:
            scheduler = cls(plan, executor, store, **options)
            scheduler._resume()
            store.write_file(RUN_CONFIG, settings_to_toml(s, run_dir=plan.run_dir))
            store.write_file(INVOCATION, scheduler._invocation())
        except BaseException:
            store.close()
            raise
        to_do = None if plan.planned is None else plan.planned - scheduler._resumed
        store.background = writer_process_from is not None and (
            to_do is None or to_do >= writer_process_from
        )
        return scheduler

    def _invocation(self) -> str:
        """invocation.json: this invocation's start, what it planned and found done (for
        ``osmosis-run view``, which shows a running run's progress from it)."""
        started = {
            "started_at": round(time.time(), 3),
            "planned": self.planned,
            "done": self._resumed,
            "pid": os.getpid(),
        }
        return json.dumps(started) + "\n"

    def _resume(self) -> None:
        """Take back the rollouts an earlier invocation finished."""
        self._kept = self._kept_summary()
        if self._kept is not None:
            self._resumed = self._kept.rollouts
            self._kept_failures = self._kept.errors
        else:
            self.store.load_finished(
                drop_failed=self.settings.output.retry_failed, on_line=self._resume_line
            )
            self._resumed = len(self._finished)

    def _resume_line(self, line: ResultLine, raw: bytes) -> None:
        """Take one results line of an earlier invocation back."""
        self._finished[line.rollout_id] = line.row_hash
        self.lifecycle.metrics.add(line)
        if is_error(line.status):
            self._kept_failures += 1
        if self.settings.output.jsonl:
            self._earlier.append(raw)

    def _kept_summary(self) -> Summary | None:
        """A finished run's summary.json, when nothing is left to do and it still holds.

        Reading every result back is most of a resume's cost, and pointless when the run is
        complete: summary.json serves when results.jsonl has not changed since it was written
        and it counts every planned rollout with this run's threshold, grouping and samples.
        With ``--jsonl`` the results are read anyway, to be streamed.
        """
        s, store = self.settings, self.store
        if s.output.retry_failed or s.output.jsonl or self.planned is None:
            return None
        kept = store.current_summary()
        if (
            kept is None
            or not kept.complete
            or kept.interrupted
            or kept.rollouts != self.planned
            or kept.pass_threshold != s.after.pass_threshold
            or kept.group_by != s.after.group_by
            or kept.samples_per_row != s.run.samples
        ):
            return None
        return kept

    @property
    def concurrency(self) -> int | None:
        """Rollouts in flight at most (None: no limit)."""
        return self.plan.window(self.executor.limit)

    def stop(self) -> None:
        """Stop scheduling and cancel the rollouts in flight; ``run()`` then returns."""
        self._halt()

    def _halt(self) -> None:
        """Stop the run: the main task stops scheduling and cancels what is in flight.

        From the main task itself (a failure found while scheduling) a flag is enough: it
        checks it; cancelling itself would cancel ``run()`` as a whole.
        """
        if self._halting or self._main is None:
            return
        self._halting = True
        if asyncio.current_task() is not self._main:
            self._main.cancel()

    def _fail(self, failure: OsmosisRunError) -> None:
        """Stop the run on a failure of the machine (or a changed stream); keep the first."""
        if self._failure is None:
            self._failure = failure
        self._halt()

    async def run(self) -> RunOutcome:
        """Run every selected rollout not finished before; return the summary.

        Raises:
            OsmosisRunError: the executor could not get ready (before any rollout ran).
        """
        self._main = asyncio.current_task()  # a stop while the executor gets ready cancels it
        began = time.monotonic()  # the time limit counts the executor's start too
        limit = self.budgets.time_limit_s
        timer = None
        if limit is not None:
            timer = asyncio.get_running_loop().call_later(
                limit, lambda: self._ran_out(self.budgets.out_of_time(time.monotonic() - began))
            )
        try:
            try:
                self._opening = True
                await self.executor.open()
            except asyncio.CancelledError:
                if not self._halting or self._main is None:
                    self.store.close()
                    raise
                self._main.uncancel()  # stopped before any rollout ran: the run ends at once
            except BaseException:
                self.store.close()
                raise
            finally:
                self._opening = False
            if self._budget_stop is not None and not self._halting:
                self._halt()  # the budget ran out while the executor got ready: nothing runs
            try:
                return await self._run()
            finally:
                await self.executor.close()
        finally:
            if timer is not None:
                timer.cancel()

    def _ran_out(self, stop: BudgetStop) -> None:
        """A run budget ran out: stop as a Ctrl-C does (unless the run is stopping already).

        While the executor gets ready (workers or actors starting) it is left to finish: the
        run then stops before any rollout starts, without cancelling the executor half-made.
        """
        if self._halting or self._main is None or self._budget_stop is not None:
            return
        self._budget_stop = stop
        if self.reporter is not None:
            self.reporter.notice(
                f"osmosis-run: {stop.reached}: stopping; cancelling rollouts in flight, keeping "
                "what finished"
            )
        if not self._opening:
            self._halt()

    def _watch_spending(self) -> None:
        """Stop the run once the model calls have used up ``--max-tokens`` or ``--max-cost``."""
        if self.gateway is None or not self.budgets.counts_spending or self._halting:
            return
        stop = self.budgets.spent(self.gateway.live)
        if stop is not None:
            self._ran_out(stop)

    async def _run(self) -> RunOutcome:
        self._main = asyncio.current_task()
        self._started = time.perf_counter()
        if self.reporter is not None:
            self.reporter.started(
                run_dir=self.store.dir,
                planned=self.planned,
                done=self._resumed,
                kept_failures=self._kept_failures,
            )
            for raw in self._earlier:
                self.reporter.already_done(raw)
        self._earlier = []
        try:
            await self._execute()
        except InfrastructureError as exc:
            self._failure = self._failure or exc
        summary = self._close()
        if self._bug is not None:
            raise self._bug
        return RunOutcome(
            run_dir=self.store.dir,
            summary=summary,
            interrupted=self._halting and self._failure is None,
            failure=self._failure,
            abandoned=self.deadlines.cancel_abandoned(),
            budget=summary.budget if self._failure is None else None,
        )

    def _close(self) -> Summary:
        """Write what finished and the summary; after a failure, the summary of what is durable."""
        final: list[Summary] = []

        def summarize(all_durable: bool) -> Summary:
            if all_durable and self._failure is None:
                final.append(self.summary(interrupted=self._halting))
            else:
                final.append(self._durable_summary())
            return final[-1]

        try:
            self.store.close(summarize)
        except InfrastructureError as exc:
            self._failure = self._failure or exc
        if self._failure is None:
            self._report_handed()
        return final[-1] if final else self._durable_summary()

    def _durable_summary(self) -> Summary:
        """The summary of the results that reached results.jsonl (after a failure)."""
        metrics = self.lifecycle.new_metrics()
        seen: set[str] = set()
        for line in read_results(self.store.dir):
            if line.rollout_id not in seen:
                seen.add(line.rollout_id)
                metrics.add(line)
        wall = time.perf_counter() - self._started if self._started else None
        return metrics.summary(planned=self.planned, wall_s=wall, interrupted=True)

    def summary(self, *, interrupted: bool = False) -> Summary:
        """The summary of what has finished so far."""
        if self._kept is not None:
            return self._kept
        wall = time.perf_counter() - self._started if self._started else None
        summary = self.lifecycle.metrics.summary(
            planned=self.planned, wall_s=wall, interrupted=interrupted
        )
        ran = summary.rollouts - self._resumed
        summary.throughput_per_s = ran / wall if wall and ran else None
        if self.gateway is not None and summary.model is not None:
            summary.model.gateway = self.gateway.stats()
        backend_stats = getattr(self.executor, "stats", None)  # where a backend has news
        if callable(backend_stats):
            summary.backend = backend_stats()
        stop = self._budget_stop
        if stop is not None and interrupted:
            message = stop_message(stop, done=summary.rollouts, planned=summary.planned)
            summary.budget = stop.model_copy(update={"message": message})
        return summary

    async def _execute(self) -> None:
        limit = self.concurrency
        window = asyncio.Semaphore(limit) if limit else None
        loop = asyncio.get_running_loop()
        replies = self.store.start_writer()
        if replies is not None:
            loop.add_reader(replies, self.store.poll)
        ticker = loop.create_task(self._tick())
        if self.reporter is not None:
            self._watchdog = Watchdog(
                loop, self.reporter.blocked, self._running, after_s=self.blocked_after_s
            )
        feed: Feed = (
            ThreadFeed(self._jobs, loop) if is_stream(self.plan.dataset) else InlineFeed(self._jobs)
        )
        try:
            await self._schedule(feed, window)
            while self._tasks and not self._halting:
                done, _ = await asyncio.wait(set(self._tasks.values()))
                for task in done:  # a task cancelled before it ran could not remove itself
                    self._tasks.pop(task.get_name(), None)
            if self._halting:
                await self._cancel_in_flight()
        except asyncio.CancelledError:
            if not self._halting or self._main is None:
                raise
            self._main.uncancel()
            await self._cancel_in_flight()
        finally:
            self._record_finished()  # what finished is recorded, even when the run is stopped
            feed.close()
            if self._watchdog is not None:
                self._watchdog.stop()
            ticker.cancel()
            if replies is not None:
                loop.remove_reader(replies)

    async def _schedule(self, feed: Feed, window: asyncio.Semaphore | None) -> None:
        """Start a task per job as rows arrive, within the window."""
        ahead: deque[Job] = deque()
        batch: list[Job] = []
        prefetch = self.executor.local_artifacts and self.store.writer_process
        lookahead = LOOKAHEAD if prefetch and not is_stream(self.settings.run.dataset or "-") else 0
        while (jobs := await self._next_jobs(feed)) is not None:
            for job in jobs:
                ahead.append(job)
                if prefetch and job.row.error is None:
                    batch.append(job)
                    if len(batch) == DIR_BATCH or not lookahead:
                        self._make_dirs(batch)
                        batch = []
                while len(ahead) > lookahead:
                    job = ahead.popleft()
                    if window is not None and job.row.error is None:
                        await window.acquire()
                    self._start(job, window)
            if self._halting:
                return
        self._make_dirs(batch)
        while ahead and not self._halting:
            job = ahead.popleft()
            if window is not None and job.row.error is None:
                await window.acquire()
            self._start(job, window)

    async def _next_jobs(self, feed: Feed) -> list[Job] | None:
        """The next batch of jobs; None at the end, when the dataset failed, or once stopped."""
        if self._halting:  # stopped (while the executor got ready, say): nothing more starts
            return None
        try:
            return await feed.next_batch()
        except DatasetError as exc:
            self._fail(exc)
            return None

    def _start(self, job: Job, window: asyncio.Semaphore | None) -> None:
        """Start a job's task (its slot of the window is taken); record an invalid row at once.

        Not a coroutine: the caller awaits the window itself (a coroutine fewer per rollout).
        """
        if job.row.error is not None:
            self._write(job, invalid_line(job))
            self._report_handed()
            return
        task = asyncio.get_running_loop().create_task(
            self._run_job(job, window), name=job.rollout_id
        )
        self._tasks[job.rollout_id] = task

    def _job_failed(self, exc: Exception) -> None:
        """A rollout's task raised: the machine failed, or osmosis-run has a bug."""
        if isinstance(exc, OSError):  # a directory batch of the writer process failed
            exc = infrastructure_error(exc, doing="making rollout directories in")
        if isinstance(exc, InfrastructureError):
            self._fail(exc)
        else:  # a bug: stop, and raise it from run() with its traceback
            if self._bug is None:
                self._bug = exc
            self._halt()

    async def _cancel_in_flight(self) -> None:
        """Cancel the rollouts in flight; abandon those still running after ``STOP_GRACE_S``."""
        for task in self._tasks.values():
            task.cancel()
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks.values()), timeout=self.stop_grace_s)
            for task in pending:
                self.deadlines.abandon(task)

    def _make_dirs(self, batch: list[Job]) -> None:
        """Have the writer process make a batch of artifacts directories."""
        if not batch:
            return
        ids = [job.rollout_id for job in batch]
        try:
            future = self.store.make_dirs(ids)
        except OSError as exc:  # the writer process is gone, or failed before
            failure = exc if isinstance(exc, InfrastructureError) else None
            self._fail(failure or infrastructure_error(exc, doing="making rollout directories in"))
            return
        except InfrastructureError as exc:
            self._fail(exc)
            return
        if future is None:
            return
        adopt = self.executor.adopt_artifacts_dirs

        def made(done: Future[list[str]]) -> None:
            if done.exception() is None:
                failed = set(done.result())
                adopt(i for i in ids if i not in failed)
                ready.ready = True  # its rollouts start without waiting (see _run_job)

        ready = _DirBatch(future)
        future.add_done_callback(made)
        for job in batch:
            job.dirs = ready

    async def _tick(self) -> None:
        """Every few milliseconds: hand finished rollouts to the writer; watch for stalls."""
        warned: set[str] = set()
        watch = self.reporter is not None and self.settings.execution.agent_timeout is None
        next_check = time.perf_counter() + min(STALL_CHECK_S, self.stall_after_s / 2)
        while True:
            await asyncio.sleep(TICK_S)
            if self._watchdog is not None:
                self._watchdog.beat = time.monotonic()
            try:
                self.store.hand_off()
            except InfrastructureError as exc:
                self._fail(exc)
                return
            self._report_handed()
            self._watch_spending()
            now = time.perf_counter()
            if not watch or now < next_check:
                continue
            next_check = now + min(STALL_CHECK_S, self.stall_after_s / 2)
            for rid, started in list(self._running.items()):
                if now - started >= self.stall_after_s and rid not in warned and self.reporter:
                    warned.add(rid)
                    self.reporter.stalled(rid, now - started)

    def _jobs(self, on_wait: Callable[[], None]) -> Iterator[Job]:
        """The rollouts left to run, row by row (runs in the feed's thread).

        Raises:
            DatasetError: a row differs from the row an earlier invocation recorded for it.
        """
        if self.planned is not None and self._resumed >= self.planned:
            return  # all finished before: the fingerprint pins the dataset and the selection
        if self.plan.source is not None:  # a re-grade: the rollouts another run recorded
            yield from self.plan.source.jobs(skip=self._finished)
            return
        dataset = self.settings.run.dataset
        assert dataset is not None
        source = open_stream(dataset) if is_stream(dataset) else None
        samples, seed, finished = (
            range(self.settings.run.samples),
            self.settings.run.seed,
            self._finished,
        )
        try:
            rows = iter_rows(dataset, source=source, on_wait=on_wait)
            for row in select(rows, self.selection):
                part, key = row.part, row.key  # once per row, not per sample
                for k in samples:
                    rid = rollout_id(part, k)
                    recorded = finished.get(rid, _UNRECORDED)
                    if recorded is _UNRECORDED:
                        yield Job(row, k, rid, rollout_seed(seed, key, k))
                    elif recorded is not None and recorded != row.digest:
                        raise DatasetError(_changed_row(dataset, row.line, rid))
        finally:
            if source is not None:
                source.close()

    async def _run_job(self, job: Job, window: asyncio.Semaphore | None) -> None:
        """Run one rollout in its task (no done callback: the task ends its own bookkeeping)."""
        try:
            if job.dirs is not None and not job.dirs.ready:  # usually made by now: no await
                await job.dirs.wait()
            request = self._request(job)
            self._running[job.rollout_id] = time.perf_counter()
            outcome, timings, attempts = await self.lifecycle.run(job, request, self._endpoint)
        except Exception as exc:
            self._job_failed(exc)
            return
        finally:
            self._tasks.pop(job.rollout_id, None)
            self._running.pop(job.rollout_id, None)
            if window is not None:
                window.release()
        # The slot is free. The bookkeeping waits for the next rollouts to start (two turns of
        # the event loop), and a burst of rollouts finishing together is recorded in one go.
        self._finished_jobs.append((job, request, outcome, timings, attempts))
        if len(self._finished_jobs) == 1:
            loop = asyncio.get_running_loop()
            loop.call_soon(self._record_finished, RECORD_AFTER_TURNS, True)

    def _record_finished(self, turns: int = 0, sliced: bool = False) -> None:
        """Record the rollouts that finished since the last call, after ``turns`` loop turns.

        ``sliced``: at most ``RECORD_SLICE_S`` of it per loop turn; the rest, first in line,
        in the next turn, so that a burst of long transcripts finishing together (their
        encoding, a third of a millisecond each at 256 KB) does not hold the rollouts still
        running. Also called directly, whole, when the run ends, so that nothing finished is
        left unrecorded.
        """
        loop = asyncio.get_running_loop()
        if turns > 0:
            loop.call_soon(self._record_finished, turns - 1, sliced)
            return
        finished, self._finished_jobs = self._finished_jobs, []
        record, reporter = self.lifecycle.record, self.reporter
        until = time.perf_counter() + RECORD_SLICE_S
        try:
            for n, (job, request, outcome, timings, attempts) in enumerate(finished):
                if sliced and n and time.perf_counter() >= until:
                    self._finished_jobs[:0] = finished[n:]  # the rest, first in line
                    loop.call_soon(self._record_finished, 0, True)
                    break
                try:
                    handed = record(job, outcome, request, timings, attempts)
                except InfrastructureError as exc:
                    self._fail(exc)
                    continue
                if reporter is not None:
                    self._unreported.append(handed)
            self._report_handed()
        except Exception as exc:  # a bug: stop, and raise it from run() with its traceback
            if self._bug is None:
                self._bug = exc
            self._halt()

    def _write(self, job: Job, line: ResultLine) -> None:
        """Write a rollout that did not run (an invalid row); report it once handed over."""
        try:
            handed = self.lifecycle.write(job, line, None, None, None)
        except InfrastructureError as exc:
            self._fail(exc)
            return
        if self.reporter is not None:
            self._unreported.append(handed)

    def _request(self, job: Job) -> ExecutionRequest:
        execution = self.settings.execution
        return request_of(
            job,
            job.row.prompt or [],
            agent_timeout=execution.agent_timeout,
            grader_timeout=execution.grader_timeout,
            grade=True,
        )

    def _report_handed(self) -> None:
        """Report the rollouts handed to the writer since the last call, in order.

        A ``--jsonl`` line is never printed before its rollout is handed to the writer: what a
        pipeline saw is in results.jsonl even if the run is killed right after.
        """
        if not self._unreported or self.reporter is None:
            return
        count = len(self._unreported) - self.store.pending
        if count <= 0:
            return
        handed = self._unreported[:count]
        del self._unreported[:count]
        for line, raw in handed:
            self.reporter.rollout_finished(line, raw)


def _changed_row(dataset: str, line: int, rollout: str) -> str:
    name = "<stdin>" if dataset == "-" else dataset
    return (
        f"{name}:{line}: this row differs from the one the run recorded for {rollout}: this "
        "is another dataset; choose another --out, or add --fresh to start the run over"
    )
