"""The SDK data models: configs, enums, outputs, samples, requests and outcomes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from pydantic import Field, ValidationError

from osmosis_run import (
    AgentWorkflowConfig,
    AgentWorkflowOutput,
    BaseConfig,
    ConcurrencyConfig,
    ExecutionOutcome,
    ExecutionRequest,
    ExecutionResult,
    GraderConfig,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
)

MESSAGES = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
SEGMENT_ERROR = (
    "Value error, rollout_id must be a single path segment "
    "(no path separators, and not '.' or '..')"
)


def only_error(exc: pytest.ExceptionInfo[ValidationError]) -> dict[str, Any]:
    errors = exc.value.errors()
    assert len(errors) == 1
    return dict(errors[0])


# --- configs ------------------------------------------------------------------------------


@pytest.mark.parametrize("config_cls", [BaseConfig, AgentWorkflowConfig, GraderConfig])
def test_config_name_is_required(config_cls: type[BaseConfig]) -> None:
    with pytest.raises(ValidationError) as exc:
        config_cls()  # type: ignore[call-arg]
    error = only_error(exc)
    assert (error["type"], error["loc"], error["msg"]) == ("missing", ("name",), "Field required")


def test_config_keeps_extra_fields() -> None:
    config = AgentWorkflowConfig(name="x", foo=1)
    assert config.model_dump() == {
        "name": "x",
        "description": None,
        "concurrency": {"max_concurrent": None},
        "foo": 1,
    }


def test_config_validates_assignment() -> None:
    config = GraderConfig(name="g")
    with pytest.raises(ValidationError):
        config.name = 3  # type: ignore[assignment]
    assert config.name == "g"


def test_config_subclass_adds_typed_fields() -> None:
    class MyConfig(AgentWorkflowConfig):
        temperature: float = 0.0
        tools: list[str] = Field(default_factory=list)

    config = MyConfig(name="mine", temperature="0.5", concurrency={"max_concurrent": 3})
    assert (config.temperature, config.tools, config.concurrency.max_concurrent) == (0.5, [], 3)
    with pytest.raises(ValidationError):
        MyConfig(name="mine", temperature="hot")


@pytest.mark.parametrize("value", [0, -1])
def test_max_concurrent_below_one_is_rejected(value: int) -> None:
    with pytest.raises(ValidationError) as exc:
        ConcurrencyConfig(max_concurrent=value)
    error = only_error(exc)
    assert (error["loc"], error["msg"]) == (
        ("max_concurrent",),
        "Input should be greater than or equal to 1",
    )


def test_max_concurrent_defaults_to_unlimited() -> None:
    assert ConcurrencyConfig().max_concurrent is None
    assert ConcurrencyConfig(max_concurrent=1).max_concurrent == 1
    assert AgentWorkflowConfig(name="x").concurrency == ConcurrencyConfig(max_concurrent=None)


# --- enums --------------------------------------------------------------------------------


def test_status_values_are_the_sdk_strings() -> None:
    assert [status.value for status in RolloutStatus] == [
        "queued",
        "running",
        "grading",
        "success",
        "failure",
        "cancelled",
        "unknown",
    ]
    assert isinstance(RolloutStatus.SUCCESS, str)
    assert f"{RolloutStatus.SUCCESS}" == "success"
    assert RolloutStatus("failure") is RolloutStatus.FAILURE


def test_error_category_values_are_the_sdk_strings() -> None:
    assert [category.value for category in RolloutErrorCategory] == [
        "timeout",
        "lease_expired",
        "validation_error",
        "http_error",
        "agent_error",
        "internal_error",
    ]
    assert f"{RolloutErrorCategory.VALIDATION_ERROR}" == "validation_error"


# --- AgentWorkflowOutput ------------------------------------------------------------------


def test_output_defaults() -> None:
    assert AgentWorkflowOutput().model_dump() == {"messages": None, "metrics": {}, "info": {}}


def test_output_metrics_become_floats() -> None:
    output = AgentWorkflowOutput(metrics={"turns": 2, "np": np.float32(0.5)})
    assert output.metrics == {"turns": 2.0, "np": 0.5}
    assert all(type(value) is float for value in output.metrics.values())


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_output_rejects_non_finite_metrics(bad: float) -> None:
    with pytest.raises(ValidationError) as exc:
        AgentWorkflowOutput(metrics={"bad": bad})
    error = only_error(exc)
    assert (error["loc"], error["msg"]) == (("metrics", "bad"), "Input should be a finite number")


def test_output_forbids_unknown_fields() -> None:
    with pytest.raises(ValidationError) as exc:
        AgentWorkflowOutput(messages=[], reward=1.0)  # type: ignore[call-arg]
    assert only_error(exc)["type"] == "extra_forbidden"


# --- RolloutSample ------------------------------------------------------------------------


def test_sample_defaults() -> None:
    assert RolloutSample().model_dump() == {
        "messages": [],
        "trajectory_messages": [],
        "label": None,
        "reward": None,
        "remove_sample": False,
        "metrics": {},
        "extra_fields": {},
    }


def test_trajectory_defaults_to_a_deep_copy_of_messages() -> None:
    sample = RolloutSample(messages=MESSAGES)
    assert sample.trajectory_messages == MESSAGES
    assert sample.trajectory_messages is not sample.messages
    assert sample.trajectory_messages[0] is not sample.messages[0]
    sample.messages[0]["content"] = "changed"
    assert sample.trajectory_messages[0]["content"] == "2+2?"


def test_explicit_trajectory_is_kept_and_none_disables_it() -> None:
    trajectory = [{"role": "assistant", "content": "4"}]
    assert RolloutSample(messages=MESSAGES, trajectory_messages=trajectory).trajectory_messages == (
        trajectory
    )
    assert RolloutSample(messages=MESSAGES, trajectory_messages=None).trajectory_messages is None


def test_sample_round_trips_through_json() -> None:
    sample = RolloutSample(messages=MESSAGES, label="4", reward=0.5, metrics={"turns": 1})
    assert RolloutSample.model_validate_json(sample.model_dump_json()) == sample


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1.0), (0.5, 0.5), (np.float32(0.25), 0.25), (np.int64(3), 3.0), (-3.5, -3.5)],
)
def test_sample_reward_accepts_finite_numbers_as_float(value: object, expected: float) -> None:
    sample = RolloutSample(reward=value)
    assert sample.reward == expected
    assert type(sample.reward) is float


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.nan, "Value error, reward must be a finite number, got nan"),
        (math.inf, "Value error, reward must be a finite number, got inf"),
        ("0.5", "Value error, reward must be a finite number, got str"),
        (True, "Value error, reward must be a finite number, got bool"),
        (10**400, "Value error, reward must be a finite number, got a number out of float range"),
    ],
)
def test_sample_reward_rejects_non_numbers(value: object, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        RolloutSample(reward=value)
    error = only_error(exc)
    assert (error["loc"], error["msg"]) == (("reward",), message)


def test_sample_reward_assignment_is_validated_and_may_be_cleared() -> None:
    sample = RolloutSample(reward=1.0)
    with pytest.raises(ValidationError):
        sample.reward = math.nan
    assert sample.reward == 1.0
    sample.reward = None
    assert sample.reward is None


# --- ExecutionRequest ---------------------------------------------------------------------


def test_request_defaults() -> None:
    request = ExecutionRequest(id="row-0.s1", prompt=MESSAGES[:1])
    assert request.model_dump() == {
        "id": "row-0.s1",
        "prompt": MESSAGES[:1],
        "label": None,
        "metadata": None,
        "agent_timeout_sec": None,
        "grader_timeout_sec": None,
        "grade": True,
    }


@pytest.mark.parametrize("rollout_id", ["../x", "a/b", "a\\b", "", ".", "..", "a\x00b", "/"])
def test_request_id_must_be_one_path_segment(rollout_id: str) -> None:
    with pytest.raises(ValidationError) as exc:
        ExecutionRequest(id=rollout_id, prompt=[])
    error = only_error(exc)
    assert (error["loc"], error["msg"]) == (("id",), SEGMENT_ERROR)


@pytest.mark.parametrize("field", ["agent_timeout_sec", "grader_timeout_sec"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_request_timeouts_must_be_finite(field: str, value: float) -> None:
    with pytest.raises(ValidationError) as exc:
        ExecutionRequest.model_validate({"id": "r", "prompt": [], field: value})
    error = only_error(exc)
    assert (error["loc"], error["msg"]) == (
        (field,),
        "Value error, timeout must be finite; omit it to run unbounded",
    )


def test_request_accepts_finite_timeouts_including_negative() -> None:
    request = ExecutionRequest(id="r", prompt=[], agent_timeout_sec=-5, grader_timeout_sec=0.5)
    assert (request.agent_timeout_sec, request.grader_timeout_sec) == (-5.0, 0.5)


# --- ExecutionOutcome ---------------------------------------------------------------------


def success(reward: float | None = None) -> ExecutionResult:
    return ExecutionResult(status=RolloutStatus.SUCCESS, sample=RolloutSample(reward=reward))


def failure(*, sample: RolloutSample | None = None) -> ExecutionResult:
    return ExecutionResult(
        status=RolloutStatus.FAILURE,
        sample=sample,
        err_message="boom",
        err_category=RolloutErrorCategory.AGENT_ERROR,
    )


def test_outcome_without_grader_is_the_workflow_result() -> None:
    workflow = success()
    outcome = ExecutionOutcome(workflow=workflow)
    assert outcome.result is workflow
    assert outcome.result_to_save is workflow


def test_outcome_with_grader_is_the_grader_result() -> None:
    workflow, grader = success(), success(reward=1.0)
    outcome = ExecutionOutcome(workflow=workflow, grader=grader)
    assert outcome.result is grader
    assert outcome.result_to_save is grader


def test_outcome_grader_failure_decides_the_result() -> None:
    grader = failure(sample=RolloutSample(messages=MESSAGES))
    outcome = ExecutionOutcome(workflow=success(), grader=grader)
    assert outcome.result is grader
    assert outcome.result_to_save is grader


def test_outcome_failed_workflow_decides_and_borrows_the_grader_sample() -> None:
    grader_sample = RolloutSample(messages=MESSAGES)
    grader = ExecutionResult(status=RolloutStatus.SUCCESS, sample=grader_sample)
    outcome = ExecutionOutcome(workflow=failure(), grader=grader)
    result = outcome.result
    assert (result.status, result.err_message, result.err_category) == (
        RolloutStatus.FAILURE,
        "boom",
        RolloutErrorCategory.AGENT_ERROR,
    )
    assert result.sample is grader_sample
    assert outcome.workflow.sample is None


def test_outcome_failed_workflow_with_its_own_sample_keeps_it() -> None:
    workflow = failure(sample=RolloutSample(messages=MESSAGES))
    outcome = ExecutionOutcome(workflow=workflow, grader=success())
    assert outcome.result is workflow


def test_outcome_saves_the_workflow_result_when_the_grader_has_no_sample() -> None:
    workflow = success()
    outcome = ExecutionOutcome(workflow=workflow, grader=failure())
    assert outcome.result_to_save is workflow
    assert outcome.result is outcome.grader
