"""Loading accepts osmosis_ai's classes by looking in ``sys.modules``, never by importing it.

The real package is exercised by tests/interop (Python 3.12); here a stand-in module plays
``osmosis_ai.rollout.agent_workflow``, which is all the loader looks at.
"""

from __future__ import annotations

import sys
import types
from abc import ABC, abstractmethod
from typing import Any, cast

import pytest

from osmosis_run import AgentWorkflow, AgentWorkflowConfig
from osmosis_run.errors import WrongKindError
from osmosis_run.sdk import _osmosis_ai
from osmosis_run.sdk.loading import load_class, load_instance


class TheirWorkflow(ABC):
    """Stands for osmosis_ai.rollout.agent_workflow.AgentWorkflow."""

    @abstractmethod
    async def run(self, ctx: Any) -> Any: ...


class TheirConfig:
    """Stands for osmosis_ai.rollout.types.config.AgentWorkflowConfig."""


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    workflow = types.ModuleType("osmosis_ai.rollout.agent_workflow")
    workflow.AgentWorkflow = TheirWorkflow  # type: ignore[attr-defined]
    config = types.ModuleType("osmosis_ai.rollout.types.config")
    config.AgentWorkflowConfig = TheirConfig  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "osmosis_ai.rollout.agent_workflow", workflow)
    monkeypatch.setitem(sys.modules, "osmosis_ai.rollout.types.config", config)


class Theirs(TheirWorkflow):
    async def run(self, ctx: Any) -> Any:
        return None


@pytest.mark.skipif("osmosis_ai" in sys.modules, reason="the interop suite loaded osmosis_ai")
def test_without_osmosis_ai_loaded_its_classes_are_not_ours() -> None:
    assert _osmosis_ai.counterpart(AgentWorkflow) is None
    with pytest.raises(WrongKindError) as caught:
        load_class(cast(Any, Theirs), AgentWorkflow, role="--workflow")
    assert str(caught.value) == (
        "--workflow Theirs is the class Theirs, expected a subclass of AgentWorkflow"
    )


@pytest.mark.usefixtures("stand_in")
def test_with_osmosis_ai_loaded_its_subclasses_and_configs_load() -> None:
    assert _osmosis_ai.counterpart(AgentWorkflow) is TheirWorkflow
    assert load_class(cast(Any, Theirs), AgentWorkflow, role="--workflow") is Theirs
    config = TheirConfig()
    assert load_instance(config, AgentWorkflowConfig, role="--workflow-config") is config
    assert _osmosis_ai.is_osmosis_ai(Theirs, "AgentWorkflow")
    assert not _osmosis_ai.is_osmosis_ai(Theirs, "Grader")  # its module is not loaded


@pytest.mark.usefixtures("stand_in")
def test_an_abstract_osmosis_ai_class_is_still_refused() -> None:
    with pytest.raises(WrongKindError) as caught:
        load_class(cast(Any, TheirWorkflow), AgentWorkflow, role="--workflow")
    assert str(caught.value) == "--workflow TheirWorkflow is abstract: implement run"
