"""What a rollout server does, without the web framework: admit, execute, answer, record, stop.

``RolloutService`` holds the rollouts (``table.py``) and drives each one through the rollout
lifecycle eval's scheduler drives (``run/lifecycle.py``): one attempt through the engine's seam
(``LocalExecutor``, each stage within the service's own ``Deadlines``, from the moment the
rollout gets a concurrency slot; the trainer retries), then its records in the store eval uses:
one ``results.jsonl`` line (the run's pass threshold, the config's ``pass_threshold``),
``rollouts/<id>/result.json`` and ``trajectory.json`` (ATIF, carrying the request's
``extra_fields``), redacted of the server's key and of the request's own, and the artifacts the
workflow wrote, so ``osmosis-run report RUN --html`` shows what a server did. An executor's
unexpected exception fails that rollout (``internal_error``) and its traceback is logged: the
lifecycle's ``"fail"`` policy.

With a model gateway (``osmosis-run serve --chat-completions-url``), every rollout is handed the
gateway's URL for it and the gateway's run key, whatever URL and key its caller sent: its model
calls are counted (the results line's ``usage``), paced, recorded and cached as an eval's, and
the summary has the gateway's figures (``model.gateway``). Without one, a rollout gets the
caller's URL and key.

Every admitted rollout ends with exactly one result, recorded once: the executor's, or a
cancellation, or a lease that ran out (``failure`` / ``lease_expired``: the result is final at
once, and the execution is cancelled). A cancelled rollout whose code ignores its cancellation
is given its ``cancelled`` result after ``abandon_grace_s`` and left to itself.

With worker processes (``Workers``, ``osmosis-run serve --workers N``), the attempts run on
``ProcessExecutor`` (``backends/processes.py``), as ``eval --backend processes`` runs them: a
worker that dies loses only its rollouts in flight (they run again alone; one that kills its
worker 4 times in a row fails), a stage that does not stop at its deadline is killed with its
worker (a ``timeout``), and ``--max-worker-memory`` / ``--worker-recycle`` hold. The server's
window stays the limit of rollouts executing at once; each worker writes its rollouts'
artifacts into the run directory, and the ``grading`` status comes back from the worker. The
workers start in ``start`` (or earlier, ``open_executor``) and stop in ``shutdown``.

Stopping (``shutdown``): admissions stop (503), rollouts in flight get ``drain_s`` to finish,
then they are cancelled and get ``cleanup_s`` more; what finished is on disk with the summary.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osmosis_run import _redact
from osmosis_run._construct import construct
from osmosis_run.backends.local import LocalExecutor
from osmosis_run.backends.processes import Pool, ProcessExecutor
from osmosis_run.errors import FingerprintMismatchError, InfrastructureError, RunDirError
from osmosis_run.results.records import ResultLine, Summary
from osmosis_run.run.dataset import Row
from osmosis_run.run.deadlines import ABANDON_GRACE_S, Deadlines
from osmosis_run.run.fingerprint import source_hash
from osmosis_run.run.lifecycle import TICK_S, Lifecycle, Timings
from osmosis_run.run.rollouts import CANCELLED, Job, internal_error, request_of, rollout_seed
from osmosis_run.run.seam import Executor, ModelGateway
from osmosis_run.sdk.backend import LocalBackend
from osmosis_run.sdk.context import RolloutContext
from osmosis_run.sdk.types import (
    ExecutionOutcome,
    ExecutionRequest,
    ExecutionResult,
    RolloutErrorCategory,
    RolloutStatus,
)
from osmosis_run.server.protocol import (
    CancelRolloutsRequest,
    ProtocolError,
    RolloutInitRequest,
    dumps,
    result_body,
    status_body,
)
from osmosis_run.server.table import Entry, InvalidLease, RolloutTable, UnknownRollout
from osmosis_run.store.store import RunStore

__all__ = [
    "DEFAULT_POLLING_LEASE_TIMEOUT_SEC",
    "DEFAULT_RESULT_RETENTION_SEC",
    "DEFAULT_RESULT_WAIT_TIMEOUT_SEC",
    "RolloutService",
    "Workers",
    "check_timings",
]

logger = _redact.logger(__name__)

DEFAULT_RESULT_WAIT_TIMEOUT_SEC = 30.0
DEFAULT_POLLING_LEASE_TIMEOUT_SEC = 120.0
DEFAULT_RESULT_RETENTION_SEC = 900.0
DRAIN_S = 10.0
CLEANUP_S = 120.0
RETRY_AFTER_S = "5"


@dataclass(frozen=True, slots=True)
class Workers:
    """Run the served rollouts in worker processes (``osmosis-run serve --workers N``).

    Attributes:
        load: what each worker loads, by path (``backends.processes.load_spec`` of the
            settings the served classes were loaded from).
        count: how many worker processes.
        max_memory: bytes of resident memory a worker may hold (None: no limit).
        recycle: rollouts after which a worker is replaced (None: never).
        notify: one line for stderr as it happens (a lost worker).
    """

    load: dict[str, Any]
    count: int
    max_memory: int | None = None
    recycle: int | None = None
    notify: Callable[[str], None] | None = None


def check_timings(*, wait_s: float, lease_s: float, retention_s: float) -> None:
    """The SDK's rules for a server's timings.

    Raises:
        ValueError: the wait is not finite and positive, the lease does not exceed it, or the
            retention is not finite and non-negative.
    """
    if not math.isfinite(wait_s) or wait_s <= 0:
        raise ValueError("result_wait_timeout_sec must be finite and greater than zero")
    if not math.isfinite(retention_s) or retention_s < 0:
        raise ValueError("result_retention_sec must be finite and non-negative")
    if not math.isfinite(lease_s) or lease_s <= wait_s:
        raise ValueError("polling_lease_timeout_sec must exceed result_wait_timeout_sec")


class RolloutService:
    """Admit, execute, answer and record the rollouts of one server.

    Args:
        backend: runs the user's workflow and grader; its artifacts go into the run directory.
        run_dir: where the served rollouts are recorded (opened, and locked, here).
        result_wait_s: how long a poll waits for a status change.
        lease_s: how long a lease lasts after its last poll.
        retention_s: how long a final result stays pollable.
        concurrency: rollouts executing at once (None: no limit).
        secrets: strings never written to the run directory (the server's API key, the
            model endpoint's; the gateway's run key is added here).
        drain_s: at shutdown, how long rollouts in flight get before they are cancelled.
        cleanup_s: then how long cancelled rollouts get to end.
        abandon_grace_s: how long a cancelled rollout gets before its result is published,
            and a stage past its deadline before it is abandoned.
        pass_threshold: the run's: a success with at least this reward passed (eval's
            ``pass_threshold``).
        executor: runs each attempt (default: ``LocalExecutor`` over ``backend``, which
            reports the ``grading`` status; tests pass ``FakeExecutor``).
        workers: run each attempt in these worker processes instead (``ProcessExecutor``),
            ``concurrency`` at once over all of them; not with ``executor``.
        gateway: the model gateway the rollouts call (None: the URL and key their caller
            sent); started by the caller, who closes it after ``shutdown``.

    Raises:
        ValueError: a timing is invalid (``check_timings``), or both ``executor`` and
            ``workers`` are given.
        RunDirError: the run directory cannot be used.
    """

    def __init__(
        self,
        backend: LocalBackend,
        *,
        run_dir: Path,
        result_wait_s: float,
        lease_s: float,
        retention_s: float,
        concurrency: int | None,
        secrets: tuple[str, ...] = (),
        drain_s: float = DRAIN_S,
        cleanup_s: float = CLEANUP_S,
        abandon_grace_s: float = ABANDON_GRACE_S,
        pass_threshold: float = 1.0,
        executor: Executor | None = None,
        workers: Workers | None = None,
        gateway: ModelGateway | None = None,
    ) -> None:
        check_timings(wait_s=result_wait_s, lease_s=lease_s, retention_s=retention_s)
        if executor is not None and workers is not None:
            raise ValueError("give an executor or workers, not both")
        self.backend = backend
        self.result_wait_s = result_wait_s
        self.lease_s = lease_s
        self.concurrency = concurrency
        self.drain_s = drain_s
        self.cleanup_s = cleanup_s
        self.abandon_grace_s = abandon_grace_s
        self.accepting = True
        self.process_id = str(uuid.uuid4())
        self.instance_id = os.environ.get("_OSMOSIS_ROLLOUT_INSTANCE_ID") or self.process_id
        self.table = RolloutTable(
            lease_s=lease_s, retention_s=retention_s, on_expired=self._lease_expired
        )
        self.gateway = gateway
        run_key = (gateway.api_key,) if gateway is not None else ()
        self.store = _open_store(run_dir, backend, (*secrets, *run_key))
        backend.artifact_root = self.store.rollouts_dir.absolute()
        if workers is not None:
            executor = _on_workers(workers, backend.artifact_root, concurrency, self._grading)
        self.executor = executor or LocalExecutor(backend, on_grading=self._grading)
        self._executor_open = False
        self.deadlines = Deadlines(abandon_grace_s=abandon_grace_s)
        self.lifecycle = Lifecycle(
            self.executor,
            self.store,
            deadlines=self.deadlines,
            pass_threshold=pass_threshold,
            attempts=1,  # the trainer retries: one attempt per request
            on_executor_error="fail",  # the server's policy: that rollout fails, logged
            gateway=gateway,
        )
        self._window = asyncio.Semaphore(concurrency) if concurrency else None
        self._tasks: set[asyncio.Task[None]] = set()
        self._queued = 0
        self._running = 0
        self._admitted = 0
        self._earlier = 0  # rollouts an earlier server recorded in this run directory
        self._hand_timer: asyncio.TimerHandle | None = None
        self._reader: int | None = None
        self._started = 0.0
        self.recording_error: InfrastructureError | None = None
        """Why recording stopped, if it did: the server then stops (``on_recording_failed``)."""
        self.on_recording_failed: Callable[[InfrastructureError], None] | None = None
        """Called once when recording fails (``osmosis-run serve`` stops and exits with 4)."""
        self._closed = False
        self._recorded = self._load_recorded()

    @property
    def run_dir(self) -> Path:
        """Where the served rollouts are recorded."""
        return self.store.dir

    @property
    def active(self) -> int:
        """Rollouts whose execution has not ended."""
        return len(self._tasks)

    async def open_executor(self) -> None:
        """Get the executor ready (start the worker processes), once; if it cannot, the run
        directory is closed (nothing will be served).

        Raises:
            BackendError: a worker process cannot start or load the classes.
        """
        if self._executor_open:
            return
        try:
            await self.executor.open()
        except BaseException:
            self._closed = True
            self.store.close()
            raise
        self._executor_open = True

    async def close_executor(self) -> None:
        """Stop the executor (the worker processes), once opened; nothing is left running."""
        if self._executor_open:
            self._executor_open = False
            await self.executor.close()

    async def start(self) -> None:
        """Get the executor ready and start recording (the writer process, if one can start).

        Raises:
            BackendError: a worker process cannot start or load the classes.
        """
        await self.open_executor()
        self._started = time.perf_counter()
        reply_fd = self.store.start_writer()
        if reply_fd is not None:
            asyncio.get_running_loop().add_reader(reply_fd, self._poll_writer)
            self._reader = reply_fd

    def _poll_writer(self) -> None:
        """Take the writer's answers; one that failed stops recording at once, not later."""
        self.store.poll()
        failure = self.store.failure()
        if failure is not None:
            self._recording_failed(failure)

    # -- the protocol -------------------------------------------------------------------

    def admit(self, request: RolloutInitRequest) -> bytes:
        """Admit one rollout; its execution is scheduled before the 202 body is returned.

        Raises:
            ProtocolError: 503 shutting down, 429 no capacity, 409 the id is held.
        """
        if not self.accepting:
            if self.recording_error is not None:
                raise ProtocolError(503, "rollout server cannot record rollouts; it is stopping")
            raise ProtocolError(503, "rollout server is shutting down")
        if not self.backend.has_capacity():
            raise ProtocolError(
                429, "rollout queue is full; retry later", headers={"Retry-After": RETRY_AFTER_S}
            )
        if request.rollout_id in self._recorded:
            raise ProtocolError(
                409, "rollout_id is already recorded in this server's run directory"
            )
        held = self.table.register(request.rollout_id)
        if held is None:
            raise ProtocolError(409, "rollout_id is already registered")
        entry, token = held
        entry.job = _job(request, self._earlier + self._admitted)
        entry.secret = request.llm_api_key
        self._admitted += 1
        try:
            task = asyncio.get_running_loop().create_task(
                self._execute(entry, request), name=request.rollout_id
            )
        except BaseException:
            self.table.discard(entry)
            raise
        entry.task = task
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._ended(entry, done))
        return dumps(
            {
                "rollout_id": request.rollout_id,
                "status": "queued",
                "polling_lease_token": token,
                "result_wait_timeout_sec": float(self.result_wait_s),
                "polling_lease_timeout_sec": float(self.lease_s),
            }
        )

    async def poll(
        self,
        rollout_id: str,
        token: str,
        *,
        gone: Callable[[], asyncio.Future[None]] | None = None,
    ) -> bytes:
        """One long-poll: renew the lease, wait for a status change, answer.

        ``gone``, called when the poll is about to wait, gives a future that resolves when the
        client hangs up: the poll stops waiting then.

        Raises:
            ProtocolError: 404 unknown rollout, 403 wrong lease.
        """
        entry = self._entry(rollout_id, token)
        if entry.body is not None:
            return entry.body
        if not self.table.renew(entry):
            self._lease_expired(entry)
        if entry.body is not None:
            return entry.body
        await self.table.wait_for_change(
            entry, self.result_wait_s, gone=gone() if gone is not None else None
        )
        entry = self._entry(rollout_id, token)
        if entry.body is not None:
            return entry.body
        return status_body(rollout_id, entry.status)

    def cancel(self, request: CancelRolloutsRequest) -> bytes:
        """Cancel rollouts by ids, prefix or all; each gets its disposition.

        Raises:
            ProtocolError: 422 unless exactly one selector is given.
        """
        if request.selectors() != 1:
            raise ProtocolError(422, "pass exactly one selector: ids, prefix, or all")
        dispositions: dict[str, str] = {}
        for rollout_id in self.table.select(
            ids=request.ids, prefix=request.prefix, all=request.all
        ):
            entry = self.table.entries.get(rollout_id)
            if entry is None or entry.body is not None:
                dispositions[rollout_id] = "not_found"
            else:
                dispositions[rollout_id] = self._cancel_execution(entry)
        return dumps({"dispositions": dispositions})

    def health(self) -> bytes:
        """The backend's health with live counts, the instance and the lifecycle."""
        payload = dict(self.backend.health())
        payload["concurrency"] = {
            "max_concurrent": self.concurrency,
            "queued": self._queued,
            "running": self._running,
        }
        payload["instance_id"] = self.instance_id
        payload["process_id"] = self.process_id
        payload["lifecycle"] = {
            "accepting_rollouts": self.accepting,
            "active_rollouts": self.active,
        }
        table = self.table
        payload["rollouts"] = {  # what the server holds: bounded by in flight + retention
            "held": len(table.entries),
            "leases": table.leases,
            "timers": table.timers,
            "polls_waiting": table.waiting,
            "admitted": self._admitted,
        }
        return dumps(payload)

    def _entry(self, rollout_id: str, token: str) -> Entry:
        try:
            return self.table.get(rollout_id, token)
        except UnknownRollout:
            raise ProtocolError(404, "unknown rollout_id") from None
        except InvalidLease:
            raise ProtocolError(403, "invalid polling lease") from None

    # -- execution ------------------------------------------------------------------------

    async def _execute(self, entry: Entry, init: RolloutInitRequest) -> None:
        """Wait for a slot, run the attempt, publish and record its result."""
        request = request_of(
            entry.job,
            init.initial_messages,
            agent_timeout=init.agent_timeout_sec,
            grader_timeout=init.grader_timeout_sec,
            grade=init.grade,
        )
        extra = {"request_extra_fields": init.extra_fields} if init.extra_fields else None
        try:
            outcome, timings = await self._attempt(entry, request, init)
        except asyncio.CancelledError:
            self._publish(entry, _cancelled(), request, None, extra)
            raise
        if entry.disposition is not None:  # cancelled, and its code returned all the same
            self._publish(entry, _cancelled(), request, None, extra)
            return
        self._publish(entry, outcome, request, timings, extra)

    async def _attempt(
        self, entry: Entry, request: ExecutionRequest, init: RolloutInitRequest
    ) -> tuple[ExecutionOutcome, Timings]:
        """Wait for a slot; then the rollout's one attempt, through the lifecycle."""
        window = self._window
        self._queued += 1
        try:
            if window is not None:
                await window.acquire()
        finally:
            self._queued -= 1
        self._running += 1
        try:
            self.table.set_status(entry, RolloutStatus.RUNNING)
            endpoint = self._endpoint(init)
            outcome, timings, _ = await self.lifecycle.run(entry.job, request, endpoint)
            return outcome, timings
        finally:
            self._running -= 1
            if window is not None:
                window.release()

    def _endpoint(self, init: RolloutInitRequest) -> RolloutContext:
        """The rollout's model endpoint: the gateway's (the lifecycle gives each attempt its
        URL), else what the caller sent."""
        gateway = self.gateway
        if gateway is not None:
            return RolloutContext(
                chat_completions_url=gateway.url_for(init.rollout_id),
                api_key=gateway.api_key,
                rollout_id=init.rollout_id,
            )
        return RolloutContext(
            chat_completions_url=init.chat_completions_url,
            api_key=init.llm_api_key,
            rollout_id=init.rollout_id,
        )

    def _grading(self, rollout_id: str, _workflow: ExecutionResult | None = None) -> None:
        entry = self.table.entries.get(rollout_id)
        if entry is not None:
            self.table.set_status(entry, RolloutStatus.GRADING)

    def _publish(
        self,
        entry: Entry,
        outcome: ExecutionOutcome,
        request: ExecutionRequest | None,
        timings: Timings | None,
        extra: dict[str, Any] | None,
    ) -> None:
        """Record a rollout's result and make it final (once), whatever recording raises.

        A rollout that cannot be recorded is answered as a failure saying why, so that no
        client is told of a success the run directory does not hold.
        """
        if entry.body is not None:
            return
        try:
            self._record(entry.job, outcome, request, timings, extra, secret=entry.secret)
        except InfrastructureError as exc:
            self._recording_failed(exc)
            outcome = _unrecorded(exc)
        except Exception as exc:  # a bug in recording: this rollout's failure, with its traceback
            logger.exception("recording rollout %s failed", entry.rollout_id)
            outcome = self._record_crash(entry, exc)
        try:
            body = result_body(entry.rollout_id, outcome)
        except Exception as exc:  # a bug in shaping the answer: still an answer
            logger.exception("answering rollout %s failed", entry.rollout_id)
            outcome = _crashed(exc)
            body = result_body(entry.rollout_id, outcome)
        self.table.finish(entry, outcome.result.status, body)

    def _record_crash(self, entry: Entry, exc: Exception) -> ExecutionOutcome:
        """Record a rollout whose own record could not be made as the failure that it is."""
        crashed = _crashed(exc)
        try:
            self._record(entry.job, crashed, None, None, None, secret=entry.secret)
        except InfrastructureError as error:
            self._recording_failed(error)
            return _unrecorded(error)
        except Exception:
            logger.exception("recording rollout %s as a failure failed too", entry.rollout_id)
        return crashed

    def _lease_expired(self, entry: Entry) -> None:
        """Nobody polled for a lease's length: the result is a failure, the execution stops."""
        if entry.body is not None:
            return
        expired = ExecutionResult(
            status=RolloutStatus.FAILURE,
            err_message="polling lease expired",
            err_category=RolloutErrorCategory.LEASE_EXPIRED,
            extra_fields={"stage": "server"},
        )
        self._publish(entry, _outcome(expired), None, None, None)
        self._cancel_execution(entry)

    def _cancel_execution(self, entry: Entry) -> str:
        """Cancel a rollout's execution (once); its result follows when it ends."""
        if entry.disposition is not None:
            return entry.disposition
        queued = entry.status == RolloutStatus.QUEUED
        entry.disposition = "cancelled_queued" if queued else "cancelled_running"
        task = entry.task
        if task is not None and not task.done():
            task.cancel()
            loop = asyncio.get_running_loop()
            loop.call_later(self.abandon_grace_s, self._abandon, entry)
        return entry.disposition

    def _abandon(self, entry: Entry) -> None:
        """A cancelled rollout still running after the grace: publish it, leave its task."""
        if entry.body is None:
            self._publish(entry, _cancelled(), None, None, None)
        if entry.task is not None:
            self.deadlines.abandon(entry.task)

    def _ended(self, entry: Entry, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        try:
            if not task.cancelled() and task.exception() is not None:  # only a bug gets here
                logger.error("rollout %s task failed", entry.rollout_id, exc_info=task.exception())
                self._publish(entry, _crashed(task.exception() or RuntimeError()), None, None, None)
        finally:
            if entry.release_when_done:
                self.table.release(entry)

    # -- records --------------------------------------------------------------------------

    def _record(
        self,
        job: Job,
        outcome: ExecutionOutcome,
        request: ExecutionRequest | None,
        timings: Timings | None,
        extra: dict[str, Any] | None,
        *,
        secret: str | None = None,
    ) -> None:
        """Write one finished rollout into the run directory, through the lifecycle.

        ``secret`` (the request's model key) is redacted from every file the rollout leaves.

        Raises:
            InfrastructureError: the run directory cannot be written (now or an earlier batch).
        """
        if self._closed:
            return
        self.lifecycle.record(
            job,
            outcome,
            request,
            timings or {"workflow_ms": None, "grader_ms": None},
            1,
            extra=extra,
            secret=secret,
        )
        self._recorded.add(job.rollout_id)
        self._schedule_hand_off()

    def _schedule_hand_off(self) -> None:
        if self.store.pending and self._hand_timer is None:
            self._hand_timer = asyncio.get_running_loop().call_later(TICK_S, self._hand_off)

    def _hand_off(self) -> None:
        self._hand_timer = None
        try:
            self.store.hand_off()
        except InfrastructureError as exc:
            self._recording_failed(exc)

    def _recording_failed(self, exc: InfrastructureError) -> None:
        """Recording stopped: say so once, refuse new rollouts, and have the server stop."""
        if self.recording_error is not None:
            return
        self.recording_error = exc
        self.accepting = False
        logger.error(
            "recording served rollouts failed: %s; admissions are closed, rollouts that end "
            "from now on are answered as failures, and the server stops",
            exc,
        )
        if self.on_recording_failed is not None:
            self.on_recording_failed(exc)

    def _load_recorded(self) -> set[str]:
        """The ids an earlier server recorded in this run directory, its results counted."""

        def counted(line: ResultLine, _raw: bytes) -> None:
            self.lifecycle.metrics.add(line)
            self._earlier += 1

        try:
            return self.store.load_finished(drop_failed=False, on_line=counted)
        except BaseException:
            self.store.close()
            raise

    def summary(self) -> Summary:
        """The metrics of what this run directory holds (an earlier server's rollouts too)."""
        wall = time.perf_counter() - self._started if self._started else None
        interrupted = self.recording_error is not None
        summary = self.lifecycle.metrics.summary(planned=None, wall_s=wall, interrupted=interrupted)
        return self._with_stats(summary)

    def _with_stats(self, summary: Summary) -> Summary:
        """The gateway's figures of this server's life in ``model.gateway``, and the worker
        processes' in ``backend``, as eval's."""
        if self.gateway is not None and summary.model is not None:
            summary.model.gateway = self.gateway.stats()
        backend_stats = getattr(self.executor, "stats", None)  # where a backend has news
        if callable(backend_stats):
            summary.backend = backend_stats()
        return summary

    # -- stopping -------------------------------------------------------------------------

    def stop_admitting(self) -> None:
        """New rollouts get 503 from now on."""
        self.accepting = False

    async def shutdown(self) -> None:
        """Stop admitting, drain, cancel what is left, write what finished and the summary."""
        self.stop_admitting()
        try:
            await self._drain()
        finally:  # whatever a rollout's end raised, what finished is kept with its summary
            try:
                self.table.close()
            finally:
                self._close_store()
            try:
                await self.close_executor()
            finally:
                await self.backend.shutdown()

    async def _drain(self) -> None:
        pending = set(self._tasks)
        if pending:
            logger.info("draining %d rollout(s) in flight", len(pending))
            _, pending = await asyncio.wait(pending, timeout=self.drain_s)
        if pending:
            for entry in self.table.in_flight():
                self._cancel_execution(entry)
            _, pending = await asyncio.wait(pending, timeout=self.cleanup_s)
        for entry in self.table.in_flight():  # ignored its cancellation: published, left
            self._abandon(entry)

    def _close_store(self) -> None:
        if self._hand_timer is not None:
            self._hand_timer.cancel()
            self._hand_timer = None
        if self._reader is not None:
            asyncio.get_running_loop().remove_reader(self._reader)
            self._reader = None
        self._closed = True
        try:
            self.store.close(self._final_summary)
        except InfrastructureError as exc:
            self._recording_failed(exc)

    def _final_summary(self, durable: bool) -> Summary:
        """The summary written at the end: of what results.jsonl holds, when not everything
        handed over reached it (then the run is not complete)."""
        if durable and self.recording_error is None:
            return self.summary()
        metrics = self.lifecycle.new_metrics()
        try:
            self.store.load_finished(drop_failed=False, on_line=lambda line, _: metrics.add(line))
        except RunDirError:
            pass  # unreadable too: the counts of what was handed over are all there is
        else:
            self.lifecycle.metrics = metrics
        wall = time.perf_counter() - self._started if self._started else None
        summary = self.lifecycle.metrics.summary(planned=None, wall_s=wall, interrupted=True)
        return self._with_stats(summary)


def _on_workers(
    workers: Workers,
    artifact_root: Path,
    window: int | None,
    on_grading: Callable[[str, ExecutionResult | None], None],
) -> ProcessExecutor:
    """The executor of the worker processes: the server's window over all of them, each
    worker's share of it its default (rounded up, so that the window can be used)."""
    per_worker = -(-window // workers.count) if window else 0
    pool = Pool(
        load=workers.load,
        artifact_root=str(artifact_root),
        workers=workers.count,
        per_worker=per_worker,
        window=window,
        max_memory=workers.max_memory,
        recycle=workers.recycle,
    )
    return ProcessExecutor(pool, notify=workers.notify, on_grading=on_grading)


def _open_store(run_dir: Path, backend: LocalBackend, secrets: tuple[str, ...]) -> RunStore:
    store = RunStore(run_dir, secrets=tuple(s for s in secrets if s), background=True)
    try:
        store.open(_fingerprint(backend), fresh=False)
    except FingerprintMismatchError as exc:
        raise RunDirError(
            str(exc).replace("add --fresh to start it over, or choose", "choose")
        ) from None
    return store


def _fingerprint(backend: LocalBackend) -> dict[str, Any]:
    """What a served run is made from: the workflow and grader, and their sources."""
    workflow, grader = backend.workflow_cls, backend.grader_cls
    return {
        "served": True,
        "workflow": _path_of(workflow),
        "workflow_source": source_hash(workflow),
        "grader": _path_of(grader) if grader is not None else None,
        "grader_source": source_hash(grader),
    }


def _path_of(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _job(init: RolloutInitRequest, index: int) -> Job:
    row = Row(
        index=index,
        line=index + 1,
        id=None,
        prompt=None,
        label=init.label,
        metadata=init.metadata,
        digest="",
    )
    return Job(row, 0, init.rollout_id, rollout_seed(0, init.rollout_id, 0))


def _outcome(result: ExecutionResult) -> ExecutionOutcome:
    return construct(ExecutionOutcome, workflow=result, grader=None)


def _cancelled() -> ExecutionOutcome:
    return _outcome(
        ExecutionResult(
            status=RolloutStatus.CANCELLED,
            err_message=CANCELLED,
            extra_fields={"stage": "server"},
        )
    )


def _unrecorded(exc: InfrastructureError) -> ExecutionOutcome:
    return _outcome(
        ExecutionResult(
            status=RolloutStatus.FAILURE,
            err_message=f"the server could not record this rollout: {exc}",
            err_category=RolloutErrorCategory.INTERNAL_ERROR,
            extra_fields={"stage": "server"},
        )
    )


def _crashed(exc: BaseException) -> ExecutionOutcome:
    return _outcome(internal_error(exc, stage="server"))
