"""One rollout's lifecycle: its attempts, then its records. Eval's scheduler and the rollout
server both drive it, so a rollout ends the same way whichever of them ran it.

``Lifecycle.run(job, request, endpoint)`` runs the attempts:

- first it waits while the store's writer is behind (``RunStore.room``): when rollouts finish
  faster than the disk takes their files, new ones wait to start and the event loop is not held;
- each attempt opens the rollout's account on the model gateway (if the run has one), then
  ``await executor.run(attempt, deadlines)``, with the driver's ``Deadlines`` (``deadlines.py``);
- an attempt the backend lost (``AttemptLost``) runs again without counting, at most
  ``LOST_LIMIT`` times in a row; then it is the rollout's failure;
- a transient failure (``TRANSIENT``: a timeout, an agent error) is retried while attempts are
  left, after ``retry_delay`` (the one back-off rule, ``osmosis_run/retry.py``, or the
  Retry-After the failure carried when that is longer); every retried attempt's error is kept
  for result.json;
- any other exception of the executor is handled by the driver's policy,
  ``on_executor_error``: ``"stop"`` (eval) lets it out, so the run stops and raises it with its
  traceback; ``"fail"`` (the server) makes it that rollout's ``internal_error`` and logs the
  traceback.

``Lifecycle.record(...)`` writes a finished rollout: its results line (the run's
``pass_threshold``; a cancelled rollout's category is ``cancelled``, by ``result_line``),
result.json and trajectory.json (with the driver's ``extra``), redacted of the store's secrets
and of the rollout's own (a served request's model key), through ``store.write_rollout``, and
into ``metrics``. Output that JSON cannot hold is that rollout's ``validation_error``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from osmosis_run import _redact
from osmosis_run._construct import construct
from osmosis_run._json import encode
from osmosis_run.results.metrics import MetricsAccumulator
from osmosis_run.results.records import ResultLine
from osmosis_run.retry import backoff
from osmosis_run.run.deadlines import Deadlines
from osmosis_run.run.rollouts import (
    Job,
    attempt_error,
    internal_error,
    result_document,
    result_line,
    trajectory_document,
    unwritable,
)
from osmosis_run.run.seam import (
    LOST_LIMIT,
    Artifacts,
    Attempt,
    AttemptLost,
    AttemptResult,
    Executor,
    ModelGateway,
)
from osmosis_run.sdk.backend import ARTIFACTS
from osmosis_run.sdk.context import RolloutContext
from osmosis_run.sdk.types import (
    ExecutionOutcome,
    ExecutionRequest,
    ExecutionResult,
    RolloutErrorCategory,
    RolloutStatus,
)
from osmosis_run.store.layout import rollout_dir
from osmosis_run.store.store import RunStore

__all__ = [
    "RETRY_BASE_S",
    "RETRY_MAX_S",
    "TICK_S",
    "TRANSIENT",
    "Lifecycle",
    "OnExecutorError",
    "Timings",
    "retry_delay",
]

logger = _redact.logger(__name__)

TRANSIENT = frozenset({RolloutErrorCategory.TIMEOUT, RolloutErrorCategory.AGENT_ERROR})
# Retries back off by the one rule (osmosis_run/retry.py): attempt n waits a random time in
# [d/2, d] with d = min(RETRY_MAX_S, RETRY_BASE_S * 2**(n-1)), or the Retry-After the failure
# carried if that is longer (at most MAX_RETRY_AFTER_S).
RETRY_BASE_S = 0.5
RETRY_MAX_S = 30.0
# Every few milliseconds a driver hands what it recorded to the store's writer.
TICK_S = 0.02

OnExecutorError = Literal["stop", "fail"]
"""What an executor's unexpected exception does: ``"stop"`` the run, or ``"fail"`` the rollout."""

Timings = dict[str, float | None]


def retry_delay(attempt: int, retry_after: float | None, rng: random.Random) -> float:
    """Seconds to wait before attempt ``attempt + 1``: exponential back-off with jitter.

    ``retry_after`` (what a rate-limited request asked for) wins when it is longer.
    """
    delay = backoff(attempt, base_s=RETRY_BASE_S, max_s=RETRY_MAX_S, rng=rng)
    return max(delay, retry_after) if retry_after is not None else delay


