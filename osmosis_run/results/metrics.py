"""Summary statistics of a run, accumulated one result at a time in memory independent of size.

Means, standard deviations, minima and maxima are exact. Medians and percentiles come from a
histogram of values rounded to a few significant digits (rewards: 6, latencies: 4), so memory
grows with the number of distinct values, not with the number of rollouts. pass@k needs each
row's pass count and is kept only when a run draws two or more samples per row.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from osmosis_run.results import outcome
from osmosis_run.results.records import (
    USAGE_COUNTERS,
    Distribution,
    ErrorExample,
    GroupSummary,
    KPoint,
    ModelSummary,
    ModelUsage,
    ResultLine,
    Summary,
)

__all__ = ["MetricsAccumulator", "pass_at_k", "pass_hat_k", "summarize"]

FIRST_ERRORS = 5
_KEY_CACHE = 4096


class _Sketch:
    """Exact count, mean, std, min, max; quantiles from a rounded-value histogram."""

    __slots__ = ("_format", "_keys", "count", "high", "histogram", "low", "total", "total_sq")

    def __init__(self, digits: int) -> None:
        self._format = f".{digits}g"
        self._keys: dict[float, float] = {}  # value -> its rounded key; values repeat a lot
        self.count = 0
        self.total = 0.0
        self.total_sq = 0.0
        self.low = math.inf
        self.high = -math.inf
        self.histogram: dict[float, int] = {}  # a dict, not a Counter: subscripting is faster

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.total_sq += value * value
        if value < self.low:
            self.low = value
        if value > self.high:
            self.high = value
        key = self._keys.get(value)
        if key is None:
            key = float(format(value, self._format))
            if len(self._keys) < _KEY_CACHE:
                self._keys[value] = key
        histogram = self.histogram
        histogram[key] = histogram.get(key, 0) + 1

    def distribution(self) -> Distribution:
        if not self.count:
            return Distribution()
        mean = self.total / self.count
        variance = max(self.total_sq / self.count - mean * mean, 0.0)
        values = sorted(self.histogram.items())
        return Distribution(
            count=self.count,
            mean=mean,
            std=math.sqrt(variance),
            min=self.low,
            max=self.high,
            median=(_at_rank(values, (self.count - 1) // 2) + _at_rank(values, self.count // 2))
            / 2,
            p50=_percentile(values, self.count, 0.50),
            p90=_percentile(values, self.count, 0.90),
            p99=_percentile(values, self.count, 0.99),
        )


def _at_rank(values: list[tuple[float, int]], rank: int) -> float:
    seen = 0
    for value, count in values:
        seen += count
        if rank < seen:
            return value
    return values[-1][0]


def _percentile(values: list[tuple[float, int]], count: int, q: float) -> float:
    """Nearest-rank percentile."""
    return _at_rank(values, max(math.ceil(q * count) - 1, 0))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased probability that at least one of k samples out of n (c passing) passes."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased probability that all of k samples out of n (c passing) pass."""
    return math.comb(c, k) / math.comb(n, k)


class _Group:
    __slots__ = ("errors", "passed", "reward_sum", "rollouts", "scored")

    def __init__(self) -> None:
        self.rollouts = self.errors = self.passed = self.scored = 0
        self.reward_sum = 0.0

    def summary(self) -> GroupSummary:
        return GroupSummary(
            rollouts=self.rollouts,
            errors=self.errors,
            mean_reward=self.reward_sum / self.scored if self.scored else None,
            pass_rate=self.passed / self.scored if self.scored else None,
        )


class _UsageTotals:
    """The model usage of the rollouts that went through the gateway, summed."""

    def __init__(self) -> None:
        self.rollouts = 0
        self.sums: Counter[str] = Counter()
        self.cost: float | None = None
        self.tokens = _Sketch(6)
        self.requests = _Sketch(6)
        self.waits = _Sketch(4)

    def add(self, usage: ModelUsage | dict[str, Any]) -> None:
        if isinstance(usage, dict):  # a line read back without validation
            usage = ModelUsage.model_validate(usage)
        self.rollouts += 1
        sums = self.sums
        for key in USAGE_COUNTERS:
            sums[key] += getattr(usage, key)
        if usage.cost is not None:
            self.cost = (self.cost or 0.0) + usage.cost
        self.tokens.add(usage.total_tokens)
        self.requests.add(usage.requests)
        self.waits.add(usage.model_wait_ms)

    def summary(self) -> ModelSummary | None:
        if not self.rollouts:
            return None
        sums = {key: self.sums[key] for key in USAGE_COUNTERS}
        sums["model_wait_ms"] = round(sums["model_wait_ms"], 3)
        return ModelSummary(
            **sums,
            cost=self.cost,
            rollouts=self.rollouts,
            tokens_per_rollout=self.tokens.distribution(),
            requests_per_rollout=self.requests.distribution(),
            wait_ms_per_rollout=self.waits.distribution(),
        )


