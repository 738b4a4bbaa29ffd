"""The library half of ``osmosis-run report``: failures grouped, the slowest rollouts, one document.

``open_run`` reads a run directory for every report: a finished run, an interrupted one and one
that is still running (the summary is ``load_run``'s: recomputed from results.jsonl and
completed from summary.json; a finished run's summary.json, when results.jsonl has not changed
since and its counts agree, stands for it as it does for a resume). Its results stay in the file
(``results_file``): each report reads them again, in one pass, so a run of a million rollouts
costs a report seconds and a few MB, never its transcripts in memory. ``read_report`` gives the
run and its report in one single pass.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from osmosis_run.errors import ConfigError, RunDirError
from osmosis_run.reports.results_file import scan_results
from osmosis_run.results import outcome
from osmosis_run.results.metrics import MetricsAccumulator
from osmosis_run.results.records import ResultLine, Summary
from osmosis_run.results.rundata import RunData
from osmosis_run.store.layout import RESULTS, RUN_CONFIG, SUMMARY
from osmosis_run.store.rundata import read_fingerprint, read_run_config, with_stored_summary
from osmosis_run.store.store import read_summary

__all__ = [
    "FailureCategory",
    "FailureGroup",
    "Fold",
    "LowReward",
    "RunReport",
    "RunState",
    "SlowRollout",
    "build_report",
    "check_group_by",
    "failure_categories",
    "final_answer",
    "lowest_rewards",
    "open_run",
    "read_report",
    "run_state",
    "slowest_rollouts",
]

RunState = Literal["finished", "interrupted", "incomplete"]

SLOWEST = 10
LOWEST = 10
ANSWER_CHARS = 80
MAX_GROUPS = 10
MAX_IDS = 10


class FailureGroup(BaseModel):
    """Rollouts of one category that failed with the same message."""

    message: str
    count: int
    rollout_ids: list[str]
    """The first ``MAX_IDS`` of them, in results order."""


class FailureCategory(BaseModel):
    """The failed, timed-out and invalid rollouts of one error category."""

    category: str
    count: int
    groups: list[FailureGroup]
    """The most frequent messages first; at most ``MAX_GROUPS``."""
    more_messages: int = 0
    """Distinct messages left out of ``groups``."""


class SlowRollout(BaseModel):
    """One rollout and the time it took (workflow + grader)."""

    rollout_id: str
    status: str
    total_ms: float
    workflow_ms: float | None
    grader_ms: float | None
    reward: float | None


class LowReward(BaseModel):
    """One graded rollout among the lowest rewards, with what it answered."""

    rollout_id: str
    reward: float
    label: str | None
    answer: str | None
    """The start of its last assistant message (None without a transcript)."""


class RunReport(BaseModel):
    """What ``osmosis-run report --json`` prints: the summary, failures, slowest, lowest rewards."""

    run_dir: Path
    state: RunState
    summary: Summary
    failures: list[FailureCategory]
    slowest: list[SlowRollout]
    lowest: list[LowReward] = []
    """Graded rollouts below the pass threshold, lowest reward first (failures: ``failures``)."""


def check_group_by(group_by: str | None) -> None:
    """Check a ``--group-by`` value.

    Raises:
        ConfigError: it is not of the form ``metadata.KEY``.
    """
    if group_by is not None and (not group_by.startswith("metadata.") or group_by == "metadata."):
        raise ConfigError(f'--group-by {group_by}: must look like "metadata.KEY"')


class Fold(Protocol):
    """What a pass over a run's results feeds, one result at a time."""

    def add(self, line: ResultLine) -> None:
        """Take one result."""


F = TypeVar("F", bound=Fold)


def open_run(
    run_dir: Path, *, pass_threshold: float | None = None, group_by: str | None = None
) -> RunData:
    """Load a run directory for a report, with one-line errors for every way it can be unusable.

    Its ``lines`` are read from results.jsonl again at each pass (``results_file``).

    Raises:
        RunDirError: the directory does not exist, is not a run directory, or its files are
            unreadable.
        ConfigError: ``group_by`` is not ``metadata.KEY``, or ``pass_threshold`` is not finite.
    """
    return _open(run_dir, pass_threshold=pass_threshold, group_by=group_by, fold=None)[0]


