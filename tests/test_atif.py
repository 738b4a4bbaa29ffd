"""Tests for the ATIF converter (osmosis_run.run.atif) and its validation models (atif_models)."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from osmosis_run.run.atif import dumps_trajectory, trajectory_from_messages
from osmosis_run.run.atif_models import Trajectory, validate_trajectory

Message = dict[str, Any]


def convert(messages: list[Message], **overrides: Any) -> dict[str, Any]:
    """Convert with fixed identity fields, validate the result and return it."""
    options: dict[str, Any] = {
        "rollout_id": "r1",
        "agent_version": "0.1.0",
        "label": None,
        "reward": None,
    }
    options.update(overrides)
    doc = trajectory_from_messages(messages, **options)
    assert doc is not None
    validate_trajectory(doc)
    return doc


def steps_of(messages: list[Message]) -> list[dict[str, Any]]:
    """Convert and return only the steps."""
    steps: list[dict[str, Any]] = convert(messages)["steps"]
    return steps


def one_step(message: Message) -> dict[str, Any]:
    """Convert a single message and return its one step."""
    (step,) = steps_of([message])
    return step


# --- the document as a whole ---------------------------------------------------------------


def test_empty_messages_give_no_document() -> None:
    assert (
        trajectory_from_messages([], rollout_id="r1", agent_version="0.1.0", label="x", reward=1.0)
        is None
    )


def test_plain_chat_gives_the_exact_document() -> None:
    messages: list[Message] = [
        {"role": "system", "content": "Multiply. Answer as #### N"},
        {"role": "user", "content": "val1 = 3\nval2 = 4"},
        {
            "role": "assistant",
            "content": "#### 12",
            "model": "gpt-x",
            "usage": {"prompt_tokens": 17, "completion_tokens": 5},
        },
    ]
    doc = convert(messages, label="12", reward=1.0, agent_name="osmosis-run")
    assert doc == {
        "schema_version": "ATIF-v1.7",
        "session_id": "r1",
        "trajectory_id": "r1",
        "agent": {"name": "osmosis-run", "version": "0.1.0"},
        "steps": [
            {"step_id": 1, "source": "system", "message": "Multiply. Answer as #### N"},
            {"step_id": 2, "source": "user", "message": "val1 = 3\nval2 = 4"},
            {
                "step_id": 3,
                "source": "agent",
                "model_name": "gpt-x",
                "message": "#### 12",
                "metrics": {"prompt_tokens": 17, "completion_tokens": 5},
                "llm_call_count": 1,
            },
        ],
        "final_metrics": {"total_steps": 3},
        "extra": {"osmosis": {"rollout_id": "r1", "label": "12", "reward": 1.0}},
    }


def test_agent_name_defaults_to_osmosis_run() -> None:
    doc = convert([{"role": "user", "content": "hi"}])
    assert doc["agent"] == {"name": "osmosis-run", "version": "0.1.0"}


def test_tool_using_transcript_gives_the_exact_steps() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "What is 2+3, then times 4?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_add",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                },
                {
                    "id": "call_mul",
                    "type": "function",
                    "function": {"name": "mul", "arguments": '{"a": 5, "b": 4}'},
                },
            ],
            "usage": {"prompt_tokens": 40, "completion_tokens": 12},
        },
        {"role": "tool", "tool_call_id": "call_add", "content": "5"},
        {"role": "tool", "tool_call_id": "call_mul", "content": "20"},
        {"role": "assistant", "content": "20"},
    ]
    doc = convert(messages)
    assert doc["steps"] == [
        {"step_id": 1, "source": "user", "message": "What is 2+3, then times 4?"},
        {
            "step_id": 2,
            "source": "agent",
            "message": "",
            "tool_calls": [
                {"tool_call_id": "call_add", "function_name": "add", "arguments": {"a": 2, "b": 3}},
                {"tool_call_id": "call_mul", "function_name": "mul", "arguments": {"a": 5, "b": 4}},
            ],
            "observation": {
                "results": [
                    {"source_call_id": "call_add", "content": "5"},
                    {"source_call_id": "call_mul", "content": "20"},
                ]
            },
            "metrics": {"prompt_tokens": 40, "completion_tokens": 12},
            "llm_call_count": 1,
        },
        {"step_id": 3, "source": "agent", "message": "20"},
    ]
    assert doc["final_metrics"] == {"total_steps": 3}


def test_observation_keeps_atif_field_order() -> None:
    messages: list[Message] = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
            "usage": {"prompt_tokens": 1},
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    (step,) = steps_of(messages)
    assert list(step) == [
        "step_id",
        "source",
        "message",
        "tool_calls",
        "observation",
        "metrics",
        "llm_call_count",
    ]


# --- roles ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "source"),
    [("system", "system"), ("developer", "system"), ("user", "user"), ("assistant", "agent")],
)
def test_roles_map_to_sources(role: str, source: str) -> None:
    assert one_step({"role": role, "content": "x"}) == {
        "step_id": 1,
        "source": source,
        "message": "x",
    }


@pytest.mark.parametrize("role", ["critic", "Assistant", None, 7])
def test_other_roles_become_user_steps_with_original_role(role: Any) -> None:
    assert one_step({"role": role, "content": "x"}) == {
        "step_id": 1,
        "source": "user",
        "message": "x",
        "extra": {"original_role": role},
    }


def test_missing_role_is_recorded_as_null_original_role() -> None:
    assert one_step({"content": "x"})["extra"] == {"original_role": None}


# --- content -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("plain", "plain"),
        ("", ""),
        (None, ""),
        ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "a\nb"),
        ([], ""),
        (
            [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}}],
            '[{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}}]',
        ),
        ({"answer": 4}, '{"answer": 4}'),
        (42, "42"),
        (["a", "b"], '["a", "b"]'),
        ({"x": float("nan")}, '{"x": null}'),
    ],
)
def test_content_becomes_a_string(content: Any, message: str) -> None:
    assert one_step({"role": "user", "content": content})["message"] == message


# --- tool calls ----------------------------------------------------------------------------


def tool_call_of(call: Any) -> dict[str, Any]:
    """Convert one assistant message with one tool call and return the ToolCall dict."""
    step = one_step({"role": "assistant", "content": "", "tool_calls": [call]})
    result: dict[str, Any] = step["tool_calls"][0]
    return result


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": 1, "b": [2, 3]}', {"a": 1, "b": [2, 3]}),
        ("{not json", {"_raw": "{not json"}),
        ("", {"_raw": ""}),
        ("[1, 2]", {"value": [1, 2]}),
        ("7", {"value": 7}),
        ('"s"', {"value": "s"}),
        ("null", {"value": None}),
        ('{"x": NaN}', {"x": None}),
        ({"already": "a dict"}, {"already": "a dict"}),
        (None, {}),
        ([1], {"value": [1]}),
    ],
)
def test_tool_call_arguments(arguments: Any, expected: dict[str, Any]) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    assert tool_call_of(call) == {"tool_call_id": "c1", "function_name": "f", "arguments": expected}


def test_missing_tool_call_ids_are_numbered_by_position() -> None:
    calls = [
        {"id": "given", "function": {"name": "f", "arguments": "{}"}},
        {"function": {"name": "g", "arguments": "{}"}},
        {"id": None, "function": {"name": "h", "arguments": "{}"}},
    ]
    step = one_step({"role": "assistant", "content": "", "tool_calls": calls})
    assert [call["tool_call_id"] for call in step["tool_calls"]] == ["given", "call_1", "call_2"]


def test_flat_tool_call_without_function_object() -> None:
    call = {"id": "c1", "name": "f", "arguments": '{"a": 1}'}
    assert tool_call_of(call) == {"tool_call_id": "c1", "function_name": "f", "arguments": {"a": 1}}


def test_empty_tool_calls_are_omitted() -> None:
    step = one_step({"role": "assistant", "content": "x", "tool_calls": []})
    assert step == {"step_id": 1, "source": "agent", "message": "x"}


@pytest.mark.parametrize("role", ["user", "system", "critic"])
def test_agent_only_fields_move_to_extra_on_other_steps(role: str) -> None:
    calls = [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]
    step = one_step({"role": role, "content": "x", "tool_calls": calls, "reasoning_content": "hmm"})
    expected_extra: dict[str, Any] = {"tool_calls": calls, "reasoning_content": "hmm"}
    if role == "critic":
        expected_extra = {"original_role": "critic", **expected_extra}
    assert step["extra"] == expected_extra
    assert "tool_calls" not in step
    assert "reasoning_content" not in step


def test_reasoning_content_is_kept_on_agent_steps() -> None:
    step = one_step({"role": "assistant", "content": "4", "reasoning_content": "2+2"})
    assert step == {"step_id": 1, "source": "agent", "message": "4", "reasoning_content": "2+2"}


# --- tool results --------------------------------------------------------------------------


def agent_with_call(call_id: str = "c1") -> Message:
    """An assistant message making one tool call with the given id."""
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "function": {"name": "f", "arguments": "{}"}}],
    }


def test_tool_result_with_unknown_id_keeps_it_in_extra() -> None:
    steps = steps_of(
        [agent_with_call("c1"), {"role": "tool", "tool_call_id": "zz", "content": "r"}]
    )
    assert steps[0]["observation"] == {
        "results": [{"content": "r", "extra": {"tool_call_id": "zz"}}]
    }


def test_tool_result_without_id_has_only_content() -> None:
    steps = steps_of([agent_with_call(), {"role": "function", "name": "f", "content": None}])
    assert steps[0]["observation"] == {"results": [{"content": ""}]}


def test_tool_result_on_agent_step_without_tool_calls() -> None:
    messages = [
        {"role": "assistant", "content": "thinking"},
        {"role": "tool", "tool_call_id": "c9", "content": "r"},
    ]
    assert steps_of(messages) == [
        {
            "step_id": 1,
            "source": "agent",
            "message": "thinking",
            "observation": {"results": [{"content": "r", "extra": {"tool_call_id": "c9"}}]},
        }
    ]


def test_tool_result_without_preceding_agent_step_becomes_system_step() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "c1", "content": "orphan"},
        {"role": "tool", "content": [{"type": "text", "text": "second"}]},
    ]
    assert steps_of(messages) == [
        {"step_id": 1, "source": "user", "message": "hi"},
        {
            "step_id": 2,
            "source": "system",
            "message": "",
            "observation": {"results": [{"content": "orphan", "extra": {"tool_call_id": "c1"}}]},
        },
        {
            "step_id": 3,
            "source": "system",
            "message": "",
            "observation": {"results": [{"content": "second"}]},
        },
    ]


def test_tool_result_folds_into_the_last_agent_step_across_other_steps() -> None:
    messages = [
        agent_with_call("c1"),
        {"role": "user", "content": "interjection"},
        {"role": "tool", "tool_call_id": "c1", "content": "late"},
    ]
    steps = steps_of(messages)
    assert len(steps) == 2
    assert steps[0]["observation"] == {"results": [{"source_call_id": "c1", "content": "late"}]}


# --- metrics, model name, timestamps -------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "metrics"),
    [
        (
            {
                "prompt_tokens": 10,
                "completion_tokens": 3,
                "total_tokens": 13,
                "prompt_tokens_details": {"cached_tokens": 4},
            },
            {"prompt_tokens": 10, "completion_tokens": 3, "cached_tokens": 4},
        ),
        (
            {"input_tokens": 8, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 1}},
            {"prompt_tokens": 8, "completion_tokens": 2, "cached_tokens": 1},
        ),
        ({"prompt_tokens": 5, "cached_tokens": 2}, {"prompt_tokens": 5, "cached_tokens": 2}),
        ({"prompt_tokens": 0}, {"prompt_tokens": 0}),
        (
            {"prompt_tokens": 6.0, "completion_tokens": np.int64(2)},
            {"prompt_tokens": 6, "completion_tokens": 2},
        ),
    ],
)
def test_usage_becomes_metrics_with_one_llm_call(
    usage: dict[str, Any], metrics: dict[str, int]
) -> None:
    step = one_step({"role": "assistant", "content": "x", "usage": usage})
    assert step["metrics"] == metrics
    assert step["llm_call_count"] == 1


@pytest.mark.parametrize(
    "usage",
    [None, {}, {"total_tokens": 3}, {"prompt_tokens": "7", "completion_tokens": 1.5}, "bad"],
)
def test_no_usable_usage_gives_no_metrics(usage: Any) -> None:
    step = one_step({"role": "assistant", "content": "x", "usage": usage})
    assert step == {"step_id": 1, "source": "agent", "message": "x"}


def test_usage_and_model_from_extra_response() -> None:
    message = {
        "role": "assistant",
        "content": "x",
        "extra": {"response": {"model": "m-resp", "usage": {"input_tokens": 3}}},
    }
    assert one_step(message) == {
        "step_id": 1,
        "source": "agent",
        "model_name": "m-resp",
        "message": "x",
        "metrics": {"prompt_tokens": 3},
        "llm_call_count": 1,
    }


@pytest.mark.parametrize(
    ("fields", "model_name"),
    [
        ({"model": "a"}, "a"),
        ({"model_name": "b"}, "b"),
        ({"model": "a", "model_name": "b"}, "a"),
        ({"model": None, "model_name": "b"}, "b"),
    ],
)
def test_model_name_from_message(fields: dict[str, Any], model_name: str) -> None:
    assert one_step({"role": "assistant", "content": "x", **fields})["model_name"] == model_name


def test_model_name_is_not_put_on_user_steps() -> None:
    assert one_step({"role": "user", "content": "x", "model": "a"}) == {
        "step_id": 1,
        "source": "user",
        "message": "x",
    }


@pytest.mark.parametrize(
    ("fields", "timestamp"),
    [
        ({"created_at": 1_700_000_000}, "2023-11-14T22:13:20+00:00"),
        ({"timestamp": 1_700_000_000.5}, "2023-11-14T22:13:20.500000+00:00"),
        ({"completed_at": "2024-05-01T10:00:00Z"}, "2024-05-01T10:00:00Z"),
        ({"created_at": "2024-05-01T10:00:00+02:00", "timestamp": 0}, "2024-05-01T10:00:00+02:00"),
        ({"created_at": "yesterday", "timestamp": 0}, "1970-01-01T00:00:00+00:00"),
    ],
)
def test_timestamps_become_iso_8601(fields: dict[str, Any], timestamp: str) -> None:
    for role in ("user", "assistant"):
        assert one_step({"role": role, "content": "x", **fields})["timestamp"] == timestamp


@pytest.mark.parametrize("value", ["yesterday", float("nan"), float("inf"), 1e20, True, [1]])
def test_unusable_timestamps_are_dropped(value: Any) -> None:
    assert "timestamp" not in one_step({"role": "user", "content": "x", "created_at": value})


# --- extra.osmosis -------------------------------------------------------------------------


def test_osmosis_extra_holds_the_sample_and_request_fields() -> None:
    doc = convert(
        [{"role": "user", "content": "x"}],
        label="L",
        reward=0.5,
        sample_metrics={"turns": 2},
        sample_extra_fields={"note": "n"},
        request_metadata={"row": 3},
        extra={"request_extra_fields": {"row_index": 0, "run_index": 1}},
    )
    assert doc["extra"] == {
        "osmosis": {
            "request_extra_fields": {"row_index": 0, "run_index": 1},
            "rollout_id": "r1",
            "label": "L",
            "reward": 0.5,
            "sample_metrics": {"turns": 2},
            "sample_extra_fields": {"note": "n"},
            "request_metadata": {"row": 3},
        }
    }


def test_osmosis_extra_drops_none_and_empty_values() -> None:
    doc = convert(
        [{"role": "user", "content": "x"}],
        sample_metrics={},
        sample_extra_fields=None,
        request_metadata={},
    )
    assert doc["extra"] == {"osmosis": {"rollout_id": "r1"}}


def test_extra_never_replaces_the_named_osmosis_fields() -> None:
    doc = convert(
        [{"role": "user", "content": "x"}],
        label=None,
        reward=1.0,
        extra={"rollout_id": "other", "label": "sneaky", "reward": 0.0, "mine": None},
    )
    assert doc["extra"] == {"osmosis": {"rollout_id": "r1", "reward": 1.0}}


@pytest.mark.parametrize("label", [None, "L", ""])
@pytest.mark.parametrize(
    "reward", [None, 0.0, 1.0, -2.5, math.nan, math.inf, 1, True, np.float64(0.5)], ids=repr
)
def test_the_usual_rollout_gets_what_the_general_path_gives(label: Any, reward: Any) -> None:
    """A rollout with no extras takes an inline path; an extra that is dropped forces the other."""
    messages: list[Message] = [{"role": "user", "content": "x"}, {"role": "assistant"}]
    usual = convert(messages, label=label, reward=reward, sample_metrics={}, request_metadata=None)
    general = convert(messages, label=label, reward=reward, extra={"dropped": None})
    assert json.dumps(usual) == json.dumps(general)  # the same keys, in the same order


def test_nan_metric_becomes_null() -> None:
    doc = convert(
        [{"role": "user", "content": "x"}],
        sample_metrics={"turns": 2, "nan": float("nan"), "inf": [float("-inf"), 1.5]},
    )
    assert doc["extra"]["osmosis"]["sample_metrics"] == {
        "turns": 2,
        "nan": None,
        "inf": [None, 1.5],
    }
    text = dumps_trajectory(doc)
    assert '"sample_metrics":{"turns":2,"nan":null,"inf":[null,1.5]}' in text


def test_non_finite_reward_is_dropped() -> None:
    doc = convert([{"role": "user", "content": "x"}], reward=float("nan"))
    assert doc["extra"] == {"osmosis": {"rollout_id": "r1"}}


def test_extras_become_json_types() -> None:
    doc = convert(
        [{"role": "user", "content": "x"}],
        sample_metrics={
            "np_float": np.float32(0.5),
            "np_int": np.int64(3),
            "np_nan": np.float64("nan"),
            "tuple": (1, 2),
            1: "int key",
            "obj": object.__new__(_Opaque),
        },
    )
    assert doc["extra"]["osmosis"]["sample_metrics"] == {
        "np_float": 0.5,
        "np_int": 3,
        "np_nan": None,
        "tuple": [1, 2],
        "1": "int key",
        "obj": "<opaque>",
    }
    json.loads(dumps_trajectory(doc))


class _Opaque:
    def __str__(self) -> str:
        return "<opaque>"


def test_nan_in_step_extra_becomes_null() -> None:
    step = one_step({"role": "user", "content": "x", "tool_calls": [{"w": float("nan")}]})
    assert step["extra"] == {"tool_calls": [{"w": None}]}


# --- serialization -------------------------------------------------------------------------


def test_dumps_round_trip() -> None:
    messages = [
        {"role": "system", "content": "s"},
        agent_with_call("c1"),
        {"role": "tool", "tool_call_id": "c1", "content": "é ✓"},
        {"role": "assistant", "content": "done", "usage": {"prompt_tokens": 1}},
    ]
    doc = convert(messages, label="x", reward=1.0, sample_metrics={"m": float("inf")})
    text = dumps_trajectory(doc)
    assert "\n" not in text
    assert ", " not in text
    back = json.loads(text)
    assert back == doc
    assert validate_trajectory(back).model_dump(mode="json", exclude_none=True) == back


def test_dumps_refuses_non_finite_floats() -> None:
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        dumps_trajectory({"x": math.nan})


# --- the validation models -----------------------------------------------------------------


def valid_doc() -> dict[str, Any]:
    """A small valid document with one tool-using agent step."""
    return {
        "agent": {"name": "a", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "q"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "",
                "tool_calls": [{"tool_call_id": "c1", "function_name": "f", "arguments": {}}],
                "observation": {"results": [{"source_call_id": "c1", "content": "r"}]},
            },
        ],
    }


def error_messages(data: dict[str, Any]) -> list[str]:
    """Validate data that must be invalid and return pydantic's error messages."""
    with pytest.raises(ValidationError) as caught:
        validate_trajectory(data)
    return [error["msg"] for error in caught.value.errors()]


