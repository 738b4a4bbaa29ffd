"""The rollout server's wire protocol, "0.4" (osmosis-ai 0.3.8): bodies, errors, result shaping.

Same field names, validation and messages as osmosis-ai's ``rollout.types.protocol``, and the
same 422 bodies its FastAPI app gives (``{"detail": [{"type", "loc", "msg", "input", "ctx"}]}``),
so a client written for either server reads both. JSON goes out compact, as Starlette's
``JSONResponse`` writes it. No web framework is imported here.

    POST /rollout                  RolloutInitRequest -> 202 RolloutInitResponse
    GET  /rollout/{id}/result      header X-Osmosis-Rollout-Lease -> 200 RolloutResultResponse
    POST /rollout/cancel           CancelRolloutsRequest -> 200 {"dispositions": {...}}
    GET  /health                   the backend's health, instance and lifecycle
"""

from __future__ import annotations

import json
import math
import numbers
import re
import sys
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel, ValidationError, field_validator

from osmosis_run.run.dataset import MAX_NESTING, dotted, find_lone_surrogate, too_deep_at
from osmosis_run.sdk.types import (
    ExecutionOutcome,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
)

__all__ = [
    "LEASE_HEADER",
    "MAX_ROLLOUT_ID_BYTES",
    "PROTOCOL_VERSION",
    "CancelRolloutsRequest",
    "RolloutInitRequest",
    "ProtocolError",
    "dumps",
    "parse_body",
    "result_body",
    "status_body",
    "validation_detail",
]

PROTOCOL_VERSION = "0.4"
MAX_ROLLOUT_ID_BYTES = 255
"""A rollout id names a directory: the longest file name ext4, XFS, Btrfs and tmpfs allow."""
LEASE_HEADER = "X-Osmosis-Rollout-Lease"
_SEPARATORS = (",", ":")
_DROP = object()


