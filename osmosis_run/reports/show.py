"""The library half of ``osmosis-run show``: find rollouts in a run, and gather one for display.

A rollout is found by its rollout id, by its row id (every sample of the row), or by its row
part of the rollout id (``row@3`` for a row without an id); ``worst`` gives the lowest-scoring
rollouts by the outcome rule (a failure scores 0). ``rollout_view`` adds what result.json keeps
beyond the results line (the traceback, the transcript of a run written with ``--no-messages``)
and the files in the rollout's directory.
"""

from __future__ import annotations

import difflib
import heapq
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from osmosis_run.errors import ConfigError
from osmosis_run.results import outcome
from osmosis_run.results.records import ResultLine
from osmosis_run.results.rundata import RunData
from osmosis_run.store.layout import RESULT_JSON, rollout_dir
from osmosis_run.store.rundata import read_json_object

__all__ = [
    "MAX_FILES",
    "RolloutFile",
    "RolloutView",
    "find_rollouts",
    "rollout_view",
    "worst_rollouts",
]

MAX_FILES = 50
_SUGGESTIONS = 3


class RolloutFile(BaseModel):
    """One file of a rollout's directory."""

    path: str
    """Relative to the rollout's directory, with ``/`` separators."""
    size: int


class RolloutView(BaseModel):
    """Everything ``osmosis-run show`` prints about one rollout."""

    line: ResultLine
    messages: list[dict[str, Any]] | None
    """The transcript: the results line's, else the sample's in result.json."""
    error_stage: str | None
    traceback: str | None
    previous_attempts: list[dict[str, Any]]
    directory: Path
    files: list[RolloutFile]
    more_files: int = 0
    """Files left out of ``files`` (beyond ``MAX_FILES``)."""


def find_rollouts(run: RunData, key: str) -> list[ResultLine]:
    """The rollouts ``key`` names: a rollout id, else every sample of a row id or row part.

    One pass over the run's results (and one more to suggest ids when none matches).

    Raises:
        ConfigError: no rollout matches; the message suggests the closest ids.
    """
    by_row: list[ResultLine] = []
    by_part: list[ResultLine] = []
    for line in run.lines:
        if line.rollout_id == key:
            return [line]
        if line.row_id is not None and str(line.row_id) == key:
            by_row.append(line)
        elif not by_row and outcome.split_rollout_id(line.rollout_id)[0] == key:
            by_part.append(line)
    if by_row or by_part:
        return sorted(by_row or by_part, key=lambda line: line.sample_index)
    raise ConfigError(_not_found(run, key))


def _not_found(run: RunData, key: str) -> str:
    close, examples = _closest(run, key)
    where = f'no rollout "{key}" in {run.run_dir}'
    if close:
        return f"{where}; did you mean {', '.join(close)}?"
    if not examples:
        return f"{where}: it has no finished rollouts yet"
    return (
        f"{where}; give a rollout id (such as {', '.join(examples)}) or a row id, "
        "or --worst N for the lowest rewards"
    )


def _closest(run: RunData, key: str, *, cutoff: float = 0.6) -> tuple[list[str], list[str]]:
    """The rollout ids and row ids closest to ``key`` (``difflib.get_close_matches`` over the
    ids, then the distinct row ids, read as a stream), and the run's first rollout ids."""
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(key)

    def close(text: str) -> float | None:
        matcher.set_seq1(text)
        if matcher.real_quick_ratio() >= cutoff and matcher.quick_ratio() >= cutoff:
            ratio = matcher.ratio()
            if ratio >= cutoff:
                return ratio
        return None

    found: list[tuple[float, str]] = []
    rows: set[str] = set()  # the row ids close to ``key``, each once
    examples: list[str] = []
    for line in run.lines:
        if len(examples) < _SUGGESTIONS:
            examples.append(line.rollout_id)
        if (ratio := close(line.rollout_id)) is not None:
            found.append((ratio, line.rollout_id))
        row = None if line.row_id is None else str(line.row_id)
        if row is not None and row not in rows and (ratio := close(row)) is not None:
            rows.add(row)
            found.append((ratio, row))
    best = heapq.nlargest(_SUGGESTIONS, found)
    return [text for _, text in best], examples


def worst_rollouts(run: RunData, count: int) -> list[ResultLine]:
    """The ``count`` lowest-scoring rollouts (failures score 0), lowest first, ties in order.

    Ungraded and removed rollouts have no score and are left out.
    """
    scored = (
        (score, index, line)
        for index, line in enumerate(run.lines)
        if (score := outcome.score(line.status, line.reward)) is not None
    )
    return [line for _, _, line in heapq.nsmallest(count, scored, key=lambda item: item[:2])]


def rollout_view(run: RunData, line: ResultLine) -> RolloutView:
    """One rollout with what result.json adds to its results line, and its files."""
    directory = rollout_dir(run.run_dir, line.rollout_id)
    doc = read_json_object(directory / RESULT_JSON)
    error = doc.get("error") or {}
    sample = doc.get("sample") or {}
    messages = line.messages if line.messages is not None else sample.get("messages")
    files = _files(directory)
    return RolloutView(
        line=line,
        messages=messages if isinstance(messages, list) else None,
        error_stage=error.get("stage"),
        traceback=error.get("traceback"),
        previous_attempts=list(doc.get("previous_attempts") or []),
        directory=directory,
        files=files[:MAX_FILES],
        more_files=max(len(files) - MAX_FILES, 0),
    )


def _files(directory: Path) -> list[RolloutFile]:
    if not directory.is_dir():
        return []
    found = []
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            found.append(
                RolloutFile(path=path.relative_to(directory).as_posix(), size=path.stat().st_size)
            )
    return found
