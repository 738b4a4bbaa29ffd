"""One rollout's identity and the records it leaves: its results line, result.json, trajectory.

The engine calls these once a rollout has finished; what a line says about a status (its score,
whether it passed) comes from the one outcome rule, ``osmosis_run.results.outcome``.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from osmosis_run import __version__
from osmosis_run._construct import construct
from osmosis_run._json import encode, unencodable
from osmosis_run.results.outcome import passed
from osmosis_run.results.records import ResultLine, RolloutState
from osmosis_run.run.atif import trajectory_from_messages
from osmosis_run.run.dataset import Row
from osmosis_run.sdk.types import (
    ExecutionOutcome,
    ExecutionRequest,
    ExecutionResult,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
)

__all__ = [
    "CANCELLED",
    "Job",
    "attempt_error",
    "internal_error",
    "invalid_line",
    "request_of",
    "result_document",
    "rollout_seed",
    "round_ms",
    "result_line",
    "row_fields",
    "status_of",
    "timed_out",
    "trajectory_document",
    "unwritable",
]


# The results-line category of a cancelled rollout (not an error category a backend reports).
CANCELLED = "cancelled"


@dataclass(slots=True)
class Job:
    """One rollout to run: its row, its sample index, its id and seed, what failed before."""

    row: Row
    sample_index: int
    rollout_id: str
    seed: int
    attempt_errors: list[dict[str, Any]] = field(default_factory=list)
    dirs: Any = None  # the runner's batch of artifacts directories being made
    artifacts: Any = None  # what the backend said of artifacts it did not write in place


def rollout_seed(seed: int, row_key: str, sample_index: int) -> int:
    """The seed of one rollout: a function of ``--seed``, the row and the sample index only."""
    # stable_hash("rollout", seed, row_key, sample_index), its text made in one step.
    text = f"rollout\x1f{seed}\x1f{row_key}\x1f{sample_index}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") & 0x7FFFFFFF


def request_of(
    job: Job,
    prompt: list[dict[str, Any]],
    *,
    agent_timeout: float | None,
    grader_timeout: float | None,
    grade: bool,
) -> ExecutionRequest:
    """What an executor is asked to run for a job: its id, prompt, label, metadata, timeouts.

    The prompt is handed over as it is: the backend gives each workflow and grader its own copy.
    """
    row = job.row
    return construct(
        ExecutionRequest,
        id=job.rollout_id,
        prompt=prompt,
        label=row.label,
        metadata=row.metadata,
        agent_timeout_sec=agent_timeout,
        grader_timeout_sec=grader_timeout,
        grade=grade,
    )


def timed_out(stage: str, timeout: float, workflow: ExecutionResult | None) -> ExecutionResult:
    """The result of a stage past its deadline; a grader timeout keeps the workflow's sample."""
    return ExecutionResult(
        status=RolloutStatus.FAILURE,
        sample=workflow.sample if workflow is not None else None,
        err_message=f"{stage} exceeded its {timeout:g}s deadline",
        err_category=RolloutErrorCategory.TIMEOUT,
        extra_fields={"stage": stage},
    )


def status_of(outcome: ExecutionOutcome) -> RolloutState:
    """The results-line status of an outcome."""
    return _status(outcome, outcome.result)


def _status(outcome: ExecutionOutcome, result: ExecutionResult) -> RolloutState:
    """``status_of(outcome)``, given ``outcome.result`` (a property that computes)."""
    if result.status != RolloutStatus.SUCCESS:
        return "timeout" if result.err_category == RolloutErrorCategory.TIMEOUT else "failure"
    if outcome.grader is None:
        return "ungraded"
    if result.sample is not None and result.sample.remove_sample:
        return "removed"
    return "success"


def row_fields(job: Job) -> dict[str, Any]:
    """The results-line fields that say which row and sample a rollout is."""
    return {
        "rollout_id": job.rollout_id,
        "row_index": job.row.index,
        "row_id": job.row.id,
        "line": job.row.line,
        "sample_index": job.sample_index,
    }


