"""Compare two runs rollout by rollout: paired deltas, a bootstrap interval, flips and errors.

Rollouts are paired by ``rollout_id`` (row and sample index). A pair counts when both sides are
scored by the outcome rule (``results.outcome``): a graded rollout scores its reward, a failed,
timed-out or invalid one scores 0 and does not pass; ungraded and removed rollouts have no score
and are left out (``unscored``).

The 95% interval of each delta (B - A) comes from a seeded paired bootstrap that resamples
*rows*, not rollouts: the samples of one row are drawn together, so a multi-sample run is not
treated as more independent evidence than it holds. A regression is flagged only when B is worse
than A by more than the allowed delta *and* the interval excludes zero.

Both runs are read as streams, in step (``pair_rollouts``): memory holds what one side has read
and the other not yet (little, when both ran in about the same order), the per-row tallies when
rows have several samples, and the distinct kinds of rows, not the rollouts. Rows that change
alike are alike to the bootstrap: a resample draws how many rows of each kind it takes (a
multinomial, from ``_binomial``) rather than each row, so a run of a million rows with a few
kinds of change resamples in milliseconds; with many kinds it draws the rows themselves.

    comparison = compare_runs(load_run(baseline), load_run(candidate))
    verdict = regression_verdict(comparison, 0.02)   # a gates.Verdict
"""

from __future__ import annotations

import math
import operator
import random
import statistics
import sys
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat, zip_longest
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel

from osmosis_run.results import outcome
from osmosis_run.results.gates import Verdict
from osmosis_run.results.rundata import RunData
from osmosis_run.results.words import plural

__all__ = [
    "CompareMetric",
    "Comparison",
    "Delta",
    "ErrorChange",
    "Interval",
    "compare_runs",
    "comparison_json",
    "pair_rollouts",
    "regression_verdict",
    "row_key",
]

CompareMetric = Literal["mean", "pass_rate"]

RESAMPLES = 2000
SEED = 0
CONFIDENCE = 0.95
# Floating-point slack when comparing a delta with the allowed regression.
_EPSILON = 1e-12


class Interval(BaseModel):
    """A two-sided confidence interval."""

    low: float
    high: float

    def excludes_zero(self) -> bool:
        """Whether zero lies outside the interval."""
        return self.low > 0 or self.high < 0


class Delta(BaseModel):
    """One metric over the paired rollouts: A, B, and B - A with its bootstrap interval."""

    metric: CompareMetric
    a: float | None
    b: float | None
    delta: float | None
    ci: Interval | None


class ErrorChange(BaseModel):
    """A rollout that fails in one run and not in the other (the failing side's error)."""

    rollout_id: str
    status: str
    error_category: str | None
    error_message: str | None


class Comparison(BaseModel):
    """Run B (the candidate) against run A (the baseline)."""

    run_a: Path
    run_b: Path
    metric: CompareMetric
    """The metric that ``regression_verdict`` judges."""
    pass_threshold: float
    paired: int
    """Rollouts in both runs and scored in both."""
    paired_rows: int
    only_in_a: int
    only_in_b: int
    unscored: int
    """Rollouts in both runs, ungraded or removed in at least one."""
    mean: Delta
    pass_rate: Delta
    resamples: int
    seed: int
    confidence: float = CONFIDENCE
    pass_to_fail: list[str]
    fail_to_pass: list[str]
    new_errors: list[ErrorChange]
    """Errors in B on rollouts that did not fail in A."""
    fixed_errors: list[ErrorChange]
    """Errors in A (as they were) on rollouts that did not fail in B."""
    notes: list[str]

    @property
    def primary(self) -> Delta:
        """The delta of ``metric``."""
        return self.pass_rate if self.metric == "pass_rate" else self.mean


@dataclass(frozen=True, slots=True)
class _Score:
    reward: float
    passed: bool


@dataclass(frozen=True, slots=True)
class _Side:
    """What a comparison needs of one rollout of one run (held while its pair is not read)."""

    rollout_id: str
    order: int  # its place in its run
    status: str
    reward: float | None
    error_category: str | None
    error_message: str | None


def row_key(rollout_id: str) -> str:
    """The row part of a rollout id (``<row>.s<k>`` -> ``<row>``): the bootstrap's cluster."""
    return outcome.split_rollout_id(rollout_id)[0]


T = TypeVar("T")


