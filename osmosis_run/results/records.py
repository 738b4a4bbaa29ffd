"""The records a run leaves behind: one ``ResultLine`` per rollout, and the ``Summary``.

``results.jsonl`` holds one ``ResultLine`` per finished rollout; its keys are a public contract
(documented in the README): keys may be added, never renamed. ``summary.json`` holds a
``Summary``. Readers (report, compare, HTML) go through these models.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from osmosis_run.results.outcome import ERROR_STATUSES

__all__ = [
    "ERROR_STATUSES",
    "STATUSES",
    "Distribution",
    "ErrorExample",
    "GroupSummary",
    "KPoint",
    "ResultLine",
    "RolloutState",
    "Summary",
    "count_rows",
]

RolloutState = Literal["success", "ungraded", "failure", "timeout", "invalid", "removed"]
STATUSES: tuple[RolloutState, ...] = (
    "success",
    "ungraded",
    "removed",
    "failure",
    "timeout",
    "invalid",
)
# ERROR_STATUSES (the statuses that count against --max-error-rate) is the outcome rule's,
# re-exported here beside the statuses themselves.


class ResultLine(BaseModel):
    """One line of ``results.jsonl``: everything analysis needs about one rollout."""

    model_config = ConfigDict(extra="allow")

    rollout_id: str
    row_index: int
    row_id: str | int | None = None
    line: int
    sample_index: int
    status: RolloutState
    error_category: str | None = None
    error_message: str | None = None
    reward: float | None = None
    passed: bool | None = None
    attempts: int = 1
    workflow_ms: float | None = None
    grader_ms: float | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None
    label: str | None = None
    metadata: dict[str, Any] | None = None
    seed: int | None = None
    finished_at: float | None = None
    row_hash: str | None = None
    """A hash of the row's line as read: a resume refuses a row that changed since."""


class Distribution(BaseModel):
    """Summary statistics of a list of numbers (all None when the list is empty)."""

    count: int = 0
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    median: float | None = None
    max: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class KPoint(BaseModel):
    """One point of a pass@k or pass^k curve."""

    k: int
    value: float


class ErrorExample(BaseModel):
    """One failed rollout, as shown in the summary's first few errors."""

    rollout_id: str
    status: str
    error_category: str | None = None
    error_message: str | None = None


class GroupSummary(BaseModel):
    """The headline numbers of one group of rollouts (``--group-by``)."""

    rollouts: int
    errors: int
    mean_reward: float | None
    pass_rate: float | None


class Summary(BaseModel):
    """The metrics of a run, as written to ``summary.json``."""

    rollouts: int = 0
    planned: int | None = None
    complete: bool = False
    interrupted: bool = False
    counts: dict[str, int] = Field(default_factory=dict)
    error_categories: dict[str, int] = Field(default_factory=dict)
    errors: int = 0
    error_rate: float = 0.0
    reward_graded: Distribution = Field(default_factory=Distribution)
    reward_all: Distribution = Field(default_factory=Distribution)
    pass_threshold: float = 1.0
    passed: int = 0
    pass_rate: float | None = None
    samples_per_row: int = 1
    pass_at_k: list[KPoint] = Field(default_factory=list)
    pass_hat_k: list[KPoint] = Field(default_factory=list)
    workflow_ms: Distribution = Field(default_factory=Distribution)
    grader_ms: Distribution = Field(default_factory=Distribution)
    wall_s: float | None = None
    throughput_per_s: float | None = None
    group_by: str | None = None
    groups: dict[str, GroupSummary] = Field(default_factory=dict)
    first_errors: list[ErrorExample] = Field(default_factory=list)


def count_rows(s: Summary) -> list[tuple[str, str]]:
    """The first labelled lines of every rendering of a summary: rollouts by status, errors."""
    planned = f" of {s.planned}" if s.planned is not None else ""
    counts = ", ".join(f"{n} {status}" for status, n in s.counts.items() if n) or "none"
    rows = [("rollouts", f"{s.rollouts}{planned}: {counts}")]
    if s.error_categories:
        rows.append(("errors", ", ".join(f"{n} {c}" for c, n in s.error_categories.items())))
    return rows
