"""``"module:attr"`` loading, through LocalBackend (the user's view) and the loader itself."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    ExecutionRequest,
    Grader,
    GraderConfig,
    LocalBackend,
    RolloutStatus,
)
from osmosis_run.errors import (
    AttributeNotFoundError,
    ImportPathError,
    LoadError,
    ModuleNotFoundLoadError,
    OsmosisRunError,
    UserModuleImportError,
    WrongKindError,
)
from osmosis_run.sdk.loading import import_from_string, load_class, load_instance

FIXTURES = Path(__file__).parent / "sdk_fixtures"
HOW_TO_FIX = "check the spelling, install the package, or run from the folder that holds it"


@pytest.fixture(autouse=True)
def fixture_modules(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Make ``sdk_fixtures`` importable; forget every ``sdkfx_*`` module afterwards."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("OSMOSIS_ARTIFACT_ROOT", str(tmp_path / "artifacts"))
    yield
    for name in [name for name in sys.modules if name.startswith("sdkfx_")]:
        del sys.modules[name]


def components() -> Any:
    return importlib.import_module("sdkfx_components")


def echo_workflow() -> type[AgentWorkflow[Any]]:
    workflow: type[AgentWorkflow[Any]] = components().EchoWorkflow
    return workflow


def load_error(**kwargs: Any) -> LoadError:
    with pytest.raises(LoadError) as exc:
        LocalBackend(**kwargs)
    return exc.value


# --- what loads ---------------------------------------------------------------------------


def test_strings_load_classes_and_config_instances() -> None:
    backend = LocalBackend(
        workflow="sdkfx_components:EchoWorkflow",
        workflow_config="sdkfx_components:echo_config",
        grader="sdkfx_components:ExactGrader",
        grader_config="sdkfx_components:exact_config",
    )
    module = components()
    assert backend.workflow_cls is module.EchoWorkflow
    assert backend.workflow_config is module.echo_config
    assert backend.grader_cls is module.ExactGrader
    assert backend.grader_config is module.exact_config


def test_string_loaded_backend_runs() -> None:
    backend = LocalBackend(
        workflow="sdkfx_components:EchoWorkflow",
        workflow_config="sdkfx_components:echo_config",
        grader="sdkfx_components:ExactGrader",
    )
    request = ExecutionRequest(id="r", prompt=[{"role": "user", "content": "hi"}], label="hi?")
    outcome = asyncio.run(backend.execute(request))
    assert outcome.result.status == RolloutStatus.SUCCESS
    assert outcome.result.sample is not None
    assert outcome.result.sample.reward == 1.0


def test_objects_are_taken_as_they_are() -> None:
    module = components()
    config = AgentWorkflowConfig(name="direct")
    backend = LocalBackend(
        workflow=module.EchoWorkflow, workflow_config=config, grader=module.ExactGrader
    )
    assert backend.workflow_cls is module.EchoWorkflow
    assert backend.workflow_config is config
    assert backend.grader_cls is module.ExactGrader
    assert (backend.grader_config, LocalBackend(workflow=module.EchoWorkflow).grader_cls) == (
        None,
        None,
    )


def test_dotted_attribute_path() -> None:
    assert import_from_string("sdkfx_components:Namespace.Workflow") is components().EchoWorkflow


def test_empty_config_string_means_no_config() -> None:
    backend = LocalBackend(workflow="sdkfx_components:EchoWorkflow", workflow_config="")
    assert (backend.workflow_config, backend.max_concurrent) == (None, 4)


def test_module_file_in_the_current_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "sdkfx_cwd_rollout.py").write_text(
        "from osmosis_run import AgentWorkflow\n"
        "\n"
        "class HereWorkflow(AgentWorkflow):\n"
        "    async def run(self, ctx):\n"
        "        return [{'role': 'assistant', 'content': 'here'}]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("")
    backend = LocalBackend(workflow="sdkfx_cwd_rollout:HereWorkflow")
    assert backend.workflow_cls.__module__ == "sdkfx_cwd_rollout"
    outcome = asyncio.run(backend.execute(ExecutionRequest(id="r", prompt=[])))
    assert outcome.result.sample is not None
    assert outcome.result.sample.messages == [{"role": "assistant", "content": "here"}]


# --- malformed paths ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["sdkfx_components.EchoWorkflow", ":EchoWorkflow", "sdkfx_components:", "a:b:c", ""]
)
def test_malformed_path(path: str) -> None:
    error = load_error(workflow=path)
    assert type(error) is ImportPathError
    assert isinstance(error, ValueError)
    assert str(error) == (
        f'invalid import path "{path}": expected "module:attr", for example "my_rollout:MyWorkflow"'
    )


# --- modules ------------------------------------------------------------------------------


def test_module_not_found() -> None:
    error = load_error(workflow="sdkfx_no_such_module:Workflow")
    assert type(error) is ModuleNotFoundLoadError
    assert str(error) == (
        'cannot import "sdkfx_no_such_module:Workflow": '
        f'no module named "sdkfx_no_such_module"; {HOW_TO_FIX}'
    )
    assert error.__cause__ is None


def test_submodule_not_found() -> None:
    error = load_error(workflow="sdkfx_components.sub:Workflow")
    assert type(error) is ModuleNotFoundLoadError
    assert str(error) == (
        'cannot import "sdkfx_components.sub:Workflow": '
        f'no module named "sdkfx_components.sub"; {HOW_TO_FIX}'
    )


def test_import_error_inside_the_user_module_surfaces_as_itself() -> None:
    error = load_error(workflow="sdkfx_raises_import_error:Workflow")
    assert type(error) is UserModuleImportError
    assert str(error) == (
        'importing "sdkfx_raises_import_error" (for "sdkfx_raises_import_error:Workflow") '
        "raised ImportError: sdkfx_raises_import_error needs the 'frobnicate' extra"
    )
    assert type(error.__cause__) is ImportError
    assert str(error.__cause__) == "sdkfx_raises_import_error needs the 'frobnicate' extra"


def test_missing_dependency_of_the_user_module_is_not_module_not_found() -> None:
    error = load_error(grader="sdkfx_missing_dependency:Grader", workflow=echo_workflow())
    assert type(error) is UserModuleImportError
    assert str(error) == (
        'importing "sdkfx_missing_dependency" (for "sdkfx_missing_dependency:Grader") '
        "raised ModuleNotFoundError: No module named 'sdkfx_dependency_that_is_not_installed'"
    )
    assert isinstance(error.__cause__, ModuleNotFoundError)
    assert error.__cause__.name == "sdkfx_dependency_that_is_not_installed"


def test_other_exception_at_import_time() -> None:
    error = load_error(workflow="sdkfx_raises_runtime_error:Workflow")
    assert type(error) is UserModuleImportError
    assert str(error) == (
        'importing "sdkfx_raises_runtime_error" (for "sdkfx_raises_runtime_error:Workflow") '
        "raised RuntimeError: database URL is not configured"
    )
    assert type(error.__cause__) is RuntimeError


# --- attributes ---------------------------------------------------------------------------


def test_missing_attribute_suggests_the_close_name() -> None:
    error = load_error(workflow="sdkfx_components:EchoWorkflw")
    assert type(error) is AttributeNotFoundError
    assert str(error) == (
        'cannot import "sdkfx_components:EchoWorkflw": '
        '"sdkfx_components" has no attribute "EchoWorkflw"; did you mean "EchoWorkflow"?'
    )


def test_missing_attribute_without_a_close_name() -> None:
    error = load_error(workflow="sdkfx_components:Zzz")
    assert str(error) == (
        'cannot import "sdkfx_components:Zzz": "sdkfx_components" has no attribute "Zzz"'
    )


def test_missing_nested_attribute_names_its_owner() -> None:
    error = load_error(workflow="sdkfx_components:Namespace.Workflw")
    assert type(error) is AttributeNotFoundError
    assert str(error) == (
        'cannot import "sdkfx_components:Namespace.Workflw": '
        '"sdkfx_components:Namespace" has no attribute "Workflw"; did you mean "Workflow"?'
    )


def test_attribute_that_is_none_counts_as_missing() -> None:
    error = load_error(workflow="sdkfx_components:NOTHING")
    assert type(error) is AttributeNotFoundError
    assert (
        str(error)
        == 'cannot import "sdkfx_components:NOTHING": "NOTHING" in "sdkfx_components" is None'
    )


# --- wrong kinds --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"grader": "sdkfx_components:grade_function"},
            'grader "sdkfx_components:grade_function" is a function, expected a subclass of Grader',
        ),
        (
            {"grader": "sdkfx_components:EchoWorkflow"},
            'grader "sdkfx_components:EchoWorkflow" is the class EchoWorkflow, '
            "expected a subclass of Grader",
        ),
        ({"grader": Grader}, "grader Grader is abstract: implement grade"),
        (
            {"workflow_config": "sdkfx_components:EchoConfig"},
            'workflow_config "sdkfx_components:EchoConfig" is the class EchoConfig, '
            "expected an instance of AgentWorkflowConfig; instantiate it in your module",
        ),
        (
            {"workflow_config": "sdkfx_components:exact_config"},
            'workflow_config "sdkfx_components:exact_config" is an instance of GraderConfig, '
            "expected an instance of AgentWorkflowConfig",
        ),
        (
            {"grader_config": AgentWorkflowConfig(name="not a grader config")},
            "grader_config is an instance of AgentWorkflowConfig, "
            "expected an instance of GraderConfig",
        ),
    ],
)
def test_wrong_kind_of_object(kwargs: dict[str, Any], message: str) -> None:
    error = load_error(workflow=echo_workflow(), **kwargs)
    assert type(error) is WrongKindError
    assert isinstance(error, TypeError)
    assert str(error) == message


@pytest.mark.parametrize(
    ("workflow", "message"),
    [
        (
            "sdkfx_components:ExactGrader",
            'workflow "sdkfx_components:ExactGrader" is the class ExactGrader, '
            "expected a subclass of AgentWorkflow",
        ),
        (
            "sdkfx_components:echo_config",
            'workflow "sdkfx_components:echo_config" is an instance of EchoConfig, '
            "expected a subclass of AgentWorkflow",
        ),
        (
            "sdkfx_components:grade_function",
            'workflow "sdkfx_components:grade_function" is a function, '
            "expected a subclass of AgentWorkflow",
        ),
        (AgentWorkflow, "workflow AgentWorkflow is abstract: implement run"),
        (3, "workflow is an instance of int, expected a subclass of AgentWorkflow"),
    ],
)
def test_wrong_kind_of_workflow(workflow: object, message: str) -> None:
    error = load_error(workflow=workflow)
    assert type(error) is WrongKindError
    assert str(error) == message


# --- the loader functions and the error tree ----------------------------------------------


def test_load_class_and_load_instance_return_what_they_checked() -> None:
    module = components()
    assert load_class("sdkfx_components:ExactGrader", Grader, role="grader") is module.ExactGrader
    config = load_instance("sdkfx_components:exact_config", GraderConfig, role="grader_config")
    assert config is module.exact_config


@pytest.mark.parametrize(
    "error_cls",
    [
        ImportPathError,
        ModuleNotFoundLoadError,
        UserModuleImportError,
        AttributeNotFoundError,
        WrongKindError,
    ],
)
def test_every_load_error_is_an_osmosis_run_error_and_an_import_error(
    error_cls: type[LoadError],
) -> None:
    assert issubclass(error_cls, LoadError)
    assert issubclass(error_cls, OsmosisRunError)
    assert issubclass(error_cls, ImportError)
    assert not issubclass(error_cls, KeyError)
