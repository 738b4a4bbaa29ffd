"""The one outcome rule: what a rollout's status means for scores, passes, errors and completeness.

Every writer and reader of results (the engine, metrics, compare, the reports, the CLI) asks
these functions, so no two outputs can disagree on them:

- ``failure``, ``timeout`` and ``invalid`` are errors: they count against the error budget.
- A rollout's score is its reward when it succeeded, 0.0 when it is an error, and None (no
  score, left out of every mean) when it is ``ungraded`` or ``removed``.
- It passes when it succeeded with a reward of at least the threshold; an error never passes;
  an ungraded or removed rollout neither passes nor fails (None).
- A rollout id is ``<row part>.s<sample index>`` (``run.dataset.rollout_id``); the row part
  clusters the samples of one row.
- A run is complete when it was not interrupted (or stopped) and every planned rollout has a
  result; a run with no known plan (a stream) is complete when it was not interrupted.
"""

from __future__ import annotations

__all__ = [
    "ERROR_STATUSES",
    "is_complete",
    "is_error",
    "passed",
    "score",
    "split_rollout_id",
]

ERROR_STATUSES: frozenset[str] = frozenset({"failure", "timeout", "invalid"})
"""The statuses of a rollout that failed: they score 0 and count against ``--max-error-rate``."""

_SAMPLE_MARK = ".s"


def is_error(status: str) -> bool:
    """Whether a rollout with this status failed (failure, timeout, invalid)."""
    return status in ERROR_STATUSES


def score(status: str, reward: float | None) -> float | None:
    """The rollout's score: its reward on success, 0.0 for an error, None when it has none.

    An ungraded or removed rollout (or a success without a reward) has no score and is left
    out of the means; a failed one is in them, scoring 0.
    """
    if status in ERROR_STATUSES:
        return 0.0
    if status == "success":
        return reward
    return None


def passed(status: str, reward: float | None, threshold: float) -> bool | None:
    """Whether the rollout passed: a success with ``reward >= threshold``.

    An error does not pass (False); an ungraded or removed rollout has no verdict (None).
    """
    if status in ERROR_STATUSES:
        return False
    if status == "success":
        return reward is not None and reward >= threshold
    return None


def split_rollout_id(rollout_id: str) -> tuple[str, int | None]:
    """Split ``<row part>.s<k>`` into the row part and the sample index ``k``.

    An id not of that form (not written by osmosis-run) is a row of its own: ``(id, None)``.
    """
    row, mark, sample = rollout_id.rpartition(_SAMPLE_MARK)
    if mark and sample.isdigit() and sample.isascii():
        return row, int(sample)
    return rollout_id, None


def is_complete(rollouts: int, planned: int | None, interrupted: bool) -> bool:
    """Whether a run is complete: not interrupted and every planned rollout has a result.

    Args:
        rollouts: rollouts with a result (one per rollout id).
        planned: the rollouts the run planned; None when unknown (a streamed dataset).
        interrupted: whether the run was stopped (a signal, the error budget, an infrastructure
            error) before it ran out of work.
    """
    return not interrupted and (planned is None or rollouts >= planned)