def test_valid_doc_defaults_to_v1_7() -> None:
    assert validate_trajectory(valid_doc()).schema_version == "ATIF-v1.7"


def test_older_schema_versions_are_accepted() -> None:
    assert validate_trajectory({**valid_doc(), "schema_version": "ATIF-v1.0"}).schema_version == (
        "ATIF-v1.0"
    )


def test_unknown_schema_version_is_rejected() -> None:
    assert error_messages({**valid_doc(), "schema_version": "ATIF-v2.0"})[0].startswith(
        "Input should be 'ATIF-v1.0'"
    )


def test_non_sequential_step_ids_are_rejected() -> None:
    doc = valid_doc()
    doc["steps"][1]["step_id"] = 3
    assert error_messages(doc) == [
        "Value error, steps[1].step_id must be 2 (step_id runs 1..n), got 3"
    ]


def test_tool_calls_on_a_user_step_are_rejected() -> None:
    doc = valid_doc()
    doc["steps"][1]["source"] = "user"
    assert error_messages(doc) == [
        "Value error, step 2: tool_calls only allowed when source is 'agent', not 'user'"
    ]


def test_every_agent_only_field_is_named() -> None:
    step = {
        "step_id": 1,
        "source": "system",
        "message": "",
        "model_name": "m",
        "reasoning_effort": "high",
        "reasoning_content": "r",
        "metrics": {},
    }
    doc = {"agent": {"name": "a", "version": "1"}, "steps": [step]}
    assert error_messages(doc) == [
        "Value error, step 1: model_name, reasoning_effort, reasoning_content, metrics "
        "only allowed when source is 'agent', not 'system'"
    ]


