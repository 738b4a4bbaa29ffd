"""JSON encoding for what a run writes: strict JSON (no NaN), never failing on odd values.

Two encoders, one output. orjson writes the JSON types themselves (str, int within 64 bits, float,
bool, None, lists, tuples, dicts with str keys, enums, UUIDs) three times faster than pydantic-core
and, from orjson 3.11.7 on (the declared floor), byte for byte as recent pydantic-core does: the
same shortest float repr (``1e+16``), the same escapes, raw UTF-8. It refuses everything else
(subclasses of the JSON types, dataclasses, datetimes, sets, bytes, models, big ints, non-str
keys, lone surrogates, deep nesting), and pydantic-core encodes those as before;
``tests/test_json.py`` holds the two to the same bytes. (pydantic-core before 2.42 or so writes
``1e16``, the same number. pydantic 2.6's wrote NaN where it was asked for null, so a NaN beside
a date was not JSON: 2.7.0, the first to write null, is the declared floor.)

Strings must be valid Unicode and bytes UTF-8 text: a lone surrogate (``"\\ud800"``) or bytes such
as ``b"\\xff"`` in what a workflow returns cannot be written as JSON. ``encode`` raises
``ValueError`` then, and ``unencodable`` names the value, so that the runner records that
rollout as a ``validation_error`` instead of failing the run.
"""

from __future__ import annotations

from typing import Any

import orjson
import pydantic_core

__all__ = ["encode", "unencodable"]

# What orjson would otherwise write its own way: a str subclass's own methods, a dataclass's or a
# datetime's form. Refused, they go to pydantic-core.
_FAST = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS
_FAST |= orjson.OPT_PASSTHROUGH_DATETIME
_dumps = orjson.dumps


def encode(value: Any) -> bytes:
    """Encode as compact UTF-8 JSON: NaN and infinities become null, unknown objects ``str()``.

    This runs three times per rollout (its results line, result.json, trajectory.json): orjson
    first, pydantic-core for what orjson refuses (the module's docstring).

    Raises:
        ValueError: a string holds a lone surrogate, or bytes are not UTF-8 text.
    """
    try:
        return _dumps(value, option=_FAST)
    except TypeError:  # orjson.JSONEncodeError: a value outside the JSON types
        return pydantic_core.to_json(value, inf_nan_mode="null", fallback=str)


def unencodable(value: Any, *, path: str) -> str | None:
    """Where ``value`` holds something ``encode`` refuses, and what: ``None`` if nothing.

    Walks dicts, lists and tuples without recursion, e.g. ``messages[1].content holds a lone
    surrogate (\\ud800)``.
    """
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            for key, child in reversed(item.items()):
                problem = _text_problem(key)
                if problem is not None:
                    return f"{where} has a key that {problem}"
                stack.append((f"{where}.{key}" if where else str(key), child))
        elif isinstance(item, list | tuple):
            stack.extend((f"{where}[{i}]", child) for i, child in reversed(list(enumerate(item))))
        else:
            problem = _text_problem(item)
            if problem is None and not isinstance(item, str | bytes | int | float | bool):
                problem = _other_problem(item)
            if problem is not None:
                return f"{where} {problem}"
    return None


def _text_problem(item: object) -> str | None:
    if isinstance(item, str):
        try:
            item.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = item[exc.start : exc.end].encode("unicode_escape").decode("ascii")
            return f"holds a lone surrogate ({bad}); text must be valid Unicode"
    elif isinstance(item, bytes | bytearray):
        try:
            bytes(item).decode("utf-8")
        except UnicodeDecodeError as exc:
            return (
                f"is bytes that are not UTF-8 text (byte 0x{item[exc.start]:02x} at {exc.start}); "
                "return text (str)"
            )
    return None


def _other_problem(item: object) -> str | None:
    try:
        encode(item)
    except ValueError as exc:
        return f"cannot be written as JSON ({type(item).__name__}: {exc})"
    return None