def pair_rollouts(
    a: Iterable[T], b: Iterable[T], key: Callable[[T], str]
) -> Iterator[tuple[T | None, T | None]]:
    """Pair two runs' rollouts by ``key`` (their id), reading both in step.

    Yields ``(a, b)`` for each id in both runs as soon as its second side is read, then
    ``(a, None)`` for each id only in A (in A's order) and ``(None, b)`` for each only in B.
    Each run holds an id once. Memory holds what one side has read and the other not yet.
    """
    waiting_a: dict[str, T] = {}
    waiting_b: dict[str, T] = {}
    for x, y in zip_longest(a, b):
        if x is not None:
            name = key(x)
            if name in waiting_b:
                yield x, waiting_b.pop(name)
            else:
                waiting_a[name] = x
        if y is not None:
            name = key(y)
            if name in waiting_a:
                yield waiting_a.pop(name), y
            else:
                waiting_b[name] = y
    for x in waiting_a.values():
        yield x, None
    for y in waiting_b.values():
        yield None, y


def compare_runs(
    a: RunData,
    b: RunData,
    *,
    metric: CompareMetric = "mean",
    resamples: int = RESAMPLES,
    seed: int = SEED,
    pass_threshold: float | None = None,
) -> Comparison:
    """Pair the rollouts of ``a`` and ``b`` and measure how B differs from A.

    Args:
        a: the baseline run.
        b: the candidate run.
        metric: what ``regression_verdict`` will judge: mean reward (failures 0) or pass rate.
        resamples: bootstrap resamples (at least 1).
        seed: the bootstrap's seed; the same inputs and seed give the same interval.
        pass_threshold: a rollout passes when its reward is at least this; default: A's.
    """
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    threshold = a.summary.pass_threshold if pass_threshold is None else pass_threshold
    try:
        tally = _tally(a, b, threshold, one_per_row=True)
    except _SharedRow:  # some rows have several samples: tally them row by row
        tally = _tally(a, b, threshold, one_per_row=False)
    mean, pass_rate = tally.deltas(resamples=resamples, seed=seed)
    return Comparison(
        run_a=a.run_dir,
        run_b=b.run_dir,
        metric=metric,
        pass_threshold=threshold,
        paired=tally.paired,
        paired_rows=tally.paired_rows,
        only_in_a=tally.only_in_a,
        only_in_b=tally.only_in_b,
        unscored=tally.common - tally.paired,
        mean=mean,
        pass_rate=pass_rate,
        resamples=resamples,
        seed=seed,
        pass_to_fail=_in_order(tally.pass_to_fail),
        fail_to_pass=_in_order(tally.fail_to_pass),
        new_errors=_in_order(tally.new_errors),
        fixed_errors=_in_order(tally.fixed_errors),
        notes=_notes(a, b, pass_threshold, tally),
    )


class _SharedRow(Exception):
    """A paired rollout id is not ``<row>.s0``: rows may hold several pairs."""


def _sides(run: RunData) -> Iterator[_Side]:
    for order, line in enumerate(run.lines):
        yield _Side(
            line.rollout_id,
            order,
            line.status,
            line.reward,
            line.error_category,
            line.error_message,
        )


def _tally(a: RunData, b: RunData, threshold: float, *, one_per_row: bool) -> _Tally:
    """One pass over both runs. ``one_per_row``: every paired id is ``<row>.s0`` (a run without
    ``-n``), so each pair is a row of its own; else ``_SharedRow`` is raised."""
    tally = _Tally(one_per_row=one_per_row)
    for side_a, side_b in pair_rollouts(_sides(a), _sides(b), lambda side: side.rollout_id):
        if side_b is None:
            tally.only_in_a += 1
        elif side_a is None:
            tally.only_in_b += 1
        else:
            tally.add(side_a, side_b, threshold)
    return tally


