"""The in-process executor: the user's workflow and grader, run by ``LocalBackend``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from osmosis_run._construct import construct
from osmosis_run.run.plan import Plan
from osmosis_run.run.rollouts import timed_out
from osmosis_run.run.seam import Attempt, AttemptResult, Deadlines
from osmosis_run.sdk.backend import LocalBackend
from osmosis_run.sdk.types import ExecutionOutcome, ExecutionRequest, ExecutionResult
from osmosis_run.store.layout import ROLLOUTS

__all__ = ["LocalExecutor", "grade_within"]


class LocalExecutor:
    """Run attempts in this process and event loop, each stage within the engine's deadline.

    Artifacts are written in place: ``<run dir>/rollouts/<rollout id>/artifacts``.

    Args:
        backend: runs the user's workflow and grader.
        on_grading: told the rollout id and the workflow's result when its grader starts (a
            rollout server reports the ``grading`` status from it; a worker process tells its
            runner, which then keeps the sample should the grader have to be killed).
    """

    def __init__(
        self,
        backend: LocalBackend,
        *,
        on_grading: Callable[[str, ExecutionResult], None] | None = None,
    ) -> None:
        self.backend = backend
        self.on_grading = on_grading

    @classmethod
    def from_plan(cls, plan: Plan) -> LocalExecutor:
        """The executor of a plan's components, writing artifacts into its run directory."""
        parts = plan.local_components()
        return cls(
            LocalBackend(
                workflow=parts.workflow,
                workflow_config=parts.workflow_config,
                grader=parts.grader,
                grader_config=parts.grader_config,
                artifact_root=(plan.run_dir / ROLLOUTS).absolute(),
            )
        )

    @property
    def limit(self) -> int | None:
        """The workflow config's ``max_concurrent`` (4 without a config)."""
        return self.backend.max_concurrent

    @property
    def local_artifacts(self) -> bool:
        """Always: the workflow writes into the run directory."""
        return True

    async def open(self) -> None:
        """Nothing to start: the classes were loaded with the plan."""

    async def close(self) -> None:
        """Nothing to release."""

    def adopt_artifacts_dirs(self, rollout_ids: Iterable[str]) -> None:
        """Use the artifacts directories the writer process made ahead."""
        self.backend.adopt_artifacts_dirs(rollout_ids)

    async def run(self, attempt: Attempt, deadlines: Deadlines) -> AttemptResult:
        """The workflow, then the grader when grading applies, each within its deadline."""
        backend, request = self.backend, attempt.request
        with attempt.context:
            started = time.perf_counter()
            seconds = request.agent_timeout_sec
            workflow: ExecutionResult
            if seconds is None:  # no deadline: no deadline machinery (the common, hot case)
                workflow = await backend.run_workflow(request)
            else:
                workflow = await deadlines.within(
                    "workflow",
                    seconds,
                    backend.run_workflow(request),
                    rollout_id=request.id,
                    timed_out=lambda: timed_out("workflow", seconds, None),
                )
            graded_at = time.perf_counter()
            grader = None
            if backend.grading_applies(request, workflow):
                if self.on_grading is not None:
                    self.on_grading(request.id, workflow)
                if request.grader_timeout_sec is None:  # grade_within's hot case, inline
                    grader = await backend.run_grader(request, workflow)
                else:
                    grader = await grade_within(backend, request, workflow, deadlines)
            done = time.perf_counter()
        return AttemptResult(
            construct(ExecutionOutcome, workflow=workflow, grader=grader),
            (graded_at - started) * 1000,
            (done - graded_at) * 1000 if grader is not None else None,
        )


async def grade_within(
    backend: LocalBackend,
    request: ExecutionRequest,
    workflow: ExecutionResult,
    deadlines: Deadlines,
) -> ExecutionResult:
    """The grader stage of one attempt, within the request's grader deadline (if any)."""
    grace = request.grader_timeout_sec
    if grace is None:  # no deadline: no deadline machinery (the common, hot case)
        return await backend.run_grader(request, workflow)
    return await deadlines.within(
        "grader",
        grace,
        backend.run_grader(request, workflow),
        rollout_id=request.id,
        timed_out=lambda: timed_out("grader", grace, workflow),
    )