def invalid_line(job: Job) -> ResultLine:
    """The results line of a row that could not be read."""
    return construct(
        ResultLine,
        **row_fields(job),
        status="invalid",
        error_category="invalid_row",
        error_message=job.row.error,
        reward=None,
        passed=False,
        attempts=0,
        workflow_ms=None,
        grader_ms=None,
        metrics={},
        messages=None,
        label=None,
        metadata=None,
        finished_at=round(time.time(), 3),
        row_hash=job.row.digest,
    )


def unwritable(
    line: ResultLine, outcome: ExecutionOutcome | None, error: ValueError
) -> tuple[ResultLine, ExecutionOutcome]:
    """A rollout whose output JSON cannot hold, as that rollout's ``validation_error``.

    The message names the value (``messages[1].content holds a lone surrogate (\\ud800)``);
    the sample is not kept, since it cannot be written.
    """
    where = None
    if outcome is not None:
        sample = outcome.result_to_save.sample
        if sample is not None:
            where = unencodable(sample.__dict__, path="sample")
    if where is None:
        where = unencodable(line.__dict__, path="") or str(error)
    failed = ExecutionResult(
        status=RolloutStatus.FAILURE,
        sample=None,
        err_message=f"the rollout's output cannot be written as JSON: {where}",
        err_category=RolloutErrorCategory.VALIDATION_ERROR,
        extra_fields={
            "stage": "workflow" if outcome is None or outcome.grader is None else "grader"
        },
    )
    replaced = construct(ExecutionOutcome, workflow=failed, grader=None)
    fixed = line.model_copy(
        update={
            "status": "failure",
            "error_category": str(RolloutErrorCategory.VALIDATION_ERROR),
            "error_message": failed.err_message,
            "reward": None,
            "passed": False,
            "metrics": {},
            "messages": None,
        }
    )
    return fixed, replaced


def internal_error(error: BaseException, *, stage: str) -> ExecutionResult:
    """The failure of a rollout that osmosis-run itself (or a backend below the seam) broke.

    ``stage`` is where: ``backend`` for an executor's exception, ``server`` for the server's.
    """
    return ExecutionResult(
        status=RolloutStatus.FAILURE,
        err_message=str(error) or "Internal server error",
        err_category=RolloutErrorCategory.INTERNAL_ERROR,
        extra_fields={"stage": stage, "error_type": type(error).__name__},
    )


def attempt_error(attempt: int, result: ExecutionResult) -> dict[str, Any]:
    """What result.json keeps of an attempt that failed and was retried."""
    diagnostics = result.extra_fields or {}
    return {
        "attempt": attempt,
        "error_category": str(result.err_category) if result.err_category else None,
        "error_message": result.err_message,
        "traceback": diagnostics.get("traceback"),
    }


def result_document(
    job: Job,
    line: ResultLine,
    outcome: ExecutionOutcome | None,
    request: ExecutionRequest | None,
    timings: dict[str, float | None] | None,
) -> bytes:
    """result.json: the whole story of one rollout, for a person debugging it."""
    doc: dict[str, Any] = {
        "rollout_id": job.rollout_id,
        "row": {"index": job.row.index, "line": job.row.line, "id": job.row.id},
        "sample_index": job.sample_index,
        "status": line.status,
        "reward": line.reward,
        "attempts": line.attempts,
        "error": None,
        "request": request.__dict__ if request is not None else None,  # encoded, not kept
        "timings": {**(timings or {}), "finished_at": line.finished_at},
    }
    if line.usage is not None:
        doc["usage"] = line.usage
    if line.error_message is not None:
        doc["error"] = {"category": line.error_category, "message": line.error_message}
    if outcome is not None:
        result = outcome.result
        diagnostics = result.extra_fields or {}
        if doc["error"] is not None:
            doc["error"].update(
                stage=diagnostics.get("stage"), traceback=diagnostics.get("traceback")
            )
        sample = outcome.result_to_save.sample
        doc["sample"] = _sample(sample) if sample is not None else None
        doc["workflow"] = _brief(outcome.workflow)
        doc["grader"] = _brief(outcome.grader) if outcome.grader is not None else None
    if job.attempt_errors:
        doc["previous_attempts"] = job.attempt_errors
    if job.artifacts is not None:  # a backend that did not write them in place says what it did
        doc["artifacts"] = {
            "shipped": sorted(job.artifacts.files),
            "omitted": list(job.artifacts.omitted),
            "unavailable": job.artifacts.unavailable,
        }
    return encode(doc)