class Lifecycle:
    """Run a rollout's attempts through an executor, then record it in a store.

    Args:
        executor: what runs each attempt.
        store: the opened run directory.
        deadlines: handed to the executor with every attempt (the driver's own).
        pass_threshold: the run's: a success with at least this reward passed.
        samples: samples per row (for the metrics).
        group_by: the metadata key the metrics group by.
        attempts: attempts at most (``--retries`` + 1; the server makes one).
        messages: whether results lines carry the transcript.
        gateway: the model gateway between the rollouts and the model (None: direct).
        on_executor_error: ``"stop"`` or ``"fail"`` (see the module docstring).
        sleep: how retries wait (tests pass a fake clock).
        rng: the jitter of retry back-off.
    """

    def __init__(
        self,
        executor: Executor,
        store: RunStore,
        *,
        deadlines: Deadlines,
        pass_threshold: float,
        samples: int = 1,
        group_by: str | None = None,
        attempts: int = 1,
        messages: bool = True,
        gateway: ModelGateway | None = None,
        on_executor_error: OnExecutorError = "stop",
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.executor = executor
        self.store = store
        self.deadlines = deadlines
        self.pass_threshold = pass_threshold
        self.samples = samples
        self.group_by = group_by
        self.attempts = attempts
        self.messages = messages
        self.gateway = gateway
        self.on_executor_error = on_executor_error
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.metrics = self.new_metrics()

    def new_metrics(self) -> MetricsAccumulator:
        """An empty accumulator with the run's threshold, samples and grouping."""
        return MetricsAccumulator(
            pass_threshold=self.pass_threshold, samples=self.samples, group_by=self.group_by
        )

    # -- attempts -----------------------------------------------------------------------

    async def run(
        self, job: Job, request: ExecutionRequest, endpoint: RolloutContext
    ) -> tuple[ExecutionOutcome, Timings, int]:
        """Run a rollout's attempts; return the last one's outcome, its timings, the count.

        Each attempt gets a context derived from ``endpoint`` (its model URL and key), with the
        rollout's id and seed.

        Raises:
            Exception: what the executor raised, with ``on_executor_error="stop"``.
        """
        gateway, rid = self.gateway, job.rollout_id
        attempt = lost = 0
        await self.store.room()
        while True:
            attempt += 1
            context = endpoint.derive(rid, seed=job.seed)
            if gateway is not None:
                gateway.open_rollout(
                    rid, sample_index=job.sample_index, timeout_s=request.agent_timeout_sec
                )
                context.chat_completions_url = gateway.url_for(rid)
            try:
                result = await self.executor.run(Attempt(request, attempt, context), self.deadlines)
                lost = 0
            except AttemptLost as exc:
                lost += 1
                if lost <= LOST_LIMIT:
                    attempt -= 1
                    continue
                result = _lost(exc, lost)
            except Exception as exc:
                if self.on_executor_error == "stop":
                    raise
                logger.exception("rollout %s: the executor raised", rid)
                result = AttemptResult(_outcome(internal_error(exc, stage="backend")), None, None)
            outcome = result.outcome
            timings = {"workflow_ms": result.workflow_ms, "grader_ms": result.grader_ms}
            if result.artifacts is not None:
                job.artifacts = result.artifacts
                await self._ship(rid, result.artifacts)
            failure = outcome.result
            if attempt >= self.attempts or failure.err_category not in TRANSIENT:
                return outcome, timings, attempt
            diagnostics = failure.extra_fields or {}
            delay = retry_delay(attempt, diagnostics.get("retry_after_s"), self._rng)
            job.attempt_errors.append({**attempt_error(attempt, failure), "retry_in_s": delay})
            await self._sleep(delay)

    async def _ship(self, rollout_id: str, artifacts: Artifacts) -> None:
        """Write artifacts a backend shipped back into the rollout's directory (off the loop)."""
        if artifacts.files:
            where = rollout_dir(self.store.dir, rollout_id) / ARTIFACTS
            await asyncio.to_thread(_write_files, where, artifacts.files)

    # -- records ------------------------------------------------------------------------

    def record(
        self,
        job: Job,
        outcome: ExecutionOutcome,
        request: ExecutionRequest | None,
        timings: Timings,
        attempts: int,
        *,
        extra: dict[str, Any] | None = None,
        secret: str | None = None,
    ) -> tuple[ResultLine, bytes]:
        """Write a rollout that ran; return its results line, as a model and as written.

        ``extra`` adds keys to trajectory.json's ``extra.osmosis``; ``secret`` (the rollout's
        own, such as a served request's model key) is redacted with the store's secrets.

        Raises:
            InfrastructureError: the run directory cannot be written (now or an earlier batch).
        """
        line = result_line(
            job,
            outcome,
            timings,
            attempts,
            pass_threshold=self.pass_threshold,
            messages=self.messages,
        )
        if self.gateway is not None:
            line.usage = self.gateway.take_usage(job.rollout_id)
        return self.write(job, line, outcome, request, timings, extra=extra, secret=secret)

    def write(
        self,
        job: Job,
        line: ResultLine,
        outcome: ExecutionOutcome | None,
        request: ExecutionRequest | None,
        timings: Timings | None,
        *,
        extra: dict[str, Any] | None = None,
        secret: str | None = None,
    ) -> tuple[ResultLine, bytes]:
        """Write a rollout's records given its results line (an invalid row's has no outcome).

        Raises:
            InfrastructureError: the run directory cannot be written (now or an earlier batch).
        """
        redactor = self.store.redactor
        if secret:
            redactor = _redact.Redactor((*redactor.secrets, secret))
        try:
            raw, line, doc, trajectory = self._documents(
                job, line, outcome, request, timings, extra, redactor, secret
            )
        except ValueError as exc:  # user output that JSON cannot hold: this rollout's failure
            line, outcome = unwritable(line, outcome, exc)
            raw, line, doc, trajectory = self._documents(
                job, line, outcome, request, timings, extra, redactor, secret
            )
        self.store.write_rollout(job.rollout_id, line=raw, result=doc, trajectory=trajectory)
        self.metrics.add(line)
        return line, raw

    @staticmethod
    def _documents(
        job: Job,
        line: ResultLine,
        outcome: ExecutionOutcome | None,
        request: ExecutionRequest | None,
        timings: Timings | None,
        extra: dict[str, Any] | None,
        redactor: _redact.Redactor,
        secret: str | None,
    ) -> tuple[bytes, ResultLine, bytes, bytes | None]:
        """The results line, result.json and trajectory.json of a rollout, redacted.

        The store redacts its own secrets from every file; the line is redacted here too,
        since the summary's error examples come from it, and a rollout's own ``secret``,
        which the store does not know, from every document.

        Raises:
            ValueError: the rollout's output holds a value JSON cannot hold.
        """
        raw = encode(line.__dict__)
        if redactor:
            # A workflow may put the key in an error message: keep it out of memory too.
            redacted = redactor.json_bytes(raw)
            if redacted != raw:
                raw, line = redacted, ResultLine.model_validate_json(redacted)
        doc = result_document(job, line, outcome, request, timings)
        trajectory = trajectory_document(line, outcome, extra=extra)
        if secret:
            doc = redactor.json_bytes(doc)
            trajectory = redactor.json_bytes(trajectory) if trajectory is not None else None
        return raw, line, doc, trajectory


def _outcome(result: ExecutionResult) -> ExecutionOutcome:
    return construct(ExecutionOutcome, workflow=result, grader=None)


def _lost(error: AttemptLost, times: int) -> AttemptResult:
    """The failure of a rollout the backend lost ``times`` times in a row."""
    failed = ExecutionResult(
        status=RolloutStatus.FAILURE,
        sample=None,
        err_message=(
            f"{error.repeated} {times} times in a row"
            if error.repeated
            else f"the backend lost this rollout {times} times in a row ({error})"
        ),
        err_category=RolloutErrorCategory.AGENT_ERROR,
        extra_fields={"stage": "backend"},
    )
    return AttemptResult(_outcome(failed), None, None, None)


def _write_files(where: Path, files: Mapping[str, bytes]) -> None:
    """Write shipped artifacts under ``where``; a path that leaves it is skipped."""
    root = where.resolve()
    for name, data in files.items():
        target = (where / name).resolve()
        if not target.is_relative_to(root):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