def test_metrics_with_zero_llm_calls_are_rejected() -> None:
    doc = valid_doc()
    doc["steps"][1].update(llm_call_count=0, metrics={"prompt_tokens": 1}, reasoning_content="r")
    assert error_messages(doc) == [
        "Value error, step 2: metrics, reasoning_content not allowed when llm_call_count is 0"
    ]


def test_zero_llm_calls_without_metrics_is_fine() -> None:
    doc = valid_doc()
    doc["steps"][1]["llm_call_count"] = 0
    validate_trajectory(doc)


def test_unmatched_source_call_id_is_rejected() -> None:
    doc = valid_doc()
    doc["steps"][1]["observation"]["results"][0]["source_call_id"] = "c2"
    assert error_messages(doc) == [
        "Value error, step 2: observation source_call_id 'c2' matches no tool_call_id of that step"
    ]


def test_empty_steps_are_rejected() -> None:
    assert error_messages({**valid_doc(), "steps": []}) == [
        "List should have at least 1 item after validation, not 0"
    ]


def test_unknown_fields_are_rejected() -> None:
    doc = valid_doc()
    doc["steps"][0]["role"] = "user"
    assert error_messages(doc) == ["Extra inputs are not permitted"]


def test_non_finite_floats_are_rejected() -> None:
    doc = valid_doc()
    doc["final_metrics"] = {"total_cost_usd": math.inf}
    assert error_messages(doc) == ["Input should be a finite number"]


