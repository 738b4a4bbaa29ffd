"""Living beside osmosis-ai: its classes, outputs, samples and ambient context, when it is loaded.

osmosis-ai stays optional: nothing here imports it. Each helper looks in ``sys.modules`` for the
osmosis_ai module it needs; a user's class or object that comes from osmosis_ai has loaded that
module already, and when it is not loaded no object can come from it. So a run of plain
osmosis_run code never pays for (or needs) osmosis-ai.

- ``counterpart(base)``: osmosis_ai's class standing for one of ours (``AgentWorkflow``,
  ``Grader``, the configs), so loading accepts either.
- ``from_osmosis_ai(value)``: an osmosis_ai ``AgentWorkflowOutput`` or ``RolloutSample`` as ours.
- ``ambient(ctx)``: osmosis_ai's ambient ``RolloutContext`` entered beside ours, so osmosis_ai's
  integrations (the LiteLLM model, the OpenAI Agents and Strands agents), used from an
  osmosis_run workflow, find the rollout's endpoint and register their sample source.
- ``backend_workflow(backend, path)``: the workflow class that stands for a module-level
  osmosis_ai ``ExecutionBackend`` other than ``LocalBackend`` (a ``HarborBackend``), so that the
  run loads, fingerprints and resumes it as any workflow; its ``execution_backend`` is the
  backend, which runs whole rollouts itself (backends/osmosis_ai.py).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from osmosis_run.sdk.types import AgentWorkflowOutput, RolloutSample

__all__ = [
    "ambient",
    "backend_workflow",
    "counterpart",
    "execution_backend",
    "from_osmosis_ai",
    "harbor_problem",
    "is_osmosis_ai",
    "loaded",
    "module",
]

# Our class name -> the osmosis_ai module that defines the class of the same name.
_HOMES = {
    "AgentWorkflow": "osmosis_ai.rollout.agent_workflow",
    "Grader": "osmosis_ai.rollout.grader",
    "BaseConfig": "osmosis_ai.rollout.types.config",
    "AgentWorkflowConfig": "osmosis_ai.rollout.types.config",
    "GraderConfig": "osmosis_ai.rollout.types.config",
    "AgentWorkflowOutput": "osmosis_ai.rollout.types.output",
    "RolloutSample": "osmosis_ai.rollout.types.sample",
    "LocalBackend": "osmosis_ai.rollout.backend.local.backend",
    "ExecutionBackend": "osmosis_ai.rollout.backend.base",
}


def module(name: str) -> ModuleType | None:
    """The osmosis_ai module ``name`` if something imported it already, else None."""
    return sys.modules.get(name)


def loaded() -> bool:
    """Whether osmosis_ai's rollout SDK is loaded in this process."""
    return "osmosis_ai.rollout.context" in sys.modules


def counterpart(base: type) -> type | None:
    """osmosis_ai's class of the same role as our ``base``, when osmosis_ai is loaded."""
    home = _HOMES.get(base.__name__)
    found = getattr(module(home), base.__name__, None) if home else None
    return found if isinstance(found, type) else None


def is_osmosis_ai(obj: object, name: str) -> bool:
    """Whether ``obj`` is a subclass (a class) or an instance of osmosis_ai's class ``name``."""
    home = _HOMES.get(name)
    cls = getattr(module(home), name, None) if home else None
    if not isinstance(cls, type):
        return False
    if isinstance(obj, type):
        return issubclass(obj, cls)
    return isinstance(obj, cls)


# osmosis-ai 0.3.8's `harbor` extra pins harbor>=0.20,<0.25; harbor 0.25 breaks its import
# (`resolve_agent_phase_policy`).
HARBOR_RANGE = ((0, 20), (0, 25))


