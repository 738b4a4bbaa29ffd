"""construct(): the same instances as pydantic's model_construct, or model_construct itself."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, RootModel

from osmosis_run._construct import construct
from osmosis_run.results.records import ResultLine, Summary
from osmosis_run.sdk.types import (
    ExecutionOutcome,
    ExecutionRequest,
    ExecutionResult,
    RolloutSample,
    RolloutStatus,
)


def state(model: BaseModel) -> tuple[Any, ...]:
    """Everything an instance holds, __dict__ order included."""
    return (
        type(model),
        list(model.__dict__.items()),
        model.model_fields_set,
        model.__pydantic_extra__,
        model.__pydantic_private__,
    )


SAMPLE = RolloutSample.model_validate({"messages": [{"role": "user", "content": "hi"}]})
RESULT = ExecutionResult.model_validate({"status": RolloutStatus.SUCCESS, "sample": SAMPLE})
CASES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (ExecutionRequest, {"id": "r.s0", "prompt": [{"role": "user", "content": "x"}]}),
    (ExecutionRequest, {"id": "r.s0", "prompt": [], "label": "4", "grade": False}),
    (ExecutionResult, {"status": RolloutStatus.SUCCESS, "sample": SAMPLE}),
    (ExecutionOutcome, {"workflow": RESULT, "grader": None}),
    (RolloutSample, {"messages": [{"role": "assistant", "content": "4"}], "reward": 1.0}),
    (
        ResultLine,
        {"rollout_id": "a.s0", "row_index": 0, "line": 1, "sample_index": 0, "status": "success"},
    ),
    (
        ResultLine,
        {
            "status": "failure",
            "sample_index": 1,
            "line": 3,
            "row_index": 2,
            "rollout_id": "b.s1",
            "metrics": {"m": 1},
            "finished_at": 5.0,
        },
    ),
    (Summary, {}),
    (Summary, {"rollouts": 3, "counts": {"success": 3}}),
]


@pytest.mark.parametrize(("cls", "values"), CASES)
def test_construct_builds_what_model_construct_builds(
    cls: type[BaseModel], values: dict[str, Any]
) -> None:
    assert state(construct(cls, **values)) == state(cls.model_construct(**values))


def test_default_factories_give_each_instance_its_own_value() -> None:
    first = construct(Summary)
    second = construct(Summary)
    first.counts["success"] = 1
    assert second.counts == {}


class Aliased(BaseModel):
    name: str = Field(alias="Name")


class Private(BaseModel):
    x: int = 0
    _cache: dict[str, int] = PrivateAttr(default_factory=dict)


class Extra(BaseModel):
    model_config = ConfigDict(extra="allow")
    x: int = 0


@pytest.mark.parametrize(
    ("cls", "values"),
    [
        (Aliased, {"Name": "n"}),
        (Private, {"x": 1}),
        (RootModel[list[int]], {"root": [1]}),
        (Extra, {"x": 1, "other": 2}),  # a key that is not a field: pydantic's rules for extras
        (ExecutionRequest, {"prompt": []}),  # a required field missing
        (ExecutionRequest, {"id": "r", "prompt": [], "unknown": 1}),
    ],
)
def test_what_the_plan_cannot_reproduce_goes_to_model_construct(
    cls: type[BaseModel], values: dict[str, Any]
) -> None:
    assert state(construct(cls, **values)) == state(cls.model_construct(**values))


@pytest.mark.skipif(
    tuple(int(part) for part in pydantic.VERSION.split(".")[:2]) < (2, 10),
    reason=f"pydantic {pydantic.VERSION}: no default factory takes the validated data",
)
def test_a_factory_that_reads_other_fields_goes_to_model_construct() -> None:
    class Derived(BaseModel):
        a: int = 1
        b: int = Field(default_factory=lambda data: data["a"] + 1)

    built = construct(Derived, a=2)
    assert state(built) == state(Derived.model_construct(a=2))
    assert built.b == 3
