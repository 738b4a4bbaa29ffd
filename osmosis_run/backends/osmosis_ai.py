"""osmosis_ai classes, run unchanged behind the engine's seam.

A workflow or grader subclassing ``osmosis_ai.rollout``'s classes gets what osmosis-ai's own
``LocalBackend`` gives it: osmosis_ai's ``AgentWorkflowContext`` and ``GraderContext``, its
``RolloutSample`` (so ``set_reward`` and ``remove_sample`` behave as there), its output rules
(``coerce_output``) and reward check, its error categories, and osmosis_ai's ambient
``RolloutContext`` entered around the workflow with the rollout's id, endpoint and key, so its
integrations (``OsmosisLitellmModel``, the OpenAI Agents and Strands agents) work. The outcome
is converted to ours; the engine then treats it as any other (deadlines, retries, records).

Where outcomes differ from osmosis-ai 0.3.8's LocalBackend, SPEC.md follows the seed pages: a
rollout that grading does not apply to (no grader, or no label and no metadata) is an ungraded
success, not a bare failure. Deadlines are the engine's (osmosis-run is the harness).

A mix works too: an osmosis_ai workflow with an osmosis_run grader, or the other way round;
each class gets its own SDK's objects.

Any other osmosis_ai ``ExecutionBackend`` at module level (a ``HarborBackend``: a container
per rollout) runs whole rollouts itself: ``BackendExecutor`` calls its ``execute`` with the
rollout's request inside both SDKs' ambient contexts (the run's gateway URL and key, which it
hands to the container), converts the outcome, and moves what it wrote for the rollout
(Harbor's trial logs and result, the verifier's reward file, the trial's artifacts) into the
rollout's ``artifacts`` folder. Its scratch folders are the executor's own, removed on close;
a ``HarborBackend`` is checked before any rollout (harbor_checks.py).

This module never imports osmosis_ai: it is used only for classes that come from it, and their
import has loaded it already.
"""

from __future__ import annotations

import asyncio
import copy
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from osmosis_run.backends import harbor_checks
from osmosis_run.backends.local import LocalExecutor
from osmosis_run.errors import ConfigError
from osmosis_run.run.components import Components
from osmosis_run.run.plan import Plan
from osmosis_run.run.rollouts import timed_out
from osmosis_run.run.seam import Attempt, AttemptResult, Deadlines
from osmosis_run.sdk import _osmosis_ai
from osmosis_run.sdk.backend import (
    DEFAULT_MAX_CONCURRENT,
    LocalBackend,
    _failure,
    _reraise_if_cancelled,
    _rollout_context,
    _success,
)
from osmosis_run.sdk.types import (
    ExecutionOutcome,
    ExecutionRequest,
    ExecutionResult,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
    json_copy,
)
from osmosis_run.store.layout import ARTIFACTS, ROLLOUTS

__all__ = [
    "BackendExecutor",
    "OsmosisAiBackend",
    "OsmosisAiExecutor",
    "backend_executor",
    "backend_for",
    "osmosis_ai_executor",
    "refuse_elsewhere",
    "refuse_option",
    "uses_osmosis_ai",
]

# What a whole rollout may take beyond its agent and grader timeouts (a container to build and
# start, then to stop): the backend enforces those two itself, this is the backstop.
DEADLINE_MARGIN_S = 120.0


def uses_osmosis_ai(components: Components) -> bool:
    """Whether the workflow or the grader subclasses osmosis_ai's classes (or the workflow
    stands for an osmosis_ai ``ExecutionBackend``)."""
    if _osmosis_ai.execution_backend(components.workflow) is not None:
        return True
    return _osmosis_ai.is_osmosis_ai(components.workflow, "AgentWorkflow") or (
        components.grader is not None and _osmosis_ai.is_osmosis_ai(components.grader, "Grader")
    )


def backend_for(components: Components, **options: Any) -> LocalBackend:
    """The in-process backend of these classes: ``OsmosisAiBackend`` if any is osmosis_ai's.

    ``options`` are ``LocalBackend``'s other keyword arguments (``artifact_root``).
    """
    kind = OsmosisAiBackend if uses_osmosis_ai(components) else LocalBackend
    return kind(
        workflow=components.workflow,
        workflow_config=components.workflow_config,
        grader=components.grader,
        grader_config=components.grader_config,
        **options,
    )


