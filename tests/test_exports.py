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