class MetricsAccumulator:
    """Fold ``ResultLine`` objects into a ``Summary``.

    Denominators: "graded" counts rollouts with a reward; "all" (and the pass rate) counts every
    attempted rollout, a failed, timed-out or invalid one scoring 0; ungraded and removed
    rollouts have no reward by design and are in neither (``outcome.score``).
    """

    def __init__(
        self, *, pass_threshold: float = 1.0, samples: int = 1, group_by: str | None = None
    ) -> None:
        self.pass_threshold = pass_threshold
        self.samples = samples
        self.group_by = group_by
        self.counts: Counter[str] = Counter()
        self.categories: Counter[str] = Counter()
        self.reward_graded = _Sketch(6)
        self.reward_all = _Sketch(6)
        self.workflow_ms = _Sketch(4)
        self.grader_ms = _Sketch(4)
        self.passed = 0
        self.per_row: dict[str, list[int]] = {}
        self.groups: dict[str, _Group] = {}
        self.first_errors: list[ErrorExample] = []
        self.usage = _UsageTotals()

    def add(self, line: ResultLine) -> None:
        """Count one finished rollout."""
        status, reward, elapsed = line.status, line.reward, line.workflow_ms
        self.counts[status] += 1
        if line.usage is not None:
            self.usage.add(line.usage)
        is_error = outcome.is_error(status)
        if is_error:
            self._add_error(line)
        if elapsed is not None:
            self.workflow_ms.add(elapsed)
        elapsed = line.grader_ms
        if elapsed is not None:
            self.grader_ms.add(elapsed)
        score = outcome.score(status, reward)
        if score is None:
            return
        passed = outcome.passed(status, reward, self.pass_threshold) is True
        if not is_error:
            self.reward_graded.add(score)
        self.reward_all.add(score)
        self.passed += passed
        if self.samples >= 2:
            row, _ = outcome.split_rollout_id(line.rollout_id)
            tally = self.per_row.setdefault(row, [0, 0])
            tally[0] += 1
            tally[1] += passed
        if self.group_by is not None:
            self._add_to_group(line, score, passed, is_error)

    def _add_error(self, line: ResultLine) -> None:
        if line.error_category:
            self.categories[line.error_category] += 1
        if len(self.first_errors) < FIRST_ERRORS:
            self.first_errors.append(
                ErrorExample(
                    rollout_id=line.rollout_id,
                    status=line.status,
                    error_category=line.error_category,
                    error_message=line.error_message,
                )
            )

    def _add_to_group(self, line: ResultLine, reward: float, passed: bool, is_error: bool) -> None:
        key = _group_key(line, self.group_by or "")
        group = self.groups.setdefault(key, _Group())
        group.rollouts += 1
        group.errors += is_error
        group.scored += 1
        group.passed += passed
        group.reward_sum += reward

    def summary(
        self, *, planned: int | None = None, wall_s: float | None = None, interrupted: bool = False
    ) -> Summary:
        """The summary of everything added so far.

        Args:
            planned: the rollouts the run planned (None: unknown, a streamed dataset).
            wall_s: the run's wall time so far.
            interrupted: whether the run was stopped before it ran out of work; with
                ``planned`` it decides ``complete`` (``outcome.is_complete``).
        """
        rollouts = sum(self.counts.values())
        errors = sum(self.counts[s] for s in outcome.ERROR_STATUSES)
        scored = self.reward_all.count
        at_k, hat_k = self._k_curves()
        return Summary(
            rollouts=rollouts,
            planned=planned,
            complete=outcome.is_complete(rollouts, planned, interrupted),
            interrupted=interrupted,
            counts={status: self.counts[status] for status in sorted(self.counts)},
            error_categories=dict(sorted(self.categories.items())),
            errors=errors,
            error_rate=errors / rollouts if rollouts else 0.0,
            reward_graded=self.reward_graded.distribution(),
            reward_all=self.reward_all.distribution(),
            pass_threshold=self.pass_threshold,
            passed=self.passed,
            pass_rate=self.passed / scored if scored else None,
            samples_per_row=self.samples,
            pass_at_k=at_k,
            pass_hat_k=hat_k,
            workflow_ms=self.workflow_ms.distribution(),
            grader_ms=self.grader_ms.distribution(),
            wall_s=wall_s,
            throughput_per_s=rollouts / wall_s if wall_s else None,
            group_by=self.group_by,
            groups={key: group.summary() for key, group in sorted(self.groups.items())},
            first_errors=list(self.first_errors),
            model=self.usage.summary(),
        )

    def _k_curves(self) -> tuple[list[KPoint], list[KPoint]]:
        at_k: list[KPoint] = []
        hat_k: list[KPoint] = []
        k = 1
        while self.samples >= 2 and k <= self.samples:
            tallies = [(n, c) for n, c in self.per_row.values() if n >= k]
            if tallies:
                at_k.append(KPoint(k=k, value=_mean(pass_at_k(n, c, k) for n, c in tallies)))
                hat_k.append(KPoint(k=k, value=_mean(pass_hat_k(n, c, k) for n, c in tallies)))
            k *= 2
        return at_k, hat_k


def _group_key(line: ResultLine, group_by: str) -> str:
    field = group_by.removeprefix("metadata.")
    value = (line.metadata or {}).get(field)
    return "(none)" if value is None else str(value)


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items)


def summarize(
    lines: Iterable[ResultLine],
    *,
    pass_threshold: float = 1.0,
    samples: int = 1,
    group_by: str | None = None,
) -> Summary:
    """Summarise finished rollouts in one call."""
    accumulator = MetricsAccumulator(
        pass_threshold=pass_threshold, samples=samples, group_by=group_by
    )
    for line in lines:
        accumulator.add(line)
    return accumulator.summary()