class _Sdk:
    """The osmosis_ai modules the adapter uses, taken from ``sys.modules`` (never imported)."""

    def __init__(self) -> None:
        self.context = _loaded("osmosis_ai.rollout.context")
        self.types = _loaded("osmosis_ai.rollout.types")
        self.output = _loaded("osmosis_ai.rollout.types.output")
        self.errors = sys.modules.get("osmosis_ai.rollout.utils.errors")
        self.rewards = sys.modules.get("osmosis_ai.rollout.utils.rewards")


def _loaded(name: str) -> ModuleType:
    found = sys.modules.get(name)
    if found is None:
        # A class subclassing osmosis_ai's has loaded osmosis_ai.rollout, and with it these.
        raise ConfigError(f"osmosis_ai is not loaded ({name}); install osmosis-ai")
    return found


class OsmosisAiBackend(LocalBackend):
    """``LocalBackend`` for osmosis_ai classes: their context objects, ambient context, rules.

    Takes the keyword arguments of ``LocalBackend``; each class may be ours or osmosis_ai's.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._sdk = _Sdk()
        self._their_workflow = _osmosis_ai.is_osmosis_ai(self.workflow_cls, "AgentWorkflow")
        self._their_grader = self.grader_cls is not None and _osmosis_ai.is_osmosis_ai(
            self.grader_cls, "Grader"
        )

    async def run_workflow(self, request: ExecutionRequest) -> ExecutionResult:
        """Run the workflow as osmosis-ai's LocalBackend would (ours: as ``LocalBackend``)."""
        if not self._their_workflow:
            return await super().run_workflow(request)
        sdk = self._sdk
        config = copy.deepcopy(self.workflow_config)
        ctx = sdk.context.AgentWorkflowContext(
            prompt=json_copy(request.prompt),
            config=config,
            metadata=json_copy(request.metadata),
            artifacts_dir=self._workflow_artifacts_dir(request.id),
        )
        ours = _rollout_context(request.id)
        try:
            with (
                ours,
                _osmosis_ai.ambient(
                    rollout_id=request.id,
                    chat_completions_url=ours.chat_completions_url,
                    api_key=ours.api_key,
                ) as theirs,
            ):
                output = sdk.output.coerce_output(await self.workflow_cls(config).run(ctx))
                sample = await self._their_sample(output, theirs, ours, request)
            converted = _osmosis_ai.sample_from_osmosis_ai(sample)
        except BaseException as exc:  # as in LocalBackend: one rollout's failure
            _reraise_if_cancelled(exc)
            return self._their_failure(exc, "workflow", request.id)
        return _success(converted)

    async def _their_sample(
        self, output: Any, theirs: Any, ours: Any, request: ExecutionRequest
    ) -> Any:
        """osmosis-ai's rule: the output's messages, else the registered source's sample."""
        if output is None:
            if theirs.sample_source is None and ours.sample_source is not None:
                return _to_theirs(self._sdk, await ours.get_sample())  # our source, their class
            return await theirs.get_sample()
        if output.messages is None:
            return None
        return self._sdk.types.RolloutSample(
            messages=output.messages, label=request.label, metrics=dict(output.metrics)
        )

    async def run_grader(
        self, request: ExecutionRequest, workflow: ExecutionResult
    ) -> ExecutionResult:
        """Grade as osmosis-ai's LocalBackend would (ours: as ``LocalBackend``)."""
        if not self._their_grader:
            return await super().run_grader(request, workflow)
        assert self.grader_cls is not None  # _their_grader says so
        sdk = self._sdk
        ctx = sdk.context.GraderContext(
            label=request.label,
            sample=_to_theirs(sdk, workflow.sample),
            metadata=json_copy(request.metadata),
            artifacts_dir=self._grader_artifacts_dir(request.id),
        )
        try:
            await self.grader_cls(self.grader_config).grade(ctx)
            _check_their_reward(sdk, ctx.sample)
            graded = _osmosis_ai.sample_from_osmosis_ai(ctx.sample)
        except BaseException as exc:  # as in LocalBackend: one rollout's failure
            _reraise_if_cancelled(exc)
            sample = _best_effort_sample(ctx.sample, workflow.sample)
            return self._their_failure(exc, "grader", request.id, sample)
        return _success(graded)

    def _their_failure(
        self,
        exc: BaseException,
        stage: str,
        rollout_id: str,
        sample: RolloutSample | None = None,
    ) -> ExecutionResult:
        """Our failure record, with osmosis_ai's category for the exception."""
        result = _failure(exc, stage, rollout_id, sample=sample)
        categorize = getattr(self._sdk.errors, "categorize_exception", None)
        if isinstance(exc, Exception) and categorize is not None:
            result.err_category = RolloutErrorCategory(str(categorize(exc).value))
        return result