class _Tally:
    """What the pairs of two runs add up to."""

    def __init__(self, *, one_per_row: bool) -> None:
        self.one_per_row = one_per_row
        self.common = self.paired = self.only_in_a = self.only_in_b = 0
        self.sum_a = self.sum_b = 0.0
        self.passed_a = self.passed_b = 0
        self.higher = self.lower = 0  # pairs where B's reward is above / below A's
        self.pass_to_fail: list[tuple[int, str]] = []
        self.fail_to_pass: list[tuple[int, str]] = []
        self.new_errors: list[tuple[int, ErrorChange]] = []
        self.fixed_errors: list[tuple[int, ErrorChange]] = []
        # Per row: summed reward delta, summed pass delta, paired rollouts, and where its first
        # pair is in A (rows are drawn in A's order when drawn one by one).
        self.rows: dict[str, list[float]] = {}
        # A row of one pair each (``one_per_row``): its kind, and where it is in A.
        self.kinds: dict[Kind, int] = {}  # kind -> its number
        self.pair_kinds: array[int] = array("l")
        self.pair_order: array[int] = array("q")

    def add(self, a: _Side, b: _Side, threshold: float) -> None:
        self.common += 1
        a_failed, b_failed = outcome.is_error(a.status), outcome.is_error(b.status)
        if b_failed and not a_failed:
            self.new_errors.append((a.order, _change(b)))
        elif a_failed and not b_failed:
            self.fixed_errors.append((a.order, _change(a)))
        score_a, score_b = _score(a, threshold), _score(b, threshold)
        if score_a is None or score_b is None:
            return
        self.paired += 1
        self.sum_a += score_a.reward
        self.sum_b += score_b.reward
        self.passed_a += score_a.passed
        self.passed_b += score_b.passed
        if score_a.passed and not score_b.passed:
            self.pass_to_fail.append((a.order, a.rollout_id))
        elif score_b.passed and not score_a.passed:
            self.fail_to_pass.append((a.order, a.rollout_id))
        change = score_b.reward - score_a.reward
        self.higher += change > _EPSILON
        self.lower += change < -_EPSILON
        passes = int(score_b.passed) - int(score_a.passed)
        if self.one_per_row:
            row, sample = outcome.split_rollout_id(a.rollout_id)
            if sample != 0 or a.rollout_id != f"{row}.s0":
                raise _SharedRow
            self.pair_kinds.append(self.kinds.setdefault((change, passes, 1), len(self.kinds)))
            self.pair_order.append(a.order)
        else:
            tally = self.rows.setdefault(row_key(a.rollout_id), [0.0, 0.0, 0.0, a.order])
            tally[3] = min(tally[3], a.order)
            tally[0] += change
            tally[1] += passes
            tally[2] += 1

    def _rows(self) -> Rows:
        """The rows' kinds counted, and (when the bootstrap draws them one by one) in A's order."""
        if self.one_per_row:
            names = list(self.kinds)
            kinds = Counter({names[number]: count for number, count in _count(self.pair_kinds)})

            def in_order() -> list[Kind]:
                ordered = sorted(zip(self.pair_order, self.pair_kinds, strict=True))
                return [names[number] for _, number in ordered]

            return Rows(kinds, in_order)
        rows = self.rows.values()
        return Rows(
            Counter((r[0], r[1], r[2]) for r in rows),
            lambda: [(r[0], r[1], r[2]) for r in sorted(rows, key=lambda r: r[3])],
        )

    @property
    def paired_rows(self) -> int:
        return self.paired if self.one_per_row else len(self.rows)

    def deltas(self, *, resamples: int, seed: int) -> tuple[Delta, Delta]:
        """Mean reward and pass rate of A and B, and B - A with a row-clustered bootstrap
        interval."""
        if not self.paired:
            return _empty("mean"), _empty("pass_rate")
        reward_ci, pass_ci = _bootstrap(self._rows(), resamples=resamples, seed=seed)
        n = self.paired
        mean_a, mean_b = self.sum_a / n, self.sum_b / n
        rate_a, rate_b = self.passed_a / n, self.passed_b / n
        return (
            Delta(metric="mean", a=mean_a, b=mean_b, delta=mean_b - mean_a, ci=reward_ci),
            Delta(metric="pass_rate", a=rate_a, b=rate_b, delta=rate_b - rate_a, ci=pass_ci),
        )


def _in_order(items: list[tuple[int, T]]) -> list[T]:
    """The items in run A's order (pairs complete in the order their second side is read)."""
    return [item for _, item in sorted(items, key=lambda pair: pair[0])]


def _change(side: _Side) -> ErrorChange:
    return ErrorChange(
        rollout_id=side.rollout_id,
        status=side.status,
        error_category=side.error_category,
        error_message=side.error_message,
    )


def regression_verdict(cmp: Comparison, delta: float) -> Verdict:
    """Judge whether B regressed from A by more than ``delta``.

    The verdict fails when B is worse than A by more than ``delta`` on the comparison's metric
    and the confidence interval of the difference excludes zero, and when no rollout is scored
    in both runs (there is nothing to compare).
    """
    name = f"{cmp.metric} regression <= {delta:g}"
    primary = cmp.primary
    if primary.delta is None or primary.ci is None:
        return Verdict(
            name=name, held=False, message=f"{name}: failed (no rollout is scored in both runs)"
        )
    regressed = primary.delta < -delta - _EPSILON and primary.ci.excludes_zero()
    detail = "failed" if regressed else "held"
    message = (
        f"{name}: {detail} (B - A = {primary.delta:+.4f}, "
        f"{cmp.confidence:.0%} CI [{primary.ci.low:+.4f}, {primary.ci.high:+.4f}], "
        f"{plural(cmp.paired, 'paired rollout')} over {plural(cmp.paired_rows, 'row')})"
    )
    return Verdict(name=name, held=not regressed, message=message)


