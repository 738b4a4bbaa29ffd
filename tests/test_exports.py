"""The public surface: exactly the ``osmosis_ai.rollout`` names and the error tree, nothing more."""

from __future__ import annotations

import importlib

import pytest

import osmosis_run

EXPECTED = [
    "AgentWorkflow",
    "AgentWorkflowConfig",
    "AgentWorkflowContext",
    "AgentWorkflowOutput",
    "AttributeNotFoundError",
    "BackendError",
    "BaseConfig",
    "ConcurrencyConfig",
    "ConfigError",
    "DatasetError",
    "ExecutionBackend",
    "ExecutionOutcome",
    "ExecutionRequest",
    "ExecutionResult",
    "FingerprintMismatchError",
    "Grader",
    "GraderConfig",
    "GraderContext",
    "ImportPathError",
    "InfrastructureError",
    "LoadError",
    "LocalBackend",
    "ModuleNotFoundLoadError",
    "OsmosisRunError",
    "RolloutContext",
    "RolloutErrorCategory",
    "RolloutSample",
    "RolloutStatus",
    "RunDirError",
    "SampleSource",
    "UserModuleImportError",
    "WrongKindError",
    "get_rollout_context",
]


def test_all_is_exactly_the_sorted_public_names() -> None:
    assert osmosis_run.__all__ == EXPECTED
    assert sorted(osmosis_run.__all__) == osmosis_run.__all__


@pytest.mark.parametrize("name", EXPECTED)
def test_each_public_name_is_importable_and_ours(name: str) -> None:
    obj = getattr(importlib.import_module("osmosis_run"), name)
    assert obj.__module__.startswith("osmosis_run.")
    assert obj.__name__ == name


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from osmosis_run import *", namespace)
    assert sorted(key for key in namespace if key != "__builtins__") == EXPECTED


# What the osmosis-ai 0.3.8 rollout scaffold (`osmosis rollout init`'s main.py) and the workspace
# templates (multiply-local-openai, multiply-local-strands) import from osmosis_ai.rollout and
# its submodules, in this project's scope. The import-line port of each is `from osmosis_run
# import NAME` (create_rollout_server: `from osmosis_run.server import ...`, the server's).
# The integrations (osmosis_ai.rollout.integrations.*) and HarborBackend do not port: they keep
# their osmosis_ai import, and run under osmosis-run (it enters osmosis_ai's RolloutContext).
TEMPLATE_NAMES = [
    "AgentWorkflow",  # osmosis_ai.rollout.agent_workflow
    "AgentWorkflowConfig",  # osmosis_ai.rollout.types
    "AgentWorkflowContext",  # osmosis_ai.rollout.context
    "Grader",  # osmosis_ai.rollout.grader
    "GraderConfig",  # osmosis_ai.rollout.types
    "GraderContext",  # osmosis_ai.rollout.context
    "LocalBackend",  # osmosis_ai.rollout.backend.local
    "get_rollout_context",  # osmosis_ai.rollout.context (the scaffold's comment shows it)
]


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_every_name_the_osmosis_templates_import_is_ours_too(name: str) -> None:
    assert name in osmosis_run.__all__