def _to_theirs(sdk: _Sdk, sample: RolloutSample | None) -> Any:
    """Our sample as osmosis_ai's ``RolloutSample`` (its own copy, for their grader)."""
    if sample is None:
        return None
    if not isinstance(sample, RolloutSample):
        return sample  # theirs already
    return sdk.types.RolloutSample.model_validate(sample.model_dump())


def _check_their_reward(sdk: _Sdk, sample: Any) -> None:
    check = getattr(sdk.rewards, "validate_sample_has_reward", None)
    if check is not None:
        check(sample)
        return
    if sample is None:
        raise ValueError("No sample to grade.")
    if not sample.remove_sample and sample.reward is None:
        raise ValueError("Sample has no reward after grading")


def _best_effort_sample(theirs: Any, fallback: RolloutSample | None) -> RolloutSample | None:
    """The grader's sample as ours for a failure record; the workflow's if it cannot convert."""
    try:
        return _osmosis_ai.sample_from_osmosis_ai(theirs)
    except ValueError:  # pydantic's ValidationError included: a grader left a bad value
        return fallback


def refuse_elsewhere(plan: Plan) -> None:
    """A module-level ``ExecutionBackend`` runs its rollouts itself, from this process only.

    Raises:
        ConfigError: the plan asks for worker processes or Ray for one.
    """
    option = plan.settings.execution.backend
    if option != "local":
        refuse_option(
            plan.local_components().workflow, plan.settings.run.workflow, f"--backend {option}"
        )


def refuse_option(workflow: type, path: str | None, option: str) -> None:
    """Refuse ``option`` (one that runs rollouts elsewhere: eval's ``--backend processes|ray``,
    serve's ``--workers``) when ``workflow`` stands for a module-level ``ExecutionBackend``.

    Raises:
        ConfigError: it does.
    """
    backend = _osmosis_ai.execution_backend(workflow)
    if backend is not None:
        raise ConfigError(
            f"{path} is an osmosis_ai {type(backend).__name__}, which runs its rollouts "
            f"itself from this process; drop {option}"
        )


def osmosis_ai_executor(plan: Plan) -> OsmosisAiExecutor | BackendExecutor:
    """The executor of a plan whose workflow or grader comes from osmosis_ai: a
    ``BackendExecutor`` when the workflow stands for a module-level ``ExecutionBackend``.

    Raises:
        ConfigError: a grader given beside such a backend (it grades its own rollouts).
    """
    parts = plan.local_components()
    found = backend_executor(
        parts.workflow, parts.grader, path=plan.settings.run.workflow, run_dir=plan.run_dir
    )
    return found if found is not None else OsmosisAiExecutor.from_plan(plan)


def backend_executor(
    workflow: type, grader: type | None, *, path: str | None, run_dir: Path
) -> BackendExecutor | None:
    """The ``BackendExecutor`` of the module-level ``ExecutionBackend`` that ``workflow``
    (loaded from ``path``) stands for, its rollouts' files going to ``run_dir``; None when it
    stands for none.

    Raises:
        ConfigError: a grader given beside such a backend (it grades its own rollouts).
    """
    backend = _osmosis_ai.execution_backend(workflow)
    if backend is None:
        return None
    if grader is not None:
        raise ConfigError(
            f"{path} is an osmosis_ai {type(backend).__name__}, "
            "which grades its own rollouts; drop --grader"
        )
    return BackendExecutor(backend, run_dir=run_dir)