def test_bad_timestamp_is_rejected() -> None:
    doc = valid_doc()
    doc["steps"][0]["timestamp"] = "noon"
    assert error_messages(doc) == ["Value error, timestamp must be ISO 8601, got 'noon'"]


def test_content_parts() -> None:
    doc = valid_doc()
    doc["steps"][0]["message"] = [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"media_type": "image/png", "path": "a.png"}},
    ]
    validate_trajectory(doc)
    doc["steps"][0]["message"] = [{"type": "image", "text": "no source"}]
    assert "Value error, an image content part needs 'source' and no 'text'" in error_messages(doc)


def subagent(trajectory_id: str | None) -> dict[str, Any]:
    """An embedded subagent trajectory with the given id."""
    return {**valid_doc(), "trajectory_id": trajectory_id}


def test_subagent_trajectories_need_unique_ids() -> None:
    doc = {**valid_doc(), "subagent_trajectories": [subagent("s1"), subagent("s2")]}
    assert len(validate_trajectory(doc).subagent_trajectories or []) == 2
    doc["subagent_trajectories"] = [subagent("s1"), subagent("s1")]
    assert error_messages(doc) == [
        "Value error, subagent_trajectories[1].trajectory_id 's1' is not unique"
    ]
    doc["subagent_trajectories"] = [subagent(None)]
    assert error_messages(doc) == ["Value error, subagent_trajectories[0] needs a trajectory_id"]


