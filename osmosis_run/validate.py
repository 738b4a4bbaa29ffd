"""Check a rollout setup without running it: load what a run loads, read every row.

``validate`` is ``osmosis-run validate`` and ``osmosis-run eval --dry-run``. It loads the
workflow, the grader and their configs exactly as a run does (``load_components``), then reads
every row of the dataset and keeps each problem as a ``file:line: what`` message. Nothing runs
and nothing is written: no run directory, no artifacts, no user code beyond importing it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from osmosis_run.dataset import Row, iter_rows
from osmosis_run.errors import ConfigError, DatasetError
from osmosis_run.loading import load_class, load_instance
from osmosis_run.selection import Selection, parse_rows_spec, parse_shard, select
from osmosis_run.settings import EvalSettings
from osmosis_run.types import AgentWorkflowConfig, BaseConfig
from osmosis_run.workflow import AgentWorkflow, Grader

__all__ = [
    "MAX_PROBLEMS",
    "Components",
    "ValidationReport",
    "add_import_paths",
    "load_components",
    "load_config",
    "selection_of",
    "validate",
]

MAX_PROBLEMS = 1000


@dataclass(frozen=True, slots=True)
class Components:
    """The user's classes and config instances, loaded and checked."""

    workflow: type[AgentWorkflow[Any]]
    grader: type[Grader] | None
    workflow_config: AgentWorkflowConfig | None
    grader_config: BaseConfig | None


class ValidationReport(BaseModel):
    """What ``validate`` found: counts, and the problems as ``file:line: what`` lines."""

    model_config = ConfigDict(extra="forbid")

    dataset: str
    """The dataset as problems name it (``<stdin>`` for ``-``)."""
    rows: int
    invalid: int
    problems: list[str]
    """The first ``MAX_PROBLEMS`` problems, in file order."""
    problem_count: int
    selected: int
    """Rows the selection options take (all rows when there are none)."""
    samples: int
    workflow: str
    grader: str | None

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return self.problem_count == 0

    @property
    def rollouts(self) -> int:
        """Rollouts a run with these settings would hold."""
        return self.selected * self.samples


def validate(settings: EvalSettings, *, max_problems: int = MAX_PROBLEMS) -> ValidationReport:
    """Load the components as a run would, then read every row and collect its problems.

    Raises:
        OsmosisRunError: what stops a run before it starts (a missing dataset, a bad
            ``module:attr`` path, a bad config override, an unreadable file).
    """
    s = settings
    if not s.dataset:
        raise ConfigError("no dataset: give DATASET (a JSONL file, or - for stdin)")
    if not s.workflow:
        raise ConfigError("no workflow: give --workflow module:Class")
    if s.dataset != "-" and not Path(s.dataset).is_file():
        raise DatasetError(f"dataset {s.dataset} does not exist; check the path")
    selection = selection_of(s)
    load_components(s)
    name = "<stdin>" if s.dataset == "-" else s.dataset
    tally = _Tally(iter_rows(s.dataset), name=name, keep=max_problems, ids=selection.ids)
    # The count of a shuffled selection is that of the unshuffled one; skipping the shuffle
    # keeps memory flat. Rows the selection does not need are still read, for their problems.
    selected = sum(1 for _ in select(tally, selection.model_copy(update={"shuffle": False})))
    for _ in tally:
        pass
    tally.finish()
    return ValidationReport(
        dataset=name,
        rows=tally.rows,
        invalid=tally.invalid,
        problems=tally.problems,
        problem_count=tally.problem_count,
        selected=selected,
        samples=s.samples,
        workflow=s.workflow,
        grader=s.grader,
    )