class OsmosisAiExecutor(LocalExecutor):
    """``LocalExecutor`` over ``OsmosisAiBackend``: osmosis_ai classes in this process."""

    @classmethod
    def from_plan(cls, plan: Plan) -> OsmosisAiExecutor:
        """The executor of a plan whose workflow or grader comes from osmosis_ai."""
        parts = plan.local_components()
        return cls(
            OsmosisAiBackend(
                workflow=parts.workflow,
                workflow_config=parts.workflow_config,
                grader=parts.grader,
                grader_config=parts.grader_config,
                artifact_root=(plan.run_dir / ROLLOUTS).absolute(),
            )
        )


class BackendExecutor:
    """Whole rollouts run by an osmosis_ai ``ExecutionBackend``'s ``execute`` (a HarborBackend).

    Args:
        backend: the module-level backend object.
        run_dir: the run directory; each rollout's files go to its ``artifacts`` folder.
    """

    def __init__(self, backend: Any, *, run_dir: Path) -> None:
        self.backend = backend
        self._rollouts = (run_dir / ROLLOUTS).absolute()
        self._scratch: Path | None = None
        self._made_at_import: Path | None = None

    @property
    def limit(self) -> int | None:
        """The backend's own bound on trials at once (its orchestrator's), else 4."""
        queue = getattr(self.backend, "orchestrator", None)
        found = getattr(queue, "_n_concurrent", None)  # harbor's TrialQueue (tests pin it)
        return found if isinstance(found, int) and found > 0 else DEFAULT_MAX_CONCURRENT

    @property
    def local_artifacts(self) -> bool:
        """Always: the executor moves each rollout's files into the run directory."""
        return True

    async def open(self) -> None:
        """Check a HarborBackend's setup; give the backend scratch folders of this run.

        Raises:
            BackendError: harbor, Docker, Compose or an image is missing (harbor_checks.py);
                what the backend's constructor made in /tmp is removed then.
        """
        staging = getattr(self.backend, "rollouts_dir", None)  # HarborBackend's, in /tmp
        if isinstance(staging, Path):
            self._made_at_import = staging
        if harbor_checks.is_harbor(self.backend):
            try:
                await harbor_checks.check_harbor(self.backend)
            except BaseException:
                self._remove_made_at_import()
                raise
        self._scratch = Path(tempfile.mkdtemp(prefix="osmosis-run-backend-"))
        if isinstance(staging, Path):
            self.backend.rollouts_dir = self._scratch / "rollouts"
            self.backend.rollouts_dir.mkdir()
            if getattr(self.backend, "trials_dir", None) == staging.parent / "trials":
                self.backend.trials_dir = self._scratch / "trials"  # its default: ours too
        if hasattr(self.backend, "artifact_root"):
            self.backend.artifact_root = self._scratch / "artifacts"  # not ~/.osmosis

    async def close(self) -> None:
        """Let the backend finish (a HarborBackend stops its containers); remove the scratch."""
        shutdown = getattr(self.backend, "shutdown", None)
        if callable(shutdown) and getattr(self.backend, "executions", None):
            await shutdown()  # trials still stopping (an interrupt): wait for their cleanup
        if harbor_checks.is_harbor(self.backend):
            await harbor_checks.finish_cleanup(self._scratch)
        if self._scratch is not None:
            await asyncio.to_thread(shutil.rmtree, self._scratch, True)
            self._scratch = None
        self._remove_made_at_import()

    def _remove_made_at_import(self) -> None:
        """Remove what a HarborBackend's constructor made in /tmp, if empty."""
        made, self._made_at_import = self._made_at_import, None
        if made is not None and made.parent.name.startswith("osmosis-harbor-"):
            for folder in (made, made.parent):
                try:
                    folder.rmdir()
                except OSError:
                    break  # not empty: another process's

    def adopt_artifacts_dirs(self, rollout_ids: Iterable[str]) -> None:
        """Nothing to adopt: the rollout's files are moved in when it ends."""

    async def run(self, attempt: Attempt, deadlines: Deadlines) -> AttemptResult:
        """The backend's ``execute``, within the agent and grader timeouts plus a margin."""
        request = attempt.request
        started = time.perf_counter()
        seconds = _bound(request.agent_timeout_sec, request.grader_timeout_sec)
        work = self._execute(attempt)
        if seconds is None:
            outcome = await work
        else:
            outcome = await deadlines.within(
                "rollout",
                seconds,
                work,
                rollout_id=request.id,
                timed_out=lambda: ExecutionOutcome(workflow=timed_out("rollout", seconds, None)),
            )
        await asyncio.to_thread(self._collect, request.id)
        elapsed = (time.perf_counter() - started) * 1000
        grader_ms = _verifier_ms(outcome) if outcome.grader is not None else None
        return AttemptResult(outcome, elapsed - (grader_ms or 0.0), grader_ms)

    async def _execute(self, attempt: Attempt) -> ExecutionOutcome:
        request = attempt.request
        sdk = _loaded("osmosis_ai.rollout.types")
        theirs = sdk.ExecutionRequest(
            id=request.id,
            prompt=json_copy(request.prompt),
            label=request.label,
            metadata=json_copy(request.metadata),
            agent_timeout_sec=request.agent_timeout_sec,
            grader_timeout_sec=request.grader_timeout_sec,
            grade=request.grade,
        )
        with (
            attempt.context as ours,
            _osmosis_ai.ambient(
                rollout_id=request.id,
                chat_completions_url=ours.chat_completions_url,
                api_key=ours.api_key,
            ),
        ):
            outcome = await self.backend.execute(theirs)
        return ExecutionOutcome(
            workflow=_result_from_theirs(outcome.workflow),
            grader=None if outcome.grader is None else _result_from_theirs(outcome.grader),
        )

    def _collect(self, rollout_id: str) -> None:
        """Move what the backend wrote for the rollout into its ``artifacts`` folder: the
        trial's own artifacts at the top, Harbor's record beside them (``harbor/``: its
        result, its logs and the verifier's reward file; else its retained ``logs/``)."""
        if self._scratch is None:
            return
        source = self._scratch / "artifacts" / rollout_id
        if not source.is_dir():
            return
        target = self._rollouts / rollout_id / ARTIFACTS
        target.mkdir(parents=True, exist_ok=True)
        for entry in sorted(source.iterdir()):
            if entry.name == "logs" and (source / "harbor" / "logs").is_dir():
                continue  # the same logs as harbor/logs
            inner = entry.iterdir() if entry.name == ARTIFACTS and entry.is_dir() else [entry]
            for item in inner:
                destination = target / item.name
                if destination.exists():
                    shutil.rmtree(destination) if destination.is_dir() else destination.unlink()
                shutil.move(item, destination)
        shutil.rmtree(source, ignore_errors=True)