def read_report(
    run_dir: Path,
    *,
    pass_threshold: float | None = None,
    group_by: str | None = None,
    slowest: int = SLOWEST,
    lowest: int = LOWEST,
) -> tuple[RunData, RunReport]:
    """``open_run`` and ``build_report`` in one pass over the results.

    Raises:
        RunDirError: as ``open_run``.
        ConfigError: as ``open_run``.
    """

    def report_fold(threshold: float) -> _ReportFold:
        return _ReportFold(threshold=threshold, slowest=slowest, lowest=lowest)

    run, fold = _open(run_dir, pass_threshold=pass_threshold, group_by=group_by, fold=report_fold)
    assert fold is not None
    return run, fold.report(run)


def _open(
    run_dir: Path,
    *,
    pass_threshold: float | None,
    group_by: str | None,
    fold: Callable[[float], F] | None,
) -> tuple[RunData, F | None]:
    check_group_by(group_by)
    if pass_threshold is not None and not math.isfinite(pass_threshold):
        raise ConfigError(f"--pass-threshold {pass_threshold}: must be a finite number")
    if not run_dir.exists():
        raise RunDirError(
            f"{run_dir} does not exist; give the directory `osmosis-run eval` printed"
        )
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is a file, not a run directory")
    if not (run_dir / RESULTS).is_file() and not (run_dir / RUN_CONFIG).is_file():
        raise RunDirError(
            f"{run_dir} is not an osmosis-run run directory (no results.jsonl); "
            "give the directory `osmosis-run eval` printed"
        )
    try:
        return _load(run_dir, pass_threshold=pass_threshold, group_by=group_by, fold=fold)
    except ValidationError as exc:
        raise RunDirError(
            f"{run_dir / 'summary.json'}: not a valid summary ({exc.error_count()} errors); "
            "delete it and re-run the eval command to rewrite it"
        ) from None
    except OSError as exc:
        raise RunDirError(f"cannot read run directory {run_dir}: {exc.strerror or exc}") from None


def _load(
    run_dir: Path,
    *,
    pass_threshold: float | None,
    group_by: str | None,
    fold: Callable[[float], F] | None,
) -> tuple[RunData, F | None]:
    """The run and its summary, made as ``load_run`` makes it, in one pass over its results
    that also feeds ``fold(threshold)``.

    A finished run's summary.json stands for its results when results.jsonl has not changed
    since it was written and it counts them at this threshold, grouping and samples (as a
    resume takes it): the pass then only counts the results by status, and checks that the
    summary counts the same. Else, or when a count differs, the summary is recomputed (and a
    second pass when an id repeats, since the first saw the lines that lost too).
    """
    config = read_run_config(run_dir)
    threshold = float(
        pass_threshold if pass_threshold is not None else config.get("pass_threshold", 1.0)
    )
    group = group_by if group_by is not None else config.get("group_by")
    samples = int(config.get("samples", 1))
    stored = read_summary(run_dir)

    def metrics() -> MetricsAccumulator:
        return MetricsAccumulator(pass_threshold=threshold, samples=samples, group_by=group)

    summary: Summary | None = None
    lines: Sequence[ResultLine]
    kept = _current_summary(run_dir, stored, threshold=threshold, group_by=group, samples=samples)
    if kept is not None:
        extra = fold(threshold) if fold is not None else None
        statuses: Counter[str] = Counter()
        lines, _ = scan_results(run_dir, _counted(statuses, extra), ids=False)
        if len(lines) == kept.rollouts and +statuses == +Counter(kept.counts):
            summary = kept
    if summary is None:
        accumulator, extra = metrics(), fold(threshold) if fold is not None else None
        lines, exact = scan_results(run_dir, _both(accumulator, extra))
        if not exact:  # an id repeats: the scan saw the lines that lost too
            accumulator, extra = metrics(), fold(threshold) if fold is not None else None
            add = _both(accumulator, extra)
            for line in lines:
                add(line)
        summary = accumulator.summary()
    run = RunData(
        run_dir=run_dir,
        config=config,
        lines=lines,
        summary=with_stored_summary(summary, stored),
        stored_summary=stored,
        fingerprint=read_fingerprint(run_dir),
    )
    return run, extra


