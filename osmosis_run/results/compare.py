"""Compare two runs rollout by rollout: paired deltas, a bootstrap interval, flips and errors.

Rollouts are paired by ``rollout_id`` (row and sample index). A pair counts when both sides are
scored by the outcome rule (``results.outcome``): a graded rollout scores its reward, a failed,
timed-out or invalid one scores 0 and does not pass; ungraded and removed rollouts have no score
and are left out (``unscored``).

The 95% interval of each delta (B - A) comes from a seeded paired bootstrap that resamples
*rows*, not rollouts: the samples of one row are drawn together, so a multi-sample run is not
treated as more independent evidence than it holds. A regression is flagged only when B is worse
than A by more than the allowed delta *and* the interval excludes zero.

    comparison = compare_runs(load_run(baseline), load_run(candidate))
    verdict = regression_verdict(comparison, 0.02)   # a gates.Verdict
"""

from __future__ import annotations

import operator
import random
import statistics
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from osmosis_run.results import outcome
from osmosis_run.results.gates import Verdict
from osmosis_run.results.records import ResultLine
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


def row_key(rollout_id: str) -> str:
    """The row part of a rollout id (``<row>.s<k>`` -> ``<row>``): the bootstrap's cluster."""
    return outcome.split_rollout_id(rollout_id)[0]


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
    a_by_id = {line.rollout_id: line for line in a.lines}
    b_by_id = {line.rollout_id: line for line in b.lines}
    common = [rollout_id for rollout_id in a_by_id if rollout_id in b_by_id]
    pairs: list[tuple[str, _Score, _Score]] = []
    for rollout_id in common:
        score_a = _score(a_by_id[rollout_id], threshold)
        score_b = _score(b_by_id[rollout_id], threshold)
        if score_a is not None and score_b is not None:
            pairs.append((rollout_id, score_a, score_b))
    mean, pass_rate = _deltas(pairs, resamples=resamples, seed=seed)
    return Comparison(
        run_a=a.run_dir,
        run_b=b.run_dir,
        metric=metric,
        pass_threshold=threshold,
        paired=len(pairs),
        paired_rows=len({row_key(rollout_id) for rollout_id, _, _ in pairs}),
        only_in_a=len(a_by_id) - len(common),
        only_in_b=len(b_by_id) - len(common),
        unscored=len(common) - len(pairs),
        mean=mean,
        pass_rate=pass_rate,
        resamples=resamples,
        seed=seed,
        pass_to_fail=[i for i, sa, sb in pairs if sa.passed and not sb.passed],
        fail_to_pass=[i for i, sa, sb in pairs if sb.passed and not sa.passed],
        new_errors=_error_changes(common, b_by_id, a_by_id),
        fixed_errors=_error_changes(common, a_by_id, b_by_id),
        notes=_notes(a, b, pass_threshold, pairs),
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


def _score(line: ResultLine, threshold: float) -> _Score | None:
    reward = outcome.score(line.status, line.reward)
    if reward is None:
        return None
    return _Score(reward=reward, passed=outcome.passed(line.status, line.reward, threshold) is True)


def _error_changes(
    common: Sequence[str], failing: dict[str, ResultLine], other: dict[str, ResultLine]
) -> list[ErrorChange]:
    changes = []
    for rollout_id in common:
        line = failing[rollout_id]
        if outcome.is_error(line.status) and not outcome.is_error(other[rollout_id].status):
            changes.append(
                ErrorChange(
                    rollout_id=rollout_id,
                    status=line.status,
                    error_category=line.error_category,
                    error_message=line.error_message,
                )
            )
    return changes


def _notes(
    a: RunData,
    b: RunData,
    pass_threshold: float | None,
    pairs: Sequence[tuple[str, _Score, _Score]],
) -> list[str]:
    notes = []
    if pass_threshold is None and a.summary.pass_threshold != b.summary.pass_threshold:
        notes.append(
            f"the runs use different pass thresholds (A {a.summary.pass_threshold:g}, "
            f"B {b.summary.pass_threshold:g}); both are judged at A's"
        )
    grader = _grader_note(a, b, pairs)
    if grader is not None:
        notes.append(grader)
    for name, run in (("A", a), ("B", b)):
        if run.stored_summary is None or run.stored_summary.interrupted:
            notes.append(
                f"run {name} did not finish ({plural(run.summary.rollouts, 'rollout')} so far)"
            )
    return notes


def _grader_note(a: RunData, b: RunData, pairs: Sequence[tuple[str, _Score, _Score]]) -> str | None:
    """Say when B re-grades A's samples (or A B's), or when the runs use different graders."""
    for name, run, other in (("B", b, a), ("A", a, b)):
        source = run.graded_from
        if source is not None and _same_dir(source, other.run_dir):
            up = sum(1 for _, sa, sb in pairs if sb.reward > sa.reward + _EPSILON)
            down = sum(1 for _, sa, sb in pairs if sb.reward < sa.reward - _EPSILON)
            return (
                f"{name} grades {'A' if name == 'B' else 'B'}'s samples again: grader "
                f"{other.grader or 'none'} -> {run.grader or 'none'}; B's reward is higher on "
                f"{plural(up, 'rollout')}, lower on {down}, the same on {len(pairs) - up - down}; "
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


def _deltas(
    pairs: Sequence[tuple[str, _Score, _Score]], *, resamples: int, seed: int
) -> tuple[Delta, Delta]:
    """Mean reward and pass rate of A and B, and B - A with a row-clustered bootstrap interval."""
    if not pairs:
        return _empty("mean"), _empty("pass_rate")
    # Per row: summed reward delta, summed pass delta, number of paired rollouts.
    rows: dict[str, list[float]] = {}
    for rollout_id, sa, sb in pairs:
        tally = rows.setdefault(row_key(rollout_id), [0.0, 0.0, 0.0])
        tally[0] += sb.reward - sa.reward
        tally[1] += int(sb.passed) - int(sa.passed)
        tally[2] += 1
    reward_ci, pass_ci = _bootstrap(list(rows.values()), resamples=resamples, seed=seed)
    n = len(pairs)
    mean_a = sum(sa.reward for _, sa, _ in pairs) / n
    mean_b = sum(sb.reward for _, _, sb in pairs) / n
    rate_a = sum(sa.passed for _, sa, _ in pairs) / n
    rate_b = sum(sb.passed for _, _, sb in pairs) / n
    return (
        Delta(metric="mean", a=mean_a, b=mean_b, delta=mean_b - mean_a, ci=reward_ci),
        Delta(metric="pass_rate", a=rate_a, b=rate_b, delta=rate_b - rate_a, ci=pass_ci),
    )


def _empty(metric: CompareMetric) -> Delta:
    return Delta(metric=metric, a=None, b=None, delta=None, ci=None)


def _bootstrap(rows: list[list[float]], *, resamples: int, seed: int) -> tuple[Interval, Interval]:
    """Percentile intervals of the two mean deltas, resampling whole rows with replacement."""
    rng = random.Random(seed)
    reward_sums = [row[0] for row in rows]
    pass_sums = [row[1] for row in rows]
    counts = [row[2] for row in rows]
    # With the same number of rollouts in every row (the usual case), the denominator is fixed.
    fixed_total = counts[0] * len(rows) if len(set(counts)) == 1 else None
    reward_stats: list[float] = []
    pass_stats: list[float] = []
    for _ in range(resamples):
        chosen = _draw(rng, len(rows))
        total = fixed_total or sum(map(counts.__getitem__, chosen))
        reward_stats.append(sum(map(reward_sums.__getitem__, chosen)) / total)
        pass_stats.append(sum(map(pass_sums.__getitem__, chosen)) / total)
    return _percentiles(reward_stats), _percentiles(pass_stats)


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