def _sample(sample: RolloutSample) -> dict[str, Any]:
    """The sample for result.json; the encoder turns any value JSON lacks into its str().

    ``trajectory_messages`` is left out when it equals ``messages`` (the usual case): the
    transcript is written once, and trajectory.json holds it in ATIF form anyway.
    """
    fields = dict(sample.__dict__)
    if fields["trajectory_messages"] == fields["messages"]:
        del fields["trajectory_messages"]
    return fields


_SUCCEEDED = {"status": str(RolloutStatus.SUCCESS), "err_category": None, "err_message": None}


def _brief(result: ExecutionResult) -> dict[str, Any]:
    ok = result.status is RolloutStatus.SUCCESS
    if ok and result.err_message is None and result.err_category is None:
        return _SUCCEEDED  # the usual brief; only ever encoded, never changed
    return {
        "status": str(result.status),
        "err_category": str(result.err_category) if result.err_category else None,
        "err_message": result.err_message,
    }


def round_ms(ms: float | None) -> float | None:
    """Milliseconds to three decimals."""
    return None if ms is None else round(ms, 3)


def result_line(
    job: Job,
    outcome: ExecutionOutcome,
    timings: dict[str, float | None],
    attempts: int,
    *,
    pass_threshold: float,
    messages: bool = True,
) -> ResultLine:
    """The results line of a rollout that ran (``messages=False``: without its transcript).

    A cancelled rollout (a served one the client cancelled) fails with the ``cancelled``
    category, whatever its result carried.
    """
    result = outcome.result
    sample = result.sample
    status = _status(outcome, result)
    reward = sample.reward if sample is not None and status == "success" else None
    row = job.row
    workflow_ms, grader_ms = timings["workflow_ms"], timings["grader_ms"]
    return construct(  # the fields of row_fields(job), inline: this runs once per rollout
        ResultLine,
        rollout_id=job.rollout_id,
        row_index=row.index,
        row_id=row.id,
        line=row.line,
        sample_index=job.sample_index,
        status=status,
        error_category=_category(result),
        error_message=result.err_message,
        reward=reward,
        passed=passed(status, reward, pass_threshold),
        attempts=attempts,
        workflow_ms=None if workflow_ms is None else round(workflow_ms, 3),  # round_ms, inline
        grader_ms=None if grader_ms is None else round(grader_ms, 3),
        metrics=dict(sample.metrics) if sample is not None else {},
        messages=sample.messages if messages and sample is not None else None,
        label=row.label,
        metadata=row.metadata,
        seed=job.seed,
        finished_at=round(time.time(), 3),
        row_hash=row.digest,
        usage=None,  # every field, in order: construct's fastest path (the gateway sets it)
    )


def _category(result: ExecutionResult) -> str | None:
    """A results line's ``error_category``: the result's, or ``cancelled``."""
    if result.status is RolloutStatus.CANCELLED:
        return CANCELLED
    return str(result.err_category) if result.err_category else None


def trajectory_document(
    line: ResultLine,
    outcome: ExecutionOutcome | None,
    *,
    extra: dict[str, Any] | None = None,
) -> bytes | None:
    """trajectory.json: the sample as an ATIF v1.7 trajectory (None without a transcript).

    ``extra`` adds keys to ``extra.osmosis`` (a served rollout's ``request_extra_fields``).
    """
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
        extra=extra,
    )
    return encode(doc) if doc is not None else None