def test_subagent_ref_needs_id_or_path() -> None:
    doc = valid_doc()
    result = doc["steps"][1]["observation"]["results"][0]
    result["subagent_trajectory_ref"] = [{"trajectory_path": "sub.json"}, {"trajectory_id": "s"}]
    validate_trajectory(doc)
    result["subagent_trajectory_ref"] = [{"session_id": "only"}]
    assert error_messages(doc) == [
        "Value error, a subagent trajectory ref needs trajectory_id or trajectory_path"
    ]


def test_trajectory_model_is_exported_type() -> None:
    assert isinstance(validate_trajectory(valid_doc()), Trajectory)


# --- fuzz ----------------------------------------------------------------------------------

_ROLES = ["system", "developer", "user", "assistant", "assistant", "tool", "function", "critic"]
_ODD_VALUES: list[Any] = [None, "", "text", 3, 2.5, float("nan"), [1, "a"], {"k": float("inf")}]


def random_content(rng: random.Random) -> Any:
    """A content value of any shape the converter must handle."""
    kind = rng.randrange(4)
    if kind == 0:
        return rng.choice(["", "hello", "ünïcode ✓", "multi\nline"])
    if kind == 1:
        return [{"type": "text", "text": f"part{i}"} for i in range(rng.randrange(3))]
    if kind == 2:
        return [{"type": "image_url", "image_url": {"url": "u"}}]
    return rng.choice(_ODD_VALUES)


