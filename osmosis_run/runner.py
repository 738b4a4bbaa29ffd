"""The eval engine: rows in, graded rollouts out, through a bounded window of tasks.

One ``Runner`` is one ``osmosis-run eval``. ``prepare()`` does everything that can fail before a
rollout runs (loading, configs, the run directory); ``run()`` streams the selected rows through
``LocalBackend`` with at most ``concurrency`` rollouts in flight, enforces deadlines from the
moment a rollout starts running, retries transient failures, and hands every finished rollout to
the store and to the reporter. ``stop()`` (Ctrl-C) cancels what is in flight; what finished is
kept, and the run resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from osmosis_run import __version__
from osmosis_run.atif import trajectory_from_messages
from osmosis_run.backend import LocalBackend
from osmosis_run.components import check_inputs, load_components, selection_of
from osmosis_run.construct import construct
from osmosis_run.context import RolloutContext
from osmosis_run.dataset import iter_rows, rollout_id
from osmosis_run.fingerprint import build_fingerprint, default_run_dir
from osmosis_run.metrics import MetricsAccumulator
from osmosis_run.records import ResultLine, Summary
from osmosis_run.rollouts import (
    Job,
    attempt_error,
    invalid_line,
    result_document,
    rollout_seed,
    round_ms,
    row_fields,
    status_of,
    timed_out,
)
from osmosis_run.selection import count_planned, select
from osmosis_run.serialize import encode
from osmosis_run.settings import EvalSettings, settings_to_toml
from osmosis_run.store import RUN_CONFIG, RunStore
from osmosis_run.types import (
    ExecutionOutcome,
    ExecutionRequest,
    ExecutionResult,
    RolloutErrorCategory,
)

__all__ = ["Reporter", "RunOutcome", "Runner"]

LOOKAHEAD = 256
DIR_BATCH = 32
TICK_S = 0.02
# File-system work (making artifacts directories ahead, writing finished rollouts) goes to a
# writer process (see writer.py) when a run has at least this many rollouts to do; below it,
# starting one costs more than it saves.
WRITER_PROCESS_FROM = 200
STALL_CHECK_S = 5.0
STALL_AFTER_S = 60.0
TRANSIENT = frozenset({RolloutErrorCategory.TIMEOUT, RolloutErrorCategory.AGENT_ERROR})


class Reporter(Protocol):
    """Receives progress; the CLI renders it. Called on the event loop: keep it cheap."""

    def started(self, *, run_dir: Path, planned: int | None, done: int) -> None:
        """The run is about to start: ``done`` rollouts were finished before."""

    def rollout_finished(self, line: ResultLine, raw: bytes) -> None:
        """One rollout finished; ``raw`` is its results.jsonl line (no newline)."""

    def stalled(self, rollout_id: str, seconds: float) -> None:
        """A rollout has been running for ``seconds`` (reported once per rollout)."""


@dataclass
class RunOutcome:
    """What a run left: where, its summary, and whether it was interrupted."""

    run_dir: Path
    summary: Summary
    interrupted: bool


@dataclass(slots=True)
class _DirBatch:
    """A batch of artifacts directories the writer process is making."""

    future: Future[list[str]]
    waiter: asyncio.Future[list[str]] | None = None

    async def wait(self) -> None:
        """Wait until the batch is made; one event-loop wake-up serves the whole batch.

        Raises:
            OSError: the writer process failed.
        """
        if self.future.done():
            self.future.result()
            return
        if self.waiter is None:
            self.waiter = asyncio.wrap_future(self.future)
        # Shielded: a rollout cancelled while it waits must not cancel its batch-mates' wait.
        await asyncio.shield(self.waiter)


class Runner:
    """Run one evaluation described by ``EvalSettings``."""

    def __init__(
        self,
        settings: EvalSettings,
        *,
        reporter: Reporter | None = None,
        stall_after_s: float = STALL_AFTER_S,
        writer_process: bool = True,
    ) -> None:
        self.settings = settings
        self.reporter = reporter
        self.stall_after_s = stall_after_s
        self.writer_process = writer_process
        self.selection = selection_of(settings)
        self.store: RunStore | None = None
        self.backend: LocalBackend | None = None
        self.planned: int | None = None
        self._finished: set[str] = set()
        self._resumed = 0
        # A complete run's summary.json, when it is resumed with nothing left to do.
        self._kept: Summary | None = None
        self._endpoint = RolloutContext(
            chat_completions_url=settings.chat_completions_url or "", api_key=settings.api_key
        )
        self._running: dict[str, float] = {}  # rollout id -> when it started: O(concurrency)
        self._metrics = MetricsAccumulator(
            pass_threshold=settings.pass_threshold,
            samples=settings.samples,
            group_by=settings.group_by,
        )
        self._stopping = False
        self._main: asyncio.Task[Any] | None = None
        self._started = 0.0

    def prepare(self) -> None:
        """Load the user's classes and configs, check the dataset, open the run directory.

        Raises:
            OsmosisRunError: anything that stops the run before it starts (exit code 2).
        """
        s = self.settings
        check_inputs(s)
        parts = load_components(s)
        fingerprint = build_fingerprint(s, self.selection, parts.workflow, parts.grader)
        run_dir = Path(s.out) if s.out else default_run_dir(s, fingerprint)
        secrets = (s.api_key,) if s.api_key else ()
        self.store = RunStore(run_dir, secrets=secrets)
        self.store.open(fingerprint, fresh=s.fresh)
        self.backend = LocalBackend(
            workflow=parts.workflow,
            workflow_config=parts.workflow_config,
            grader=parts.grader,
            grader_config=parts.grader_config,
            artifact_root=self.store.rollouts_dir.absolute(),
        )
        self.planned = count_planned(s.dataset, self.selection, s.samples)
        self._kept = self._kept_summary()
        if self._kept is not None:
            self._resumed = self._kept.rollouts
        else:
            self._finished = self.store.load_finished(
                drop_failed=s.retry_failed, on_line=self._metrics.add
            )
            self._resumed = len(self._finished)
        self.store.write_file(RUN_CONFIG, settings_to_toml(s, run_dir=run_dir))
        to_do = None if self.planned is None else self.planned - self._resumed
        self.store.background = self.writer_process and (
            to_do is None or to_do >= WRITER_PROCESS_FROM
        )

    def _kept_summary(self) -> Summary | None:
        """A finished run's summary.json, when nothing is left to do and it still holds.

        Reading every result back is most of a resume's cost, and pointless when the run is
        complete: summary.json serves when results.jsonl has not changed since it was written
        and it counts every planned rollout with this run's threshold, grouping and samples.
        """
        s, store = self.settings, self.store
        if s.retry_failed or self.planned is None or store is None:
            return None
        kept = store.current_summary()
        if (
            kept is None
            or not kept.complete
            or kept.interrupted
            or kept.rollouts != self.planned
            or kept.pass_threshold != s.pass_threshold
            or kept.group_by != s.group_by
            or kept.samples_per_row != s.samples
        ):
            return None
        return kept

    @property
    def concurrency(self) -> int | None:
        """Rollouts in flight at most (None: no limit)."""
        if self.settings.concurrency is not None:
            return self.settings.concurrency or None
        return self.backend.max_concurrent if self.backend else None

    def stop(self) -> None:
        """Stop scheduling and cancel the rollouts in flight; ``run()`` then returns."""
        if not self._stopping and self._main is not None:
            self._stopping = True
            self._main.cancel()

    async def run(self) -> RunOutcome:
        """Run every selected rollout not finished before; return the summary."""
        if self.store is None:
            self.prepare()
        assert self.store is not None
        self._main = asyncio.current_task()
        self._started = time.perf_counter()
        if self.reporter is not None:
            self.reporter.started(run_dir=self.store.dir, planned=self.planned, done=self._resumed)
        interrupted = False
        try:
            await self._execute()
        except asyncio.CancelledError:
            if not self._stopping or self._main is None:
                raise
            self._main.uncancel()
            interrupted = True
        finally:
            summary = self.summary(interrupted=interrupted)
            self.store.close(summary)
        return RunOutcome(run_dir=self.store.dir, summary=summary, interrupted=interrupted)

    def summary(self, *, interrupted: bool = False) -> Summary:
        """The summary of what has finished so far."""
        if self._kept is not None:
            return self._kept
        wall = time.perf_counter() - self._started if self._started else None
        summary = self._metrics.summary(planned=self.planned, wall_s=wall)
        summary.interrupted = interrupted
        ran = summary.rollouts - self._resumed
        summary.throughput_per_s = ran / wall if wall and ran else None
        summary.complete = not interrupted and (
            self.planned is None or summary.rollouts >= self.planned
        )
        return summary

    async def _execute(self) -> None:
        assert self.store is not None
        limit = self.concurrency
        window = asyncio.Semaphore(limit) if limit else None
        replies = self.store.start_writer()
        loop = asyncio.get_running_loop()
        if replies is not None:
            loop.add_reader(replies, self.store.poll)
        async with asyncio.TaskGroup() as outer:
            ticker = outer.create_task(self._tick())
            try:
                async with asyncio.TaskGroup() as group:
                    for job in self._prefetched(self._jobs()):
                        if job.row.error is not None:
                            self._record(job, invalid_line(job), result=None, request=None)
                            continue
                        if window is not None:
                            await window.acquire()
                        group.create_task(self._run_job(job, window))
            finally:
                ticker.cancel()
                if replies is not None:
                    loop.remove_reader(replies)

    def _prefetched(self, jobs: Iterator[Job]) -> Iterator[Job]:
        """Yield jobs whose artifacts directories the writer process is making ahead of time.

        Directory creation is most of a trivial rollout's file-system cost; made ahead, in
        batches, on another core, it is off the rollout's path. The look-ahead is bounded
        (``LOOKAHEAD`` jobs). Without a writer process, or with rows from stdin (a live
        producer's rows start as soon as they arrive), the backend makes each when it starts.
        """
        if self.store is None or not self.store.writer_process or self.settings.dataset == "-":
            yield from jobs
            return
        ahead: deque[Job] = deque()
        batch: list[Job] = []
        for job in jobs:
            ahead.append(job)
            if job.row.error is None:
                batch.append(job)
            if len(batch) == DIR_BATCH:
                self._make_dirs(batch)
                batch = []
            if len(ahead) > LOOKAHEAD:
                yield ahead.popleft()
        self._make_dirs(batch)
        yield from ahead

    def _make_dirs(self, batch: list[Job]) -> None:
        """Have the writer process make a batch of artifacts directories."""
        assert self.store is not None
        assert self.backend is not None
        if not batch:
            return
        ids = [job.rollout_id for job in batch]
        future = self.store.make_dirs(ids)
        assert future is not None
        adopt = self.backend.adopt_artifacts_dirs

        def made(done: Future[list[str]]) -> None:
            if done.exception() is None:
                failed = set(done.result())
                adopt(i for i in ids if i not in failed)

        future.add_done_callback(made)
        ready = _DirBatch(future)
        for job in batch:
            job.dirs = ready

    async def _tick(self) -> None:
        """Every few milliseconds: hand finished rollouts to the writer; watch for stalls."""
        assert self.store is not None
        warned: set[str] = set()
        watch = self.reporter is not None and self.settings.agent_timeout is None
        next_check = time.perf_counter() + min(STALL_CHECK_S, self.stall_after_s / 2)
        while True:
            await asyncio.sleep(TICK_S)
            self.store.hand_off()
            now = time.perf_counter()
            if not watch or now < next_check:
                continue
            next_check = now + min(STALL_CHECK_S, self.stall_after_s / 2)
            for rid, started in list(self._running.items()):
                if now - started >= self.stall_after_s and rid not in warned and self.reporter:
                    warned.add(rid)
                    self.reporter.stalled(rid, now - started)

    def _jobs(self) -> Iterator[Job]:
        assert self.settings.dataset is not None
        if self.planned is not None and self._resumed >= self.planned:
            return  # all finished before: the fingerprint pins the dataset and the selection
        for row in select(iter_rows(self.settings.dataset), self.selection):
            for k in range(self.settings.samples):
                rid = rollout_id(row.part, k)
                if rid not in self._finished:
                    yield Job(row, k, rid, rollout_seed(self.settings.seed, row.key, k))

    async def _run_job(self, job: Job, window: asyncio.Semaphore | None) -> None:
        try:
            request, outcome, timings, attempts = await self._execute_job(job)
        finally:
            self._running.pop(job.rollout_id, None)
            if window is not None:
                window.release()
        try:
            # The slot is free: let the next rollouts start before this one's bookkeeping, so
            # that recording a burst of rollouts finishing together does not delay them.
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        finally:  # what finished is recorded, even when the run is being stopped
            line = self._line(job, outcome, timings, attempts)
            self._record(job, line, result=outcome, request=request, timings=timings)

    async def _execute_job(
        self, job: Job
    ) -> tuple[ExecutionRequest, ExecutionOutcome, dict[str, float | None], int]:
        """Run a rollout, retrying transient failures; return what the last attempt gave."""
        if job.dirs is not None:
            await job.dirs.wait()
        request = self._request(job)
        self._running[job.rollout_id] = time.perf_counter()
        attempts = self.settings.retries + 1
        for attempt in range(1, attempts + 1):
            with self._context(job):
                outcome, timings = await self._attempt(request)
            result = outcome.result
            if attempt == attempts or result.err_category not in TRANSIENT:
                break
            job.attempt_errors.append(attempt_error(attempt, result))
        return request, outcome, timings, attempt

    def _context(self, job: Job) -> RolloutContext:
        """The ambient context the backend's per-rollout context inherits from."""
        return self._endpoint.derive(job.rollout_id, seed=job.seed)

    def _request(self, job: Job) -> ExecutionRequest:
        row, s = job.row, self.settings
        return construct(
            ExecutionRequest,
            id=job.rollout_id,
            prompt=row.prompt or [],  # the backend hands each workflow and grader its own copy
            label=row.label,
            metadata=row.metadata,
            agent_timeout_sec=s.agent_timeout,
            grader_timeout_sec=s.grader_timeout,
            grade=True,
        )

    async def _attempt(
        self, request: ExecutionRequest
    ) -> tuple[ExecutionOutcome, dict[str, float | None]]:
        backend = self.backend
        assert backend is not None
        started = time.perf_counter()
        workflow = await _deadline(
            backend.run_workflow(request), request.agent_timeout_sec, "workflow", None
        )
        graded_at = time.perf_counter()
        grader = None
        if backend.grading_applies(request, workflow):
            grader = await _deadline(
                backend.run_grader(request, workflow),
                request.grader_timeout_sec,
                "grader",
                workflow,
            )
        done = time.perf_counter()
        timings = {
            "workflow_ms": (graded_at - started) * 1000,
            "grader_ms": (done - graded_at) * 1000 if grader is not None else None,
        }
        return construct(ExecutionOutcome, workflow=workflow, grader=grader), timings

    def _line(
        self, job: Job, outcome: ExecutionOutcome, timings: dict[str, float | None], attempts: int
    ) -> ResultLine:
        result = outcome.result
        sample = result.sample
        status = status_of(outcome)
        reward = sample.reward if sample is not None and status == "success" else None
        passed: bool | None = None
        if status == "success":
            passed = reward is not None and reward >= self.settings.pass_threshold
        elif status in ("failure", "timeout"):
            passed = False
        messages = None if self.settings.no_messages or sample is None else sample.messages
        return construct(
            ResultLine,
            **row_fields(job),
            status=status,
            error_category=str(result.err_category) if result.err_category else None,
            error_message=result.err_message,
            reward=reward,
            passed=passed,
            attempts=attempts,
            workflow_ms=round_ms(timings["workflow_ms"]),
            grader_ms=round_ms(timings["grader_ms"]),
            metrics=dict(sample.metrics) if sample is not None else {},
            messages=messages,
            label=job.row.label,
            metadata=job.row.metadata,
            seed=job.seed,
            finished_at=round(time.time(), 3),
        )

    def _record(
        self,
        job: Job,
        line: ResultLine,
        *,
        result: ExecutionOutcome | None,
        request: ExecutionRequest | None,
        timings: dict[str, float | None] | None = None,
    ) -> None:
        assert self.store is not None
        raw = encode(line.__dict__)
        if self.store.has_secrets:
            # A workflow may put the key in an error message: keep it out of memory too.
            redacted = self.store.redact_bytes(raw)
            if redacted != raw:
                raw, line = redacted, ResultLine.model_validate_json(redacted)
        doc = result_document(job, line, result, request, timings)
        trajectory = self._trajectory(line, result)
        self.store.write_rollout(job.rollout_id, line=raw, result=doc, trajectory=trajectory)
        self._metrics.add(line)
        if self.reporter is not None:
            self.reporter.rollout_finished(line, raw)

    def _trajectory(self, line: ResultLine, outcome: ExecutionOutcome | None) -> bytes | None:
        sample = outcome.result_to_save.sample if outcome is not None else None
        if sample is None or not sample.trajectory_messages:
            return None
        doc = trajectory_from_messages(
            sample.trajectory_messages,
            rollout_id=line.rollout_id,
            agent_version=__version__,
            label=sample.label,
            reward=sample.reward,
            sample_metrics=sample.metrics,
            sample_extra_fields=sample.extra_fields,
            request_metadata=line.metadata,
        )
        return encode(doc) if doc is not None else None


async def _deadline(
    work: Any, seconds: float | None, stage: str, workflow: ExecutionResult | None
) -> ExecutionResult:
    """Await ``work`` within ``seconds``; past it, a timeout result (the sample kept)."""
    if seconds is None:
        result: ExecutionResult = await work
        return result
    try:
        async with asyncio.timeout(seconds) as scope:
            result = await work
    except TimeoutError:
        return timed_out(stage, seconds, workflow)
    if scope.expired():  # the user's code swallowed the cancellation, or blocked
        return timed_out(stage, seconds, workflow)
    return result
