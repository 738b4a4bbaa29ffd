"""Convert a sample's OpenAI-style chat messages into an ATIF v1.7 trajectory document.

This runs once per rollout on the hot path, so it builds plain dicts and lists directly and
never constructs the pydantic models of ``osmosis_run.run.atif_models`` (tests validate its output
against them). The mapping follows the Osmosis SDK 0.3.8 converter:

* roles: system/developer -> system, user -> user, assistant -> agent, any other -> user
  with ``extra.original_role``;
* tool/function messages fold into the last agent step's ``observation.results``, or become
  a system step with an empty message when no agent step came before;
* content: a string is kept, a list of text parts is joined with "\\n", None is "", anything
  else is a JSON string.

Everything copied into an ``extra`` or into tool-call arguments is made JSON-safe, with
non-finite floats turned into null, because the file is written with ``allow_nan=False``.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["SCHEMA_VERSION", "dumps_trajectory", "trajectory_from_messages"]

SCHEMA_VERSION = "ATIF-v1.7"

_SOURCES = {"system": "system", "developer": "system", "user": "user", "assistant": "agent"}
_TOOL_ROLES = ("tool", "function")
# Moved into extra on steps that are not agent steps, where ATIF does not allow them.
_AGENT_ONLY_MOVED = ("tool_calls", "reasoning_content")
_TIMESTAMP_KEYS = ("created_at", "timestamp", "completed_at")
# Keys ending trajectory steps, after which a late "observation" is placed (model field order).
_AFTER_OBSERVATION = ("metrics", "is_copied_context", "llm_call_count", "extra")
# Every key the conversion reads besides "role" and "content": a dict message with none of them,
# a known role and string content (the usual chat message) is just its source and its text.
_READ = frozenset(
    {"tool_calls", "reasoning_content", "model", "model_name", "extra", "usage", *_TIMESTAMP_KEYS}
)

Step = dict[str, Any]


def trajectory_from_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    rollout_id: str,
    agent_name: str = "osmosis-run",
    agent_version: str,
    label: str | None,
    reward: float | None,
    sample_metrics: Mapping[str, Any] | None = None,
    sample_extra_fields: Mapping[str, Any] | None = None,
    request_metadata: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Build the ATIF v1.7 document of one rollout; return None when there are no messages.

    Args:
        messages: The sample's trajectory messages, in OpenAI chat shape.
        rollout_id: Becomes ``session_id``, ``trajectory_id`` and ``extra.osmosis.rollout_id``.
        agent_name: The ``agent.name`` recorded in the document.
        agent_version: The ``agent.version`` recorded in the document.
        label: The sample's (else the request's) label.
        reward: The graded reward.
        sample_metrics: The sample's metrics.
        sample_extra_fields: The sample's extra fields.
        request_metadata: The request's metadata.
        extra: Further keys for ``extra.osmosis`` (for example ``request_extra_fields``);
            they never replace the keys named above.
    """
    if not messages:
        return None
    steps = _steps(messages)
    osmosis: dict[str, Any]
    if (
        not (extra or sample_metrics or sample_extra_fields or request_metadata)
        and (label is None or type(label) is str)
        and (reward is None or (type(reward) is float and math.isfinite(reward)))
    ):  # the usual rollout, inline: what the general path below gives it
        osmosis = {"rollout_id": rollout_id}
        if label is not None:
            osmosis["label"] = label
        if reward is not None:
            osmosis["reward"] = reward
    else:
        osmosis = _json_safe(extra) if extra else {}
        osmosis["rollout_id"] = rollout_id
        osmosis["label"] = _json_safe(label)
        osmosis["reward"] = _json_safe(reward)
        # Empty mappings are dropped too, as in the SDK's own trajectories.
        osmosis["sample_metrics"] = _mapping(sample_metrics)
        osmosis["sample_extra_fields"] = _mapping(sample_extra_fields)
        osmosis["request_metadata"] = _mapping(request_metadata)
        osmosis = {key: value for key, value in osmosis.items() if value is not None}
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": rollout_id,
        "trajectory_id": rollout_id,
        "agent": {"name": agent_name, "version": agent_version},
        "steps": steps,
        "final_metrics": {"total_steps": len(steps)},
        "extra": {"osmosis": osmosis},
    }