def harbor_problem() -> str | None:
    """What is wrong with the installed ``harbor`` for osmosis-ai's HarborBackend (None: fine,
    or not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("harbor")
    except PackageNotFoundError:
        return None
    parts = tuple(int(p) for p in found.split(".")[:2] if p.isdigit())
    (low, high) = HARBOR_RANGE
    if len(parts) == 2 and low <= parts < high:
        return None
    return (
        f"harbor {found} is installed; osmosis-ai 0.3.8's HarborBackend needs harbor>=0.20,<0.25: "
        'pip install "harbor>=0.24,<0.25"'
    )


def execution_backend(obj: object) -> Any | None:
    """The osmosis_ai ``ExecutionBackend`` a class stands for (``backend_workflow``), else None."""
    return getattr(obj, "execution_backend", None) if isinstance(obj, type) else None


def backend_workflow(backend: Any, path: str) -> type:
    """A workflow class standing for ``backend``, an osmosis_ai ``ExecutionBackend`` instance.

    It is named after ``path`` (``"module:attr"``) and lives in that module (so the run's
    fingerprint hashes the module's source). Only an executor that calls the backend's
    ``execute`` runs it; anywhere else (a worker process, a rollout server given no such
    executor) its ``run`` fails the rollout with a message saying so.
    """
    from osmosis_run.sdk.workflow import AgentWorkflow  # here: sdk.workflow imports sdk.types

    kind = type(backend).__name__

    async def run(_self: Any, _ctx: Any) -> None:
        raise TypeError(
            f"{path} is an osmosis_ai {kind}: it runs whole rollouts itself, and only "
            "osmosis-run eval and serve (in their own process, no --backend processes/ray, "
            "no --workers) run it"
        )

    module_name, _, attr = path.partition(":")
    return type(
        attr.replace(".", "_"),
        (AgentWorkflow,),
        {
            "__module__": module_name,
            "__doc__": f"Stands for {path}, an osmosis_ai {kind}.",
            "execution_backend": backend,
            "run": run,
        },
    )


def from_osmosis_ai(value: Any) -> Any:
    """An osmosis_ai ``AgentWorkflowOutput`` or ``RolloutSample`` as ours; anything else as is.

    Raises:
        pydantic.ValidationError: the value does not fit our model (a non-finite metric).
    """
    if is_osmosis_ai(value, "AgentWorkflowOutput"):
        return AgentWorkflowOutput.model_validate(
            {"messages": value.messages, "metrics": value.metrics, "info": value.info}
        )
    if is_osmosis_ai(value, "RolloutSample"):
        return sample_from_osmosis_ai(value)
    return value


def sample_from_osmosis_ai(sample: Any) -> RolloutSample | None:
    """osmosis_ai's ``RolloutSample`` (or None) as ours, field for field."""
    if sample is None:
        return None
    trajectory = sample.trajectory_messages
    return RolloutSample.model_validate(
        {
            "messages": [dict(m) for m in sample.messages],
            "trajectory_messages": None if trajectory is None else [dict(m) for m in trajectory],
            "label": sample.label,
            "reward": sample.reward,
            "remove_sample": sample.remove_sample,
            "metrics": dict(sample.metrics),
            "extra_fields": dict(sample.extra_fields),
        }
    )


@contextlib.contextmanager
def ambient(*, rollout_id: str, chat_completions_url: str, api_key: str | None) -> Iterator[Any]:
    """Enter osmosis_ai's ambient ``RolloutContext`` for one rollout; yield it (None if unloaded).

    osmosis_ai's ``__exit__`` clears its context variable rather than restoring the one
    before, so the one before is put back here: a rollout inside another keeps its outer one.
    """
    context_module = module("osmosis_ai.rollout.context")
    if context_module is None:
        yield None
        return
    var = context_module.rollout_contextvar
    ctx = context_module.RolloutContext(
        chat_completions_url=chat_completions_url, api_key=api_key, rollout_id=rollout_id
    )
    token = var.set(ctx)
    try:
        yield ctx
    finally:
        var.reset(token)