def _current_summary(
    run_dir: Path, stored: Summary | None, *, threshold: float, group_by: str | None, samples: int
) -> Summary | None:
    """A copy of summary.json when it can stand for the results (see ``_load``), else None."""
    if (
        stored is None
        or not stored.complete
        or stored.interrupted
        or stored.pass_threshold != threshold
        or stored.group_by != group_by
        or stored.samples_per_row != samples
    ):
        return None
    try:
        if (run_dir / RESULTS).stat().st_mtime_ns > (run_dir / SUMMARY).stat().st_mtime_ns:
            return None
    except OSError:
        return None
    return stored.model_copy(deep=True)


def _both(metrics: MetricsAccumulator, fold: Fold | None) -> Callable[[ResultLine], None]:
    if fold is None:
        return metrics.add
    count, also = metrics.add, fold.add

    def both(line: ResultLine) -> None:
        count(line)
        also(line)

    return both


def _counted(statuses: Counter[str], fold: Fold | None) -> Callable[[ResultLine], None]:
    also = fold.add if fold is not None else None

    def count(line: ResultLine) -> None:
        statuses[line.status] += 1
        if also is not None:
            also(line)

    return count


def run_state(run: RunData) -> RunState:
    """Whether the run finished, was interrupted, or has no summary yet (running, or killed)."""
    stored = run.stored_summary
    if stored is None:
        return "incomplete"
    return "interrupted" if stored.interrupted else "finished"


def build_report(
    run: RunData,
    *,
    slowest: int = SLOWEST,
    lowest: int = LOWEST,
    max_groups: int = MAX_GROUPS,
    max_ids: int = MAX_IDS,
) -> RunReport:
    """Everything ``osmosis-run report`` shows about ``run`` (one pass over its results)."""
    fold = _ReportFold(
        threshold=run.summary.pass_threshold,
        slowest=slowest,
        lowest=lowest,
        max_groups=max_groups,
        max_ids=max_ids,
    )
    for line in run.lines:
        fold.add(line)
    return fold.report(run)


class _ReportFold:
    """Failures, the slowest and the lowest rewards, one result at a time."""

    def __init__(
        self,
        *,
        threshold: float,
        slowest: int,
        lowest: int,
        max_groups: int = MAX_GROUPS,
        max_ids: int = MAX_IDS,
    ) -> None:
        self.failures = _Failures(max_groups=max_groups, max_ids=max_ids)
        self.slowest = _Slowest(slowest)
        self.lowest = _Lowest(lowest, threshold)

    def add(self, line: ResultLine) -> None:
        self.failures.add(line)
        self.slowest.add(line)
        self.lowest.add(line)

    def report(self, run: RunData) -> RunReport:
        return RunReport(
            run_dir=run.run_dir,
            state=run_state(run),
            summary=run.summary,
            failures=self.failures.categories(),
            slowest=self.slowest.rollouts(),
            lowest=self.lowest.rollouts(),
        )


def failure_categories(
    lines: Iterable[ResultLine], *, max_groups: int = MAX_GROUPS, max_ids: int = MAX_IDS
) -> list[FailureCategory]:
    """Failed, timed-out and invalid rollouts by category, identical messages grouped.

    Categories come most frequent first; within one, messages most frequent first.
    """
    fold = _Failures(max_groups=max_groups, max_ids=max_ids)
    for line in lines:
        fold.add(line)
    return fold.categories()


class _Failures:
    def __init__(self, *, max_groups: int, max_ids: int) -> None:
        self.max_groups, self.max_ids = max_groups, max_ids
        self.counts: Counter[str] = Counter()
        self.messages: defaultdict[str, dict[str, list[str]]] = defaultdict(dict)
        self.totals: defaultdict[tuple[str, str], int] = defaultdict(int)

    def add(self, line: ResultLine) -> None:
        if not outcome.is_error(line.status):
            return
        category = line.error_category or line.status
        message = line.error_message or ""
        self.counts[category] += 1
        self.totals[category, message] += 1
        ids = self.messages[category].setdefault(message, [])
        if len(ids) < self.max_ids:
            ids.append(line.rollout_id)

    def categories(self) -> list[FailureCategory]:
        return [
            _category(category, count, self.messages[category], self.totals, self.max_groups)
            for category, count in sorted(self.counts.items(), key=lambda item: (-item[1], item[0]))
        ]


