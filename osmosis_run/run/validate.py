"""Check a rollout setup without running it: load what a run loads, read every row.

``validate`` is ``osmosis-run validate`` and ``osmosis-run eval --dry-run``. It loads the
workflow, the grader and their configs exactly as a run does (``load_components``), then reads
every row of the dataset and keeps each problem as a ``file:line: what`` message. Nothing runs
and nothing is written: no run directory, no artifacts, no user code beyond importing it.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict

from osmosis_run.run.components import check_inputs, load_components, selection_of
from osmosis_run.run.dataset import Row, iter_rows, no_rows_hint
from osmosis_run.run.selection import select
from osmosis_run.run.settings import EvalSettings
from osmosis_run.run.workspace import open_workspace

__all__ = ["MAX_PROBLEMS", "ValidationReport", "validate"]

MAX_PROBLEMS = 1000


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
    workflow_config: str | None = None
    """The workflow config instance loaded (``module:attr``), if any."""
    workflow_config_overrides: list[str] = []
    """The fields a config file's ``[workflow_config]`` table sets."""
    grader_config: str | None = None
    grader_config_overrides: list[str] = []
    server: str | None = None
    """With ``--server``: the server, which loads its own workflow and grader (nothing here)."""

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
    s, _ = open_workspace(settings)
    dataset = check_inputs(s)
    selection = selection_of(s)
    if not s.execution.remote:  # with --server, the server loads its own
        load_components(s)
    name = "<stdin>" if dataset == "-" else dataset
    tally = _Tally(
        iter_rows(dataset),
        name=name,
        keep=max_problems,
        ids=selection.ids,
        hint=no_rows_hint(dataset),
    )
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
        samples=s.run.samples,
        workflow=s.run.workflow or f"the workflow of {s.execution.server}",
        grader=s.run.grader,
        workflow_config=s.run.workflow_config,
        workflow_config_overrides=list(s.run.workflow_config_overrides),
        grader_config=s.run.grader_config,
        grader_config_overrides=list(s.run.grader_config_overrides),
        server=s.execution.server if s.execution.remote else None,
    )


class _Tally:
    """Pass rows through while counting them and keeping their problems.

    A plain iterator, not a generator: the selection may stop reading early, and the rest of
    the rows are then read from here.
    """

    def __init__(
        self,
        rows: Iterator[Row],
        *,
        name: str,
        keep: int,
        ids: frozenset[str] | None,
        hint: str,
    ) -> None:
        self._rows = rows
        self._name = name
        self._hint = hint
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
            self._problem(f"{self._name}: no rows; {self._hint}")
        for missing in sorted((self._wanted or frozenset()) - self._found):
            self._problem(f'{self._name}: --ids: no row has the id "{missing}"')
