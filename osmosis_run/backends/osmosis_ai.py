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

This module never imports osmosis_ai: it is used only for classes that come from it, and their
import has loaded it already.
"""

from __future__ import annotations

import copy
import sys
from types import ModuleType
from typing import Any

from osmosis_run.backends.local import LocalExecutor
from osmosis_run.errors import ConfigError
from osmosis_run.run.components import Components
from osmosis_run.run.plan import Plan
from osmosis_run.sdk import _osmosis_ai
from osmosis_run.sdk.backend import (
    LocalBackend,
    _failure,
    _reraise_if_cancelled,
    _rollout_context,
    _success,
)
from osmosis_run.sdk.types import (
    ExecutionRequest,
    ExecutionResult,
    RolloutErrorCategory,
    RolloutSample,
    json_copy,
)
from osmosis_run.store.layout import ROLLOUTS

__all__ = ["OsmosisAiBackend", "OsmosisAiExecutor", "backend_for", "uses_osmosis_ai"]


def uses_osmosis_ai(components: Components) -> bool:
    """Whether the workflow or the grader subclasses osmosis_ai's classes."""
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