def _category(
    category: str,
    count: int,
    by_message: dict[str, list[str]],
    totals: dict[tuple[str, str], int],
    max_groups: int,
) -> FailureCategory:
    ranked = sorted(by_message, key=lambda message: -totals[category, message])
    groups = [
        FailureGroup(
            message=message, count=totals[category, message], rollout_ids=by_message[message]
        )
        for message in ranked[:max_groups]
    ]
    return FailureCategory(
        category=category,
        count=count,
        groups=groups,
        more_messages=max(len(ranked) - max_groups, 0),
    )


def slowest_rollouts(lines: Iterable[ResultLine], *, top: int = SLOWEST) -> list[SlowRollout]:
    """The ``top`` rollouts with the largest workflow + grader time, slowest first (ties: the
    earlier first)."""
    fold = _Slowest(top)
    for line in lines:
        fold.add(line)
    return fold.rollouts()


class _Slowest:
    """The ``top`` slowest so far, in a heap whose least is the fastest of them (among equal
    times, the latest: the earlier of two equal times is kept)."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.seen = 0
        self.heap: list[tuple[float, int, ResultLine]] = []

    def add(self, line: ResultLine) -> None:
        self.seen += 1
        if line.workflow_ms is None and line.grader_ms is None:
            return
        item = ((line.workflow_ms or 0.0) + (line.grader_ms or 0.0), -self.seen, line)
        if len(self.heap) < self.top:
            heapq.heappush(self.heap, item)
        elif self.heap and item[:2] > self.heap[0][:2]:
            heapq.heapreplace(self.heap, item)

    def rollouts(self) -> list[SlowRollout]:
        ranked = sorted(self.heap, key=lambda item: item[:2], reverse=True)
        return [
            SlowRollout(
                rollout_id=line.rollout_id,
                status=line.status,
                total_ms=total,
                workflow_ms=line.workflow_ms,
                grader_ms=line.grader_ms,
                reward=line.reward,
            )
            for total, _, line in ranked
        ]


def lowest_rewards(
    lines: Iterable[ResultLine], *, top: int = LOWEST, threshold: float = 1.0
) -> list[LowReward]:
    """The ``top`` graded rollouts below ``threshold``, lowest reward first, ties in results order.

    Only successes with a reward that did not pass: failed rollouts (which score 0) are listed
    by ``failure_categories``, and ungraded or removed ones have no reward.
    """
    fold = _Lowest(top, threshold)
    for line in lines:
        fold.add(line)
    return fold.rollouts()


class _Lowest:
    """The ``top`` lowest rewards below the threshold so far, in a heap whose greatest is the
    highest of them (among equal rewards, the latest)."""

    def __init__(self, top: int, threshold: float) -> None:
        self.top, self.threshold = top, threshold
        self.seen = 0
        self.heap: list[tuple[float, int, ResultLine]] = []

    def add(self, line: ResultLine) -> None:
        index, self.seen = self.seen, self.seen + 1
        reward = line.reward
        if reward is None or outcome.passed(line.status, reward, self.threshold) is not False:
            return
        item = (-reward, -index, line)
        if len(self.heap) < self.top:
            heapq.heappush(self.heap, item)
        elif self.heap and item[:2] > self.heap[0][:2]:
            heapq.heapreplace(self.heap, item)

    def rollouts(self) -> list[LowReward]:
        ranked = sorted(self.heap, key=lambda item: item[:2], reverse=True)
        return [
            LowReward(
                rollout_id=line.rollout_id,
                reward=-negative,
                label=line.label,
                answer=final_answer(line.messages),
            )
            for negative, _, line in ranked
        ]


def final_answer(messages: list[dict[str, Any]] | None, *, chars: int = ANSWER_CHARS) -> str | None:
    """The first ``chars`` characters of the last assistant message's text, on one line."""
    for message in reversed(messages or []):
        if message.get("role") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(
                str(part.get("text", "")) for part in content if isinstance(part, dict)
            )
        if not content:
            continue
        text = " ".join(str(content).split())
        return text if len(text) <= chars else text[: chars - 3] + "..."
    return None