def _mapping(value: Any) -> Any:
    """A JSON-safe copy of ``value``; None when it is empty (``{}``) or None."""
    if value is None or (type(value) is dict and not value):
        return None
    return _json_safe(value) or None


def dumps_trajectory(doc: dict[str, Any]) -> str:
    """Serialize a trajectory document as compact, strict JSON (no NaN or Infinity)."""
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


def _steps(messages: Sequence[Mapping[str, Any]]) -> list[Step]:
    steps: list[Step] = []
    last_agent: Step | None = None
    for message in messages:
        role = message.get("role")
        # The usual chat message, inline (this runs per message per rollout): the same step the
        # general path below builds for it.
        if type(message) is dict and type(role) is str and message.keys().isdisjoint(_READ):
            source, content = _SOURCES.get(role), message.get("content")
            if source is not None and type(content) is str:
                step = {"step_id": len(steps) + 1, "source": source, "message": content}
                if source == "agent":
                    last_agent = step
                steps.append(step)
                continue
        if role in _TOOL_ROLES and last_agent is not None:
            _add_result(last_agent, message)
            continue
        step = _step(len(steps) + 1, role, message)
        if step["source"] == "agent":
            last_agent = step
        steps.append(step)
    return steps


def _step(step_id: int, role: Any, message: Mapping[str, Any]) -> Step:
    if role in _TOOL_ROLES:
        # A tool result with no agent step before it: keep it, on an empty system step.
        step = _base_step(step_id, message, "system", "")
        _add_result(step, message)
        return step
    source = _SOURCES.get(role) if isinstance(role, str) else None
    if source == "agent":
        return _agent_step(step_id, message)
    step = _base_step(step_id, message, source or "user", _text(message.get("content")))
    extra: dict[str, Any] = {} if source else {"original_role": role}
    for key in _AGENT_ONLY_MOVED:
        value = message.get(key)
        if value is not None:
            extra[key] = value
    if extra:
        step["extra"] = _json_safe(extra)
    return step


def _base_step(
    step_id: int, message: Mapping[str, Any], source: str, text: str, model_name: Any = None
) -> Step:
    step: Step = {"step_id": step_id}
    timestamp = _timestamp(message)
    if timestamp is not None:
        step["timestamp"] = timestamp
    step["source"] = source
    if isinstance(model_name, str):
        step["model_name"] = model_name
    step["message"] = text
    return step


def _agent_step(step_id: int, message: Mapping[str, Any]) -> Step:
    model_name = _response_field(message, ("model", "model_name"), "model")
    step = _base_step(step_id, message, "agent", _text(message.get("content")), model_name)
    reasoning = message.get("reasoning_content")
    if reasoning is not None:
        step["reasoning_content"] = _text(reasoning)
    calls = message.get("tool_calls")
    if calls:
        step["tool_calls"] = _tool_calls(calls)
    metrics = _metrics(_response_field(message, ("usage",), "usage"))
    if metrics:
        step["metrics"] = metrics
        step["llm_call_count"] = 1
    return step


def _response_field(message: Mapping[str, Any], keys: tuple[str, ...], nested: str) -> Any:
    """Return the first of ``keys`` on the message, else ``extra.response[nested]``."""
    for key in keys:
        value = message.get(key)
        if value is not None:
            return value
    extra = message.get("extra")
    response = extra.get("response") if isinstance(extra, Mapping) else None
    return response.get(nested) if isinstance(response, Mapping) else None


