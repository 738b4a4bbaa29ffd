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
    "USAGE_COUNTERS",
    "BudgetStop",
    "Distribution",
    "ErrorExample",
    "GroupSummary",
    "KPoint",
    "ModelSummary",
    "ModelUsage",
    "ResultLine",
    "RolloutState",
    "Summary",
    "count_rows",
    "model_rows",
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


class ModelUsage(BaseModel):
    """What model calls through the gateway used: the one definition of the usage counters.

    A results line's ``usage`` is one rollout's; ``ModelSummary`` holds a run's sums; the
    gateway counts each rollout's calls into one (``osmosis_run.gateway.accounting``).

    ``requests`` counts the calls the workflow made (a call retried after a 429 is one call);
    ``retries`` the extra upstream attempts; ``rate_limited`` the 429s among them;
    ``model_wait_ms`` the time the workflow spent waiting on the gateway (pacing included);
    ``cost`` is set with ``--token-price``.
    """

    # model_wait_ms: pydantic < 2.10 reserves the "model_" prefix and warns without this.
    model_config = ConfigDict(protected_namespaces=())

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    retries: int = 0
    rate_limited: int = 0
    errors: int = 0
    model_wait_ms: float = 0.0
    cost: float | None = None


# The counters of ModelUsage: what a sum of usages adds up (the cost too, but only when known).
USAGE_COUNTERS = tuple(key for key in ModelUsage.model_fields if key != "cost")


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
    usage: ModelUsage | None = None
    """The rollout's model calls through the gateway (None without the gateway)."""


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


class ModelSummary(ModelUsage):
    """The model calls of a run: the usage of its rollouts summed, ``rollouts`` of them, and
    per-rollout distributions.

    ``gateway`` holds what this invocation's gateway saw (cache hits, the in-flight limit's
    lowest and final values); it is not summed over resumed invocations.
    """

    rollouts: int = 0
    tokens_per_rollout: Distribution = Field(default_factory=Distribution)
    requests_per_rollout: Distribution = Field(default_factory=Distribution)
    wait_ms_per_rollout: Distribution = Field(default_factory=Distribution)
    gateway: dict[str, Any] | None = None


class BudgetStop(BaseModel):
    """The run budget that stopped an invocation (``run/budgets.py``): summary.json's ``budget``.

    ``limit`` and ``spent`` are in the budget's unit: seconds, USD or tokens. ``reached`` says it
    (``time limit 45m reached``); ``message`` is the whole line the run ended with.
    """

    budget: Literal["time_limit", "max_cost", "max_tokens"]
    limit: float
    spent: float
    reached: str
    message: str | None = None


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
    model: ModelSummary | None = None
    # Where a backend ran the rollouts and what it lost (Ray: actors by node, losses).
    backend: dict[str, Any] | None = None
    # The budget that stopped this invocation (--time-limit, --max-cost, --max-tokens), if one did.
    budget: BudgetStop | None = None


def count_rows(s: Summary) -> list[tuple[str, str]]:
    """The first labelled lines of every rendering of a summary: rollouts by status, errors."""
    planned = f" of {s.planned}" if s.planned is not None else ""
    counts = ", ".join(f"{n} {status}" for status, n in s.counts.items() if n) or "none"
    rows = [("rollouts", f"{s.rollouts}{planned}: {counts}")]
    if s.error_categories:
        rows.append(("errors", ", ".join(f"{n} {c}" for c, n in s.error_categories.items())))
    return rows


def model_rows(m: ModelSummary) -> list[tuple[str, str]]:
    """The labelled lines of a run's model usage, for every rendering of a summary."""
    t, w = m.tokens_per_rollout, m.wait_ms_per_rollout
    cost = f"  cost ${m.cost:.4f}" if m.cost is not None else ""
    rows = [
        (
            "model calls",
            f"{m.requests} ({m.retries} retries, {m.rate_limited} rate-limited, "
            f"{m.errors} failed){cost}",
        ),
        (
            "tokens",
            f"{m.total_tokens} ({m.prompt_tokens} prompt + {m.completion_tokens} completion)  "
            f"per rollout mean {_number(t.mean)} p50 {_number(t.p50)} p99 {_number(t.p99)}",
        ),
        (
            "model wait ms",
            f"per rollout mean {_number(w.mean)} p50 {_number(w.p50)} p99 {_number(w.p99)}",
        ),
    ]
    gateway = m.gateway or {}
    if gateway.get("cache_hits"):
        rows.append(
            ("model cache", f"{gateway['cache_hits']} of {gateway['calls']} calls replayed")
        )
    return rows


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