def _bound(agent: float | None, grader: float | None) -> float | None:
    """How long a whole rollout may take: None unless the request has a timeout."""
    if agent is None and grader is None:
        return None
    return max(agent or 0.0, 0.0) + max(grader or 0.0, 0.0) + DEADLINE_MARGIN_S


def _verifier_ms(outcome: ExecutionOutcome) -> float | None:
    """How long the backend's grading took, from the timings it reports (Harbor's)."""
    extra = outcome.grader.extra_fields if outcome.grader is not None else None
    timings = extra.get("timings_sec") if extra else None
    seconds = timings.get("verifier") if isinstance(timings, dict) else None
    return float(seconds) * 1000 if isinstance(seconds, (int, float)) else None


def _result_from_theirs(result: Any) -> ExecutionResult:
    """osmosis_ai's ``ExecutionResult`` as ours, field for field."""
    category = getattr(result, "err_category", None)
    extra = getattr(result, "extra_fields", None)
    return ExecutionResult(
        status=RolloutStatus(str(getattr(result.status, "value", result.status))),
        sample=_osmosis_ai.sample_from_osmosis_ai(result.sample),
        err_message=result.err_message,
        err_category=None
        if category is None
        else RolloutErrorCategory(str(getattr(category, "value", category))),
        extra_fields=dict(extra) if extra else None,
    )