def _text(content: Any) -> str:
    if type(content) is str:
        return content
    if content is None:
        return ""
    if isinstance(content, str):
        return str(content)
    if isinstance(content, list | tuple) and all(map(_is_text_part, content)):
        return "\n".join(part["text"] for part in content)
    return json.dumps(_json_safe(content), ensure_ascii=False)


def _is_text_part(part: Any) -> bool:
    return (
        isinstance(part, Mapping)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    )


def _tool_calls(calls: Any) -> list[dict[str, Any]]:
    if not isinstance(calls, list | tuple):
        calls = [calls]
    return [_tool_call(index, call) for index, call in enumerate(calls)]


def _tool_call(index: int, call: Any) -> dict[str, Any]:
    if not isinstance(call, Mapping):
        return {
            "tool_call_id": f"call_{index}",
            "function_name": "",
            "arguments": {"value": _json_safe(call)},
        }
    function = call.get("function")
    if not isinstance(function, Mapping):
        function = call  # a flat {"id", "name", "arguments"} call
    call_id = call.get("id")
    name = function.get("name")
    return {
        "tool_call_id": str(call_id) if call_id else f"call_{index}",
        "function_name": "" if name is None else str(name),
        "arguments": _arguments(function.get("arguments")),
    }


def _arguments(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return {"_raw": raw}
    value = _json_safe(value)
    return value if isinstance(value, dict) else {"value": value}


def _add_result(step: Step, message: Mapping[str, Any]) -> None:
    call_id = message.get("tool_call_id")
    result: dict[str, Any] = {}
    matched = isinstance(call_id, str) and any(
        call["tool_call_id"] == call_id for call in step.get("tool_calls", ())
    )
    if matched:
        result["source_call_id"] = call_id
    result["content"] = _text(message.get("content"))
    if call_id is not None and not matched:
        result["extra"] = {"tool_call_id": _json_safe(call_id)}
    _observation_results(step).append(result)


def _observation_results(step: Step) -> list[dict[str, Any]]:
    observation = step.get("observation")
    if observation is None:
        # Insert before the trailing keys so the document keeps ATIF's field order.
        trailing = {key: step.pop(key) for key in _AFTER_OBSERVATION if key in step}
        observation = step["observation"] = {"results": []}
        step.update(trailing)
    results: list[dict[str, Any]] = observation["results"]
    return results


def _metrics(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, Mapping):
        return None
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    counts = {
        "prompt_tokens": _count(usage, "prompt_tokens", "input_tokens"),
        "completion_tokens": _count(usage, "completion_tokens", "output_tokens"),
        "cached_tokens": _count(details, "cached_tokens") if isinstance(details, Mapping) else None,
    }
    if counts["cached_tokens"] is None:
        counts["cached_tokens"] = _count(usage, "cached_tokens")
    return {key: value for key, value in counts.items() if value is not None} or None


def _count(usage: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = usage.get(key)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
    return None


def _timestamp(message: Mapping[str, Any]) -> str | None:
    for key in _TIMESTAMP_KEYS:
        value = message.get(key)
        if value is not None:
            iso = _iso_8601(value)
            if iso is not None:
                return iso
    return None


def _iso_8601(value: Any) -> str | None:
    """Return an ISO 8601 string for an epoch number or an ISO string; None if neither."""
    try:
        if isinstance(value, str):
            datetime.fromisoformat(value)
            return value
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return datetime.fromtimestamp(float(value), tz=UTC).isoformat()
    except (ValueError, OverflowError, OSError):
        return None
    return None


def _json_safe(value: Any) -> Any:
    """Copy a value into JSON types: non-finite floats become None, unknown objects strings."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is dict or isinstance(value, Mapping):
        return {
            key if type(key) is str else str(key): _json_safe(item) for key, item in value.items()
        }
    if kind is list or isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return _json_scalar(value)


def _json_scalar(value: Any) -> Any:
    if isinstance(value, str):
        return str(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    return str(value)
