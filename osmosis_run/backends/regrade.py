"""The re-grade executor: the recorded sample of each rollout, graded again; no workflow runs.

Behind the engine's seam like any executor (``run/seam.py``), for the plans
``run.regrade.prepare_grade`` makes. Each attempt takes what the source run recorded of its
rollout (``RecordedRun.take``). A workflow failure is given back as it was recorded, and so is
a rollout the new grader does not apply to (no label and no metadata: ungraded). Otherwise the
rollout's artifacts are copied from the source run into the new run's artifacts directory (off
the event loop), and the grader runs on the recorded sample through ``LocalBackend.run_grader``,
within ``--grader-timeout``: the same ``GraderContext`` as in the source run (label, metadata,
sample, artifacts_dir), in the new run directory, so the source is never written.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from osmosis_run._construct import construct
from osmosis_run.backends.local import grade_within
from osmosis_run.run.plan import Plan
from osmosis_run.run.regrade import RecordedRun
from osmosis_run.run.seam import Attempt, AttemptResult, Deadlines
from osmosis_run.sdk.backend import LocalBackend
from osmosis_run.sdk.types import ExecutionOutcome
from osmosis_run.store.layout import ARTIFACTS, ROLLOUTS

__all__ = ["RegradeExecutor"]


class RegradeExecutor:
    """Grade recorded samples in this process; replay everything else as it was recorded.

    Args:
        backend: holds the grader (its workflow is a stand-in that is never run).
        recorded: the source run's rollouts.
        limit: rollouts in flight by default (the grader config's limit, else 4).
    """

    def __init__(self, backend: LocalBackend, recorded: RecordedRun, *, limit: int | None) -> None:
        self.backend = backend
        self.recorded = recorded
        self._limit = limit

    @classmethod
    def from_plan(cls, plan: Plan) -> RegradeExecutor:
        """The executor of a re-grade plan, writing artifacts into its run directory.

        Raises:
            TypeError: the plan is not a re-grade (``prepare_grade`` makes those).
        """
        recorded = plan.source
        if not isinstance(recorded, RecordedRun):
            raise TypeError("RegradeExecutor runs the plans of run.regrade.prepare_grade")
        parts = plan.local_components()
        backend = LocalBackend(
            workflow=parts.workflow,
            grader=parts.grader,
            grader_config=parts.grader_config,
            artifact_root=(plan.run_dir / ROLLOUTS).absolute(),
        )
        return cls(backend, recorded, limit=plan.concurrency)

    @property
    def limit(self) -> int | None:
        """The grader config's ``max_concurrent`` (4 without a config)."""
        return self._limit

    @property
    def local_artifacts(self) -> bool:
        """Always: artifacts are copied, and graders write, into the new run directory."""
        return True

    async def open(self) -> None:
        """Nothing to start: the grader was loaded with the plan."""

    async def close(self) -> None:
        """Nothing to release."""

    def adopt_artifacts_dirs(self, rollout_ids: Iterable[str]) -> None:
        """Use the artifacts directories the writer process made ahead."""
        self.backend.adopt_artifacts_dirs(rollout_ids)

    async def run(self, attempt: Attempt, deadlines: Deadlines) -> AttemptResult:
        """The recorded workflow result, then the grader when grading applies."""
        backend, request = self.backend, attempt.request
        recorded = self.recorded.take(request.id)
        workflow = recorded.workflow
        target = backend.artifact_root / request.id / ARTIFACTS
        await asyncio.to_thread(_copy_artifacts, recorded.artifacts, target)
        if not backend.grading_applies(request, workflow):
            outcome = construct(ExecutionOutcome, workflow=workflow, grader=None)
            return AttemptResult(outcome, recorded.workflow_ms, None)
        with attempt.context:
            started = time.perf_counter()
            grader = await grade_within(backend, request, workflow, deadlines)
            done = time.perf_counter()
        outcome = construct(ExecutionOutcome, workflow=workflow, grader=grader)
        return AttemptResult(outcome, recorded.workflow_ms, (done - started) * 1000)


def _copy_artifacts(source: Path, target: Path) -> None:
    """Make ``target`` a copy of the source run's artifacts (empty when it has none).

    What an interrupted attempt left in ``target`` goes first, so a resumed rollout's grader
    sees exactly what the first one saw.
    """
    if target.exists():
        shutil.rmtree(target)
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        target.mkdir(parents=True, exist_ok=True)
