"""``osmosis_run._json.encode``: orjson for the JSON types, pydantic-core for the rest, one output.

Every case is compared with ``pydantic_core.to_json(value, inf_nan_mode="null", fallback=str)``,
the encoder alone before orjson was added. With a recent pydantic-core (the one a fresh install
gets) the comparison is byte for byte, so switching encoders changed no file a run writes. Older
pydantic-core releases (those of pydantic 2.7 to 2.11, which CI also tests) write large floats
as ``1e16`` where orjson and recent pydantic-core write ``1e+16``: there the comparison is of the
values, and both outputs must be strict JSON.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
import random
import struct
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pydantic
import pydantic_core
import pytest
from conftest import qa_rows, write_jsonl
from typer.testing import Result

from osmosis_run import _json
from osmosis_run._json import encode

ECHO = ["--workflow", "eval_flows:Echo", "--grader", "eval_flows:ExactMatch"]


def before(value: Any) -> bytes:
    """What ``encode`` wrote before orjson."""
    return pydantic_core.to_json(value, inf_nan_mode="null", fallback=str)


# A pydantic-core that formats floats as orjson does.
SAME_BYTES = before([1e16]) == orjson.dumps([1e16])


def as_before(value: Any) -> None:
    """``encode(value)`` is what pydantic-core writes: the same bytes, or (an older one) values."""
    got, expected = encode(value), before(value)
    if SAME_BYTES:
        assert got == expected, value
    else:  # strict JSON (no NaN or Infinity literal), holding the same values
        assert json.loads(got, parse_constant=_refuse) == json.loads(
            expected, parse_constant=_refuse
        ), value


def _refuse(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


def random_floats(count: int, seed: int) -> list[float]:
    """Doubles from random bit patterns: every exponent, subnormals, NaNs and infinities."""
    rng = random.Random(seed)
    return [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(count)]


# Where float formatting switches notation or loses digits, and the extremes.
EDGE_FLOATS = [
    0.0,
    -0.0,
    1.0,
    -1.5,
    0.1,
    0.30000000000000004,
    1e-4,
    1e-5,
    1e-7,
    123456789012345.6,
    999999999999999.9,
    1e15,
    9999999999999998.0,
    1e16,
    1e17,
    1.5e300,
    -2e-300,
    5e-324,
    2.2250738585072014e-308,
    sys.float_info.max,
    math.pi,
    1796156982.732,  # a finished_at
    0.047,  # a rounded latency
]


class Colour(enum.Enum):
    RED = "red"
    NUMBER = 2


class Kind(enum.StrEnum):
    ONE = "one"


class Level(enum.IntEnum):
    HIGH = 3


class Text(str):
    def __str__(self) -> str:
        return "not what json writes"


@dataclasses.dataclass
class Point:
    x: int
    y: float


class Model(pydantic.BaseModel):
    name: str
    score: float


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


# -- the JSON types: orjson, with pydantic-core's bytes ------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_floats_are_written_as_before(seed: int) -> None:
    floats = random_floats(20_000, seed)
    assert any(abs(f) >= 1e16 for f in floats)  # exponent notation, where orjson once differed
    for value in floats:
        as_before(value)
    as_before(floats)


@pytest.mark.parametrize("value", EDGE_FLOATS, ids=repr)
def test_edge_floats_are_written_as_before(value: float) -> None:
    as_before(value)
    as_before(-value)


def test_nan_and_infinities_become_null() -> None:
    value = {"nan": math.nan, "values": [math.inf, -math.inf, 1.0]}
    assert encode(value) == b'{"nan":null,"values":[null,null,1.0]}'
    as_before(value)


@pytest.mark.parametrize(
    "value",
    [0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1, True, False, None],
    ids=repr,
)
def test_integers_and_constants_are_written_as_before(value: Any) -> None:
    as_before(value)


def test_every_code_point_is_escaped_or_kept_as_before() -> None:
    points = [*range(0xD800), *range(0xE000, 0x110000)]  # everything but the surrogates
    for start in range(0, len(points), 4096):
        text = "".join(chr(p) for p in points[start : start + 4096])
        as_before(text)
    for point in range(0x80):  # each ASCII character alone, inside text and as a key
        text = f'a{chr(point)}"\\{chr(point)}'
        as_before({text: text})


@pytest.mark.parametrize(
    "value",
    [
        {"rollout_id": "r0.s0", "reward": 1.0, "metrics": {}, "messages": [{"role": "user"}]},
        [1, (2, 3.5), {"a": None}, [], {}],
        (1, "two", [3.0]),
        {"e": Colour.RED, "n": Colour.NUMBER, "k": Kind.ONE, "level": Level.HIGH},
        {"id": uuid.UUID(int=5)},
        {"ünïcode ✓": "日本語 🎉", "ctrl": "\x00\x1f\x7f\u2028"},
    ],
    ids=["rollout", "mixed", "tuple", "enums", "uuid", "unicode"],
)
def test_json_shaped_values_are_written_as_before(value: Any) -> None:
    as_before(value)


# -- what orjson refuses: pydantic-core, as before ---------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        {1: "int key"},
        {(1, 2): "tuple key"},
        {"big": 2**64},
        -(2**63) - 1,
        {1, 2, 3},
        frozenset({"a"}),
        b"bytes",
        Text("a str subclass"),
        {"key": Text("a str subclass")},
        Point(1, 2.5),
        datetime.datetime(2026, 12, 1, 20, 0, 0, 123456, tzinfo=datetime.UTC),
        datetime.date(2026, 12, 1),
        decimal.Decimal("1.10"),
        Path("/tmp/x"),
        Model(name="m", score=0.5),
        np.float64(0.25),
        np.int64(7),
        object(),
    ],
    ids=lambda value: type(value).__name__,
)
def test_what_orjson_refuses_is_written_as_before(value: Any) -> None:
    with pytest.raises(TypeError):
        orjson.dumps(value, option=_json._FAST)
    assert encode(value) == before(value)


def test_nan_beside_what_orjson_refuses_is_still_null() -> None:
    # pydantic-core writes this document (a date, an int beyond 64 bits): it must not write NaN,
    # as pydantic 2.6's did.
    value = {"at": datetime.date(2026, 12, 2), "big": 2**70, "score": math.nan, "r": [-math.inf]}
    with pytest.raises(TypeError):
        orjson.dumps(value, option=_json._FAST)
    assert (
        encode(value) == b'{"at":"2026-12-02","big":1180591620717411303424,"score":null,"r":[null]}'
    )


def test_nesting_is_written_as_deep_as_before_and_no_deeper() -> None:
    as_before(nested(254))
    for encoder in (encode, before):  # both refuse 255 levels: the rollout is unwritable
        with pytest.raises(ValueError, match="depth"):
            encoder(nested(255))


def test_a_lone_surrogate_is_still_a_value_error() -> None:
    with pytest.raises(ValueError, match="surrogate"):
        encode({"content": "\ud800"})
    assert _json.unencodable({"content": "\ud800"}, path="sample") is not None


# -- a run writes through orjson alone --------------------------------------------------


def test_an_eval_writes_every_document_without_the_fallback(
    cli: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documents of ordinary rollouts are JSON types only: pydantic-core is never needed."""
    fallbacks: list[Any] = []

    def counted(value: Any, **options: Any) -> bytes:
        fallbacks.append(value)
        return pydantic_core.to_json(value, **options)

    monkeypatch.setattr(pydantic_core, "to_json", counted)
    dataset = write_jsonl(tmp_path / "data.jsonl", qa_rows(5, metadata={"topic": "math"}))
    out = tmp_path / "run"
    result = cli("eval", str(dataset), *ECHO, "--out", str(out))
    assert result.exit_code == 0, result.output
    written = sorted(out.glob("rollouts/*/*.json"))
    assert len(written) == 10  # result.json and trajectory.json of each of the 5 rollouts
    assert len((out / "results.jsonl").read_text(encoding="utf-8").splitlines()) == 5
    assert fallbacks == []