def load_components(settings: EvalSettings) -> Components:
    """Import the workflow, the grader and their configs, with a config file's overrides.

    Raises:
        LoadError: a ``module:attr`` path does not give the object asked for.
        ConfigError: no workflow, or a ``[workflow_config]`` / ``[grader_config]`` override is
            unknown or ill-typed.
    """
    s = settings
    if not s.workflow:
        raise ConfigError("no workflow: give --workflow module:Class")
    add_import_paths(s)
    return Components(
        workflow=load_class(s.workflow, AgentWorkflow, role="--workflow"),
        grader=load_class(s.grader, Grader, role="--grader") if s.grader else None,
        workflow_config=load_config(
            s.workflow_config, s.workflow_config_overrides, AgentWorkflowConfig, "workflow_config"
        ),
        grader_config=load_config(
            s.grader_config, s.grader_config_overrides, BaseConfig, "grader_config"
        ),
    )


def add_import_paths(settings: EvalSettings) -> None:
    """Make the settings' ``import_paths`` importable (a config file's folder, first)."""
    for folder in reversed(settings.import_paths):
        if folder not in sys.path:
            sys.path.insert(0, folder)


def load_config(
    ref: str | None, overrides: dict[str, Any], base: type[BaseConfig], key: str
) -> Any:
    """Load a config instance and apply a config file's ``[workflow_config]`` overrides.

    Raises:
        LoadError: ``ref`` does not name an instance of ``base``.
        ConfigError: an override names no field of the instance, or has the wrong type.
    """
    option = f"--{key.replace('_', '-')}"
    if not ref:
        if overrides:
            raise ConfigError(
                f'[{key}] overrides need an instance to override: add `from = "module:attr"` '
                f"to the table, or {option}"
            )
        return None
    instance = load_instance(ref, base, role=option)
    if not overrides:
        return instance
    known = set(type(instance).model_fields) | set(instance.model_extra or {})
    for name in overrides:
        if name not in known:
            raise ConfigError(
                f'[{key}] has no field "{name}" (fields of {type(instance).__name__}: '
                f"{', '.join(sorted(known))})"
            )
    try:
        return type(instance).model_validate({**instance.model_dump(), **overrides})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise ConfigError(f"[{key}] {where}: {error['msg']} (got {error['input']!r})") from None


def selection_of(settings: EvalSettings) -> Selection:
    """The row selection of the settings.

    Raises:
        ConfigError: ``--rows`` or ``--shard`` is malformed.
    """
    s = settings
    return Selection(
        offset=s.offset,
        limit=s.limit,
        rows=parse_rows_spec(s.rows) if s.rows else None,
        ids=frozenset(s.ids) if s.ids is not None else None,
        shard=parse_shard(s.shard) if s.shard else None,
        shuffle=s.shuffle,
        seed=s.seed,
    )


class _Tally:
    """Pass rows through while counting them and keeping their problems.

    A plain iterator, not a generator: the selection may stop reading early, and the rest of
    the rows are then read from here.
    """

    def __init__(
        self, rows: Iterator[Row], *, name: str, keep: int, ids: frozenset[str] | None
    ) -> None:
        self._rows = rows
        self._name = name
        self._keep = keep
        self._wanted = ids
        self._found: set[str] = set()
        self.rows = 0
        self.invalid = 0
        self.problems: list[str] = []
        self.problem_count = 0

    def __iter__(self) -> _Tally:
        return self

    def __next__(self) -> Row:
        row = next(self._rows)
        self.rows += 1
        if row.error is not None:
            self.invalid += 1
            self._problem(row.error)
        elif self._wanted is not None and str(row.id) in self._wanted:
            self._found.add(str(row.id))
        return row

    def _problem(self, message: str) -> None:
        self.problem_count += 1
        if len(self.problems) < self._keep:
            self.problems.append(message)

    def finish(self) -> None:
        """Add the problems of the dataset as a whole, once every row is read."""
        if self.rows == 0:
            self._problem(f"{self._name}: no rows; a dataset holds one JSON object per line")
        for missing in sorted((self._wanted or frozenset()) - self._found):
            self._problem(f'{self._name}: --ids: no row has the id "{missing}"')