class ProtocolError(Exception):
    """A request the protocol refuses: its HTTP status and the ``detail`` of its body."""

    def __init__(self, status: int, detail: Any, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers or {}


def _single_segment(value: str, label: str) -> str:
    if (
        not value
        or value in (".", "..")
        or "\x00" in value
        or "/" in value
        or "\\" in value
        or PurePath(value).name != value
    ):
        raise ValueError(
            f"{label} must be a single path segment (no path separators, and not '.' or '..')"
        )
    return value


class RolloutInitRequest(BaseModel):
    """The body of ``POST /rollout``: one rollout to run, and where its model calls go."""

    initial_messages: list[dict[str, Any]]
    label: str | None = None
    metadata: dict[str, Any] | None = None
    rollout_id: str
    chat_completions_url: str
    llm_api_key: str | None = None
    grade: bool = True
    agent_timeout_sec: float | None = None
    grader_timeout_sec: float | None = None
    extra_fields: dict[str, Any] | None = None

    @field_validator("rollout_id")
    @classmethod
    def _rollout_id(cls, value: str) -> str:
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > MAX_ROLLOUT_ID_BYTES:
            raise ValueError(
                f"rollout_id must be at most {MAX_ROLLOUT_ID_BYTES} bytes in UTF-8 (got {size}): "
                "it names the rollout's directory in the run directory"
            )
        return _single_segment(value, "rollout_id")

    @field_validator("llm_api_key")
    @classmethod
    def _llm_api_key(cls, value: str | None) -> str | None:
        if value == "":
            raise ValueError("llm_api_key must be omitted or a non-empty string")
        return value

    @field_validator("agent_timeout_sec", "grader_timeout_sec")
    @classmethod
    def _timeout(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("timeout must be finite; omit it to run unbounded")
        return value


class CancelRolloutsRequest(BaseModel):
    """The body of ``POST /rollout/cancel``: exactly one of ``ids``, ``prefix`` or ``all``."""

    ids: list[str] | None = None
    prefix: str | None = None
    all: bool = False

    def selectors(self) -> int:
        """How many selectors the body gives (the protocol wants exactly one)."""
        return (self.ids is not None) + (self.prefix is not None) + bool(self.all)


def dumps(value: Any) -> bytes:
    """Compact JSON, as the SDK's server writes it (UTF-8, no NaN or Infinity)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=_SEPARATORS).encode(
        "utf-8"
    )


def parse_body(model: type[BaseModel], body: bytes, content_type: str | None) -> Any:
    """Validate a request body as FastAPI would; a refusal is a 422 with its detail list.

    JSON is parsed when the content type is JSON or absent; any other body is validated as
    the text it is (and refused: it is not an object).

    Raises:
        ProtocolError: 422 with FastAPI's detail list.
    """
    if not body:
        raise ProtocolError(
            422, [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}]
        )
    data: Any
    text: str | None = None
    if content_type is None or _is_json(content_type):
        try:
            # As json.loads reads bytes (UTF-8, -16 or -32), but strictly: no surrogates.
            text = body.decode(json.detect_encoding(body))
        except UnicodeDecodeError:
            text, data = None, body.decode("utf-8", errors="replace")
        else:
            data = _loads(text)
    else:
        data = body.decode("utf-8", errors="replace")
    if not isinstance(data, dict):
        raise ProtocolError(
            422,
            [
                {
                    "type": "model_attributes_type",
                    "loc": ["body"],
                    "msg": "Input should be a valid dictionary or object to extract fields from",
                    "input": _safe(data),
                }
            ],
        )
    if text is not None:
        _check_text(data, text)
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError(422, validation_detail(exc, "body")) from None
    if text is not None and _NOT_FINITE.search(text):
        _check_numbers(data)
    return parsed


def _loads(text: str) -> Any:
    """The body's JSON; a refusal is FastAPI's ``json_invalid``, naming what is wrong.

    An integer of more digits than ``int()`` reads and nesting deep enough to exhaust the
    stack are refused here, not raised.

    Raises:
        ProtocolError: 422.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _json_invalid(exc.pos, exc.msg) from None
    except RecursionError:
        raise _json_invalid(0, _TOO_DEEP) from None
    except ValueError:  # an integer of more digits than int() reads
        reason = f"a number is too long (more than {sys.get_int_max_str_digits()} digits)"
        raise _json_invalid(0, f"{reason}; send it as a string") from None


_TOO_DEEP = f"nested deeper than {MAX_NESTING} levels of objects and arrays"
# Only a body holding one of these can hold a number that is not finite: NaN and Infinity
# (which json reads), and a float too large for a double (1e999).
_NOT_FINITE = re.compile(r"NaN|Infinity|[eE]\+?0*[1-9]\d{2}|\d{309}")


def _json_invalid(position: int, reason: str) -> ProtocolError:
    return ProtocolError(
        422,
        [
            {
                "type": "json_invalid",
                "loc": ["body", position],
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": reason},
            }
        ],
    )


def _check_text(data: dict[str, Any], text: str) -> None:
    """Refuse what a run directory cannot hold, as ``eval`` refuses such a row: objects and
    arrays nested deeper than ``MAX_NESTING``, and text holding a lone surrogate (valid JSON,
    ``"\\ud800"``, that no file can be written with), naming the field. Before the model's
    own checks: their error bodies echo what they refuse, and no body can hold a surrogate.

    Cheap tests first: only a body with that many brackets can be that deep, and only an
    escape can make a lone surrogate (the body itself is UTF-8).

    Raises:
        ProtocolError: 422 naming the field.
    """
    if text.count("{") + text.count("[") > MAX_NESTING:
        deep = too_deep_at(data)
        if deep is not None:
            field = str(deep[0])
            raise _refused(
                "too_deep", [field], f"{field} is {_TOO_DEEP}; flatten it or send it as a string"
            )
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        found = find_lone_surrogate(data)
        if found is not None:
            path, bad, is_key = found
            what = "has a key that holds" if is_key else "holds"
            field = dotted(path) or "the body"
            message = f"{field} {what} a lone surrogate ({bad}); text must be valid Unicode"
            raise _refused("string_unicode", path, message)


def _check_numbers(data: dict[str, Any]) -> None:
    """Refuse NaN, Infinity and overflowing floats anywhere (JSON has no room for them).

    Raises:
        ProtocolError: 422 naming the field.
    """
    stack: list[tuple[list[str | int], Any]] = [([], data)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            where = dotted(path)
            raise _refused(
                "finite_number",
                path,
                f"{where} is not a finite number ({item}); send a finite number, null or a string",
            )
        children = (
            item.items()
            if isinstance(item, dict)
            else enumerate(item)
            if isinstance(item, list)
            else ()
        )
        stack.extend(([*path, key], child) for key, child in children)


def _refused(kind: str, path: list[str | int], message: str) -> ProtocolError:
    return ProtocolError(
        422, [{"type": kind, "loc": ["body", *path], "msg": message, "input": None}]
    )


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _is_json(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )


def validation_detail(exc: ValidationError, where: str) -> list[dict[str, Any]]:
    """Pydantic's errors as FastAPI lists them: ``loc`` starts with ``where``; JSON-safe."""
    detail = []
    for error in exc.errors(include_url=False):
        item: dict[str, Any] = {
            "type": error["type"],
            "loc": [where, *error["loc"]],
            "msg": error["msg"],
            "input": _safe(error.get("input")),
        }
        if "ctx" in error:
            item["ctx"] = {
                key: {} if isinstance(value, Exception) else _safe(value)
                for key, value in error["ctx"].items()
            }
        detail.append(item)
    return detail


def _safe(value: Any) -> Any:
    """A value for an error body: non-finite numbers as text (``inf``), the rest as JSON can."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    fitted = _fit(value, [])
    return None if fitted is _DROP else fitted


def status_body(rollout_id: str, status: RolloutStatus) -> bytes:
    """The body of a poll that found the rollout still in flight."""
    return dumps(
        {
            "rollout_id": rollout_id,
            "status": str(status),
            "sample": None,
            "err_message": None,
            "err_category": None,
        }
    )


def result_body(rollout_id: str, outcome: ExecutionOutcome) -> bytes:
    """The final body of a rollout, shaped for the wire as the SDK's server shapes it.

    The sample loses ``trajectory_messages``; values JSON cannot hold are dropped from its
    metrics and extra fields; a sample that still cannot be encoded is sent as its reward
    alone; the reward is null unless the rollout succeeded and keeps its sample.
    """
    result = outcome.result
    sample = _wire_sample(result.sample) if result.sample is not None else None
    if sample is not None and (result.status != RolloutStatus.SUCCESS or sample["remove_sample"]):
        sample["reward"] = None
    message = result.err_message
    body = {
        "rollout_id": rollout_id,
        "status": str(result.status),
        "sample": sample,
        "err_message": message.encode("utf-8", errors="replace").decode()
        if message is not None
        else None,
        "err_category": str(result.err_category) if result.err_category is not None else None,
    }
    return dumps(body)


def _wire_sample(sample: RolloutSample) -> dict[str, Any]:
    dropped: list[str] = []
    wire = {
        "messages": list(sample.messages),
        "label": sample.label,
        "reward": sample.reward,
        "remove_sample": sample.remove_sample,
        "metrics": _fit_map(sample.metrics, dropped),
        "extra_fields": _fit_map(sample.extra_fields, dropped),
    }
    try:
        dumps(wire)
    except (TypeError, ValueError, RecursionError):
        label = sample.label
        return {
            "messages": [],
            "label": label.encode("utf-8", errors="replace").decode() if label else label,
            "reward": sample.reward,
            "remove_sample": sample.remove_sample,
            "metrics": {},
            "extra_fields": {},
        }
    return wire


def _fit_map(value: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    fitted = _fit(value, dropped)
    return fitted if isinstance(fitted, dict) else {}


def _fit(value: Any, dropped: list[str]) -> Any:
    """``value`` as plain JSON: foreign numbers (NumPy's) made builtin; the rest dropped."""
    if value is None or isinstance(value, bool | str) or type(value) is int:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number):
            return number
        dropped.append(f"non-finite {type(value).__name__}")
        return _DROP
    if isinstance(value, dict):
        return _fit_dict(value, dropped)
    if isinstance(value, list | tuple):
        return [kept for item in value if (kept := _fit(item, dropped)) is not _DROP]
    dropped.append(type(value).__name__)
    return _DROP


def _fit_dict(value: dict[Any, Any], dropped: list[str]) -> dict[str, Any]:
    fitted: dict[str, Any] = {}
    for key, item in value.items():
        name = key
        if not isinstance(key, str):
            if isinstance(key, bool) or not isinstance(key, numbers.Real):
                dropped.append(f"key {type(key).__name__}")
                continue
            name = str(_fit(key, dropped))
        kept = _fit(item, dropped)
        if kept is not _DROP:
            fitted[name] = kept
    return fitted


# Wire statuses a rollout ends in, and the error category of a lease that ran out.
TERMINAL = frozenset({RolloutStatus.SUCCESS, RolloutStatus.FAILURE, RolloutStatus.CANCELLED})
LEASE_EXPIRED = RolloutErrorCategory.LEASE_EXPIRED
