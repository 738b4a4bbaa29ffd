"""The first phase of a run: everything decided before the run directory is touched.

``prepare(settings)`` loads the user's classes and configs, checks the dataset, and fixes what
the run is: the rows it selects, how many rollouts that makes, the fingerprint, where the run
directory is, how many rollouts may be in flight. The result is a frozen ``Plan``; the scheduler
executes it. Whatever can stop a run before it starts is raised here (exit code 2).
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from osmosis_run.errors import ConfigError
from osmosis_run.run.components import Components, check_inputs, load_components, selection_of
from osmosis_run.run.fingerprint import build_fingerprint, default_run_dir
from osmosis_run.run.rollouts import Job
from osmosis_run.run.selection import Selection, count_planned
from osmosis_run.run.settings import UNLIMITED, EvalSettings
from osmosis_run.run.workspace import open_workspace
from osmosis_run.sdk.backend import DEFAULT_MAX_CONCURRENT

__all__ = ["JobSource", "Plan", "prepare"]


class JobSource(Protocol):
    """Where a run's rollouts come from when they are not the dataset's rows (a re-grade)."""

    def jobs(self, *, skip: Container[str]) -> Iterator[Job]:
        """The run's rollouts in order, except those whose ids are in ``skip`` (finished)."""
        ...


@dataclass(frozen=True, slots=True)
class Plan:
    """What a run is: its settings, rows, components, fingerprint and run directory.

    Attributes:
        settings: every option, resolved.
        dataset: the dataset path, or ``-`` for stdin.
        selection: which rows the run takes.
        components: the user's classes and config instances, loaded (None with ``--server``:
            the rollout server runs its own).
        fingerprint: what the run is made from (a resume with other inputs is refused).
        run_dir: the run directory.
        planned: rollouts the run holds (None for a stream, whose rows are not counted ahead).
        concurrency: rollouts in flight at most (None: no limit).
        source: the rollouts, when they are not made from the dataset's rows: a re-grade
            (``osmosis_run.run.regrade``) replays the rollouts another run recorded.
        secrets: a workspace config's [secrets] values, redacted from all the run writes.
    """

    settings: EvalSettings
    dataset: str
    selection: Selection
    components: Components | None
    fingerprint: Mapping[str, Any]
    run_dir: Path
    planned: int | None
    concurrency: int | None
    source: JobSource | None = None
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def window(self, limit: int | None) -> int | None:
        """Rollouts in flight at most (None: no limit): ``--concurrency`` when given, else
        ``limit``, the executor's own default."""
        return self.concurrency if self.settings.execution.concurrency is not None else limit

    def local_components(self) -> Components:
        """The loaded classes, for an executor that runs or ships them (every one but --server).

        Raises:
            ConfigError: the plan runs on a rollout server, which has its own classes.
        """
        if self.components is None:
            raise ConfigError(
                "this run's rollouts run on the rollout server given by --server, which has "
                "its own workflow and grader; drop --server to run them here"
            )
        return self.components


def prepare(settings: EvalSettings) -> Plan:
    """Load and check everything a run needs, without writing anything.

    Raises:
        OsmosisRunError: a missing or unreadable dataset, a bad ``module:attr`` path, a bad
            config override, a malformed selection (exit code 2).
    """
    settings, secrets = open_workspace(settings)
    dataset = check_inputs(settings)
    selection = selection_of(settings)
    components = None if settings.execution.remote else load_components(settings)
    fingerprint = build_fingerprint(
        settings,
        selection,
        components.workflow if components else None,
        components.grader if components else None,
    )
    run_dir = (
        Path(settings.output.out) if settings.output.out else default_run_dir(settings, fingerprint)
    )
    return Plan(
        settings=settings,
        dataset=dataset,
        selection=selection,
        components=components,
        fingerprint=fingerprint,
        run_dir=run_dir,
        planned=count_planned(dataset, selection, settings.run.samples),
        concurrency=_concurrency(settings, components),
        secrets=secrets,
    )


def _concurrency(settings: EvalSettings, components: Components | None) -> int | None:
    """``--concurrency`` (``UNLIMITED``: no limit), else the workflow config's, else the default."""
    if settings.execution.concurrency == UNLIMITED:
        return None
    if settings.execution.concurrency is not None:
        return settings.execution.concurrency
    if components is not None and components.workflow_config is not None:
        return components.workflow_config.concurrency.max_concurrent
    return DEFAULT_MAX_CONCURRENT