def random_tool_calls(rng: random.Random, ids: list[str]) -> list[Any]:
    """Tool calls with a mix of good, bad and missing parts."""
    calls: list[Any] = []
    for _ in range(rng.randrange(3)):
        call_id = rng.choice([*ids, None, ""])
        arguments = rng.choice(['{"a": 1}', "{bad", "[1]", None, {"b": 2}, '{"n": NaN}'])
        calls.append(
            {"id": call_id, "type": "function", "function": {"name": "f", "arguments": arguments}}
        )
    if rng.random() < 0.1:
        calls.append("not a mapping")
    return calls


def random_message(rng: random.Random) -> Message:
    """One random chat message."""
    ids = ["c1", "c2", "c3"]
    message: Message = {"role": rng.choice(_ROLES), "content": random_content(rng)}
    if rng.random() < 0.4:
        message["tool_calls"] = random_tool_calls(rng, ids)
    if rng.random() < 0.5:
        message["tool_call_id"] = rng.choice([*ids, "unknown", 5])
    if rng.random() < 0.3:
        message["usage"] = rng.choice(
            [{"prompt_tokens": 3, "completion_tokens": 1}, {"input_tokens": 2}, {}, "x"]
        )
    if rng.random() < 0.2:
        message["reasoning_content"] = rng.choice(["why", None, ["a"]])
    if rng.random() < 0.2:
        message[rng.choice(["model", "model_name"])] = rng.choice(["m", None, 3])
    if rng.random() < 0.2:
        message["created_at"] = rng.choice([1_700_000_000, "2024-01-01T00:00:00Z", "bad", 1e30])
    return message


@pytest.mark.parametrize("seed", range(200))
def test_random_transcripts_always_validate(seed: int) -> None:
    rng = random.Random(seed)
    messages = [random_message(rng) for _ in range(rng.randrange(1, 12))]
    doc = trajectory_from_messages(
        messages,
        rollout_id=f"r{seed}",
        agent_version="0.1.0",
        label=rng.choice([None, "x"]),
        reward=rng.choice([None, 0.0, 1.0, float("nan")]),
        sample_metrics={"m": rng.choice(_ODD_VALUES)},
        extra={"e": rng.choice(_ODD_VALUES)},
    )
    assert doc is not None
    trajectory = validate_trajectory(doc)
    assert doc["final_metrics"]["total_steps"] == len(trajectory.steps) >= 1
    assert json.loads(dumps_trajectory(doc)) == doc
