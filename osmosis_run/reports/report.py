"""The library half of ``osmosis-run report``: failures grouped, the slowest rollouts, one document.

A report reads a run directory through ``rundata.load_run``, so it works on a finished run, an
interrupted one and one that is still running (the summary is recomputed from results.jsonl).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from osmosis_run.errors import ConfigError, RunDirError
from osmosis_run.results import outcome
from osmosis_run.results.records import ResultLine, Summary
from osmosis_run.results.rundata import RunData
from osmosis_run.store.rundata import load_run

__all__ = [
    "FailureCategory",
    "FailureGroup",
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


def open_run(
    run_dir: Path, *, pass_threshold: float | None = None, group_by: str | None = None
) -> RunData:
    """Load a run directory for a report, with one-line errors for every way it can be unusable.

    Raises:
        RunDirError: the directory does not exist, is not a run directory, or its files are
            unreadable.
        ConfigError: ``group_by`` is not ``metadata.KEY``, or ``pass_threshold`` is not finite.
    """
    check_group_by(group_by)
    if pass_threshold is not None and not math.isfinite(pass_threshold):
        raise ConfigError(f"--pass-threshold {pass_threshold}: must be a finite number")
    if not run_dir.exists():
        raise RunDirError(
            f"{run_dir} does not exist; give the directory `osmosis-run eval` printed"
        )
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is a file, not a run directory")
    try:
        return load_run(run_dir, pass_threshold=pass_threshold, group_by=group_by)
    except ValidationError as exc:
        raise RunDirError(
            f"{run_dir / 'summary.json'}: not a valid summary ({exc.error_count()} errors); "
            "delete it and re-run the eval command to rewrite it"
        ) from None
    except OSError as exc:
        raise RunDirError(f"cannot read run directory {run_dir}: {exc.strerror or exc}") from None


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
    """Everything ``osmosis-run report`` shows about ``run``."""
    return RunReport(
        run_dir=run.run_dir,
        state=run_state(run),
        summary=run.summary,
        failures=failure_categories(run.lines, max_groups=max_groups, max_ids=max_ids),
        slowest=slowest_rollouts(run.lines, top=slowest),
        lowest=lowest_rewards(run.lines, top=lowest, threshold=run.summary.pass_threshold),
    )


def failure_categories(
    lines: Iterable[ResultLine], *, max_groups: int = MAX_GROUPS, max_ids: int = MAX_IDS
) -> list[FailureCategory]:
    """Failed, timed-out and invalid rollouts by category, identical messages grouped.

    Categories come most frequent first; within one, messages most frequent first.
    """
    counts: Counter[str] = Counter()
    messages: defaultdict[str, dict[str, list[str]]] = defaultdict(dict)
    totals: defaultdict[tuple[str, str], int] = defaultdict(int)
    for line in lines:
        if not outcome.is_error(line.status):
            continue
        category = line.error_category or line.status
        message = line.error_message or ""
        counts[category] += 1
        totals[category, message] += 1
        ids = messages[category].setdefault(message, [])
        if len(ids) < max_ids:
            ids.append(line.rollout_id)
    return [
        _category(category, count, messages[category], totals, max_groups)
        for category, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
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
    """The ``top`` rollouts with the largest workflow + grader time, slowest first."""
    timed = (
        SlowRollout(
            rollout_id=line.rollout_id,
            status=line.status,
            total_ms=(line.workflow_ms or 0.0) + (line.grader_ms or 0.0),
            workflow_ms=line.workflow_ms,
            grader_ms=line.grader_ms,
            reward=line.reward,
        )
        for line in lines
        if line.workflow_ms is not None or line.grader_ms is not None
    )
    return heapq.nlargest(top, timed, key=lambda slow: slow.total_ms)


def lowest_rewards(
    lines: Iterable[ResultLine], *, top: int = LOWEST, threshold: float = 1.0
) -> list[LowReward]:
    """The ``top`` graded rollouts below ``threshold``, lowest reward first, ties in results order.

    Only successes with a reward that did not pass: failed rollouts (which score 0) are listed
    by ``failure_categories``, and ungraded or removed ones have no reward.
    """
    graded = (
        (line.reward, index, line)
        for index, line in enumerate(lines)
        if line.reward is not None and outcome.passed(line.status, line.reward, threshold) is False
    )
    return [
        LowReward(
            rollout_id=line.rollout_id,
            reward=reward,
            label=line.label,
            answer=final_answer(line.messages),
        )
        for reward, _, line in heapq.nsmallest(top, graded, key=lambda item: item[:2])
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