def comparison_json(cmp: Comparison, verdict: Verdict | None = None) -> str:
    """The comparison (and the regression verdict, or null) as one JSON document."""
    return _Document(**cmp.model_dump(), verdict=verdict).model_dump_json(indent=2)


class _Document(Comparison):
    verdict: Verdict | None


def _score(side: _Side, threshold: float) -> _Score | None:
    reward = outcome.score(side.status, side.reward)
    if reward is None:
        return None
    return _Score(reward=reward, passed=outcome.passed(side.status, side.reward, threshold) is True)


def _notes(a: RunData, b: RunData, pass_threshold: float | None, tally: _Tally) -> list[str]:
    notes = []
    if pass_threshold is None and a.summary.pass_threshold != b.summary.pass_threshold:
        notes.append(
            f"the runs use different pass thresholds (A {a.summary.pass_threshold:g}, "
            f"B {b.summary.pass_threshold:g}); both are judged at A's"
        )
    grader = _grader_note(a, b, tally)
    if grader is not None:
        notes.append(grader)
    for name, run in (("A", a), ("B", b)):
        if run.stored_summary is None or run.stored_summary.interrupted:
            notes.append(
                f"run {name} did not finish ({plural(run.summary.rollouts, 'rollout')} so far)"
            )
    return notes


def _grader_note(a: RunData, b: RunData, tally: _Tally) -> str | None:
    """Say when B re-grades A's samples (or A B's), or when the runs use different graders."""
    for name, run, other in (("B", b, a), ("A", a, b)):
        source = run.graded_from
        if source is not None and _same_dir(source, other.run_dir):
            up, down = tally.higher, tally.lower
            return (
                f"{name} grades {'A' if name == 'B' else 'B'}'s samples again: grader "
                f"{other.grader or 'none'} -> {run.grader or 'none'}; B's reward is higher on "
                f"{plural(up, 'rollout')}, lower on {down}, the same on "
                f"{tally.paired - up - down}; "
                "every difference is the grader's (the workflow did not run again)"
            )
    if a.grader != b.grader:
        return f"the runs use different graders (A {a.grader or 'none'}, B {b.grader or 'none'})"
    return None


def _same_dir(one: Path, other: Path) -> bool:
    try:
        return one.resolve() == other.resolve()
    except OSError:
        return False


def _empty(metric: CompareMetric) -> Delta:
    return Delta(metric=metric, a=None, b=None, delta=None, ci=None)


# A binomial draw costs about what drawing this many rows does: below one kind of row per this
# many rows, a resample draws how many rows of each kind it takes.
_ROWS_PER_BINOMIAL = 50


Kind = tuple[float, float, float]  # a row: summed reward delta, summed pass delta, rollouts


@dataclass(frozen=True, slots=True)
class Rows:
    """The paired rows: how many of each kind, and (made when asked) each in A's order."""

    kinds: Counter[Kind]
    in_order: Callable[[], list[Kind]]


def _count(numbers: array[int]) -> Iterator[tuple[int, int]]:
    return iter(Counter(numbers).items())


def _bootstrap(rows: Rows, *, resamples: int, seed: int) -> tuple[Interval, Interval]:
    """Percentile intervals of the two mean deltas, resampling whole rows with replacement.

    Each resample draws as many rows as there are, each row equally likely. When the kinds of
    rows are few, it draws how many of each kind it takes (multinomial); else each row, in A's
    order (so a small run's interval is what it always was for the same seed).
    """
    rng = random.Random(seed)
    ordered = sorted(rows.kinds.items())
    count = sum(rows.kinds.values())
    sizes = {kind[2] for kind, _ in ordered}
    # With the same number of rollouts in every row (the usual case), the denominator is fixed.
    fixed_total = sizes.pop() * count if len(sizes) == 1 else None
    if len(ordered) * _ROWS_PER_BINOMIAL <= count:
        resample = _by_kind(ordered, count)
    else:
        resample = _by_row(rows.in_order())
    reward_stats: list[float] = []
    pass_stats: list[float] = []
    for _ in range(resamples):
        reward, passes, total = resample(rng)
        total = fixed_total or total
        reward_stats.append(reward / total)
        pass_stats.append(passes / total)
    return _percentiles(reward_stats), _percentiles(pass_stats)


Resample = Callable[[random.Random], tuple[float, float, float]]


def _by_row(rows: list[Kind]) -> Resample:
    """Draw each row of a resample: the summed reward and pass deltas and rollouts it takes."""
    reward_sums = [row[0] for row in rows]
    pass_sums = [row[1] for row in rows]
    sizes = [row[2] for row in rows]

    def resample(rng: random.Random) -> tuple[float, float, float]:
        chosen = _draw(rng, len(rows))
        return (
            sum(map(reward_sums.__getitem__, chosen)),
            sum(map(pass_sums.__getitem__, chosen)),
            sum(map(sizes.__getitem__, chosen)),
        )

    return resample


def _by_kind(kinds: list[tuple[Kind, int]], rows: int) -> Resample:
    """Draw how many rows of each kind a resample takes (multinomial), not each row."""
    weights = [count for _, count in kinds]

    def resample(rng: random.Random) -> tuple[float, float, float]:
        reward = passes = total = 0.0
        for (kind, _), taken in zip(kinds, _multinomial(rng, rows, weights), strict=True):
            reward += taken * kind[0]
            passes += taken * kind[1]
            total += taken * kind[2]
        return reward, passes, total

    return resample


def _multinomial(rng: random.Random, n: int, weights: list[int]) -> list[int]:
    """How many of ``n`` draws land on each item, item ``i`` drawn with weight ``weights[i]``."""
    left, weight_left = n, sum(weights)
    taken = []
    for weight in weights:
        count = (
            _binomial(rng, left, weight / weight_left) if left and weight < weight_left else left
        )
        taken.append(count)
        left -= count
        weight_left -= weight
    return taken


def _binomial(rng: random.Random, n: int, p: float) -> int:
    """A binomial variate: ``random.Random.binomialvariate`` of Python 3.12, for 3.11 too.

    The same algorithms (Devroye's geometric method below a mean of 10, Hörmann's BTRS above),
    so every Python draws the same numbers from the same seed.
    """
    if p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    random_ = rng.random
    if n == 1:
        return int(random_() < p)
    if p > 0.5:
        return n - _binomial(rng, n, 1.0 - p)
    if n * p < 10.0:
        return _geometric(random_, n, p)
    return _btrs(random_, n, p)


def _geometric(random_: Callable[[], float], n: int, p: float) -> int:
    """Devroye's geometric method, O(n p): for a small mean."""
    x = y = 0
    c = math.log2(1.0 - p)
    if not c:
        return x
    while True:
        y += math.floor(math.log2(random_()) / c) + 1
        if y > n:
            return x
        x += 1


def _btrs(random_: Callable[[], float], n: int, p: float) -> int:
    """Hörmann's transformed rejection with squeeze, for n p >= 10 and p <= 0.5."""
    spq = math.sqrt(n * p * (1.0 - p))
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * p
    c = n * p + 0.5
    vr = 0.92 - 4.2 / b
    alpha = (2.83 + 5.1 / b) * spq
    lpq = math.log(p / (1.0 - p))
    m = math.floor((n + 1) * p)
    h = math.lgamma(m + 1) + math.lgamma(n - m + 1)
    while True:
        u = random_() - 0.5
        us = 0.5 - abs(u)
        k = math.floor((2.0 * a / us + b) * u + c)
        if k < 0 or k > n:
            continue
        v = random_()
        if us >= 0.07 and v <= vr:
            return k
        v *= alpha / (a / (us * us) + b)
        if math.log(v) <= h - math.lgamma(k + 1) - math.lgamma(n - k + 1) + (k - m) * lpq:
            return k


def _draw(rng: random.Random, n: int) -> list[int]:
    """``n`` positions in ``range(n)``, drawn with replacement.

    About twice as fast as ``rng.choices``: the draws come from random 64-bit words (the bias of
    ``% n`` is below n / 2**64), read little-endian so every platform draws the same positions.
    """
    words = array("Q", rng.randbytes(8 * n))
    if sys.byteorder == "big":
        words.byteswap()
    return list(map(operator.mod, words, repeat(n)))


def _percentiles(stats: list[float]) -> Interval:
    if len(stats) < 2:
        return Interval(low=stats[0], high=stats[0])
    # 40 quantiles: the first cut is the 2.5th percentile, the last the 97.5th.
    cuts = statistics.quantiles(stats, n=40, method="inclusive")
    return Interval(low=cuts[0], high=cuts[-1])
