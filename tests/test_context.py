"""What workflows and graders receive, ``set_reward``, and the ambient ``RolloutContext``."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from conftest import stable_id
from pydantic import ValidationError

from osmosis_run import (
    AgentWorkflowConfig,
    AgentWorkflowContext,
    GraderContext,
    RolloutContext,
    RolloutSample,
    SampleSource,
    get_rollout_context,
)

ENV_VARS = ("OSMOSIS_CHAT_COMPLETIONS_URL", "OSMOSIS_API_KEY", "OSMOSIS_ROLLOUT_ID")


@pytest.fixture(autouse=True)
def _no_osmosis_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


class FixedSource(SampleSource):
    def __init__(self, sample: RolloutSample) -> None:
        self.sample = sample

    async def get_sample(self) -> RolloutSample:
        return self.sample


# --- AgentWorkflowContext and GraderContext -----------------------------------------------


def test_workflow_context_fields_and_no_label() -> None:
    config = AgentWorkflowConfig(name="w")
    ctx = AgentWorkflowContext(
        prompt=[{"role": "user", "content": "hi"}],
        config=config,
        metadata={"k": 1},
        artifacts_dir=Path("/tmp/x"),
    )
    assert (ctx.prompt, ctx.config, ctx.metadata, ctx.artifacts_dir) == (
        [{"role": "user", "content": "hi"}],
        config,
        {"k": 1},
        Path("/tmp/x"),
    )
    assert [field.name for field in dataclasses.fields(ctx)] == [
        "prompt",
        "config",
        "metadata",
        "artifacts_dir",
    ]
    assert AgentWorkflowContext(prompt=[]).config is None


def test_grader_context_defaults() -> None:
    ctx = GraderContext(label="4", sample=None)
    assert (ctx.metadata, ctx.project_path, ctx.artifacts_dir) == (None, None, None)


@pytest.mark.parametrize(
    ("reward", "expected"),
    [
        (1, 1.0),
        (0, 0.0),
        (0.5, 0.5),
        (-3.5, -3.5),
        (np.float32(0.25), 0.25),
        (np.float64(0.75), 0.75),
        (np.int64(1), 1.0),
        (Decimal("0.5"), 0.5),
    ],
)
def test_set_reward_stores_finite_numbers_as_float(reward: float, expected: float) -> None:
    ctx = GraderContext(label="x", sample=RolloutSample())
    ctx.set_reward(reward)
    assert ctx.sample is not None
    assert ctx.sample.reward == expected
    assert type(ctx.sample.reward) is float


@pytest.mark.parametrize(
    "reward",
    [
        math.nan,
        math.inf,
        -math.inf,
        np.nan,
        np.float64("inf"),
        "0.5",
        "abc",
        True,
        False,
        np.bool_(True),
        None,
        object(),
        [0.5],
        {"reward": 1.0},
        1 + 0j,
        10**400,
        Decimal("NaN"),
    ],
    ids=stable_id,
)
def test_set_reward_rejects_everything_else_with_validation_error(reward: object) -> None:
    sample = RolloutSample(reward=0.5)
    ctx = GraderContext(label="x", sample=sample)
    with pytest.raises(ValidationError) as exc:
        ctx.set_reward(reward)  # type: ignore[arg-type]
    assert exc.value.title == "RolloutSample"
    assert [error["loc"] for error in exc.value.errors()] == [("reward",)]
    assert sample.reward == 0.5


def test_set_reward_none_names_the_problem() -> None:
    with pytest.raises(ValidationError) as exc:
        GraderContext(label="x", sample=RolloutSample()).set_reward(None)  # type: ignore[arg-type]
    assert exc.value.errors()[0]["msg"] == "Input should be a valid number"


def test_set_reward_without_sample_is_a_value_error() -> None:
    ctx = GraderContext(label="x", sample=None)
    with pytest.raises(ValueError, match="no sample") as exc:
        ctx.set_reward(1.0)
    assert type(exc.value) is ValueError
    assert str(exc.value) == "GraderContext has no sample to reward"


# --- RolloutContext -----------------------------------------------------------------------


def test_no_ambient_context_by_default() -> None:
    assert get_rollout_context() is None


def test_entering_sets_the_ambient_context_and_leaving_clears_it() -> None:
    ctx = RolloutContext(rollout_id="r1")
    with ctx as entered:
        assert entered is ctx
        assert get_rollout_context() is ctx
    assert get_rollout_context() is None


def test_inner_context_restores_the_outer_one() -> None:
    outer = RolloutContext(rollout_id="outer", chat_completions_url="http://llm/v1")
    inner = RolloutContext(rollout_id="inner")
    with outer:
        with inner:
            assert get_rollout_context() is inner
        assert get_rollout_context() is outer
        with outer:  # re-entering the same context nests too
            assert get_rollout_context() is outer
        assert get_rollout_context() is outer
    assert get_rollout_context() is None


def test_context_is_restored_when_the_block_raises() -> None:
    outer = RolloutContext(rollout_id="outer")
    with outer:
        with pytest.raises(RuntimeError), RolloutContext(rollout_id="inner"):
            raise RuntimeError("boom")
        assert get_rollout_context() is outer


def test_context_entered_in_one_task_is_invisible_to_another() -> None:
    async def enter_and_wait(started: asyncio.Event, done: asyncio.Event) -> str | None:
        with RolloutContext(rollout_id="task-a"):
            started.set()
            await done.wait()
            current = get_rollout_context()
            return current.rollout_id if current else None

    async def look(started: asyncio.Event, done: asyncio.Event) -> RolloutContext | None:
        await started.wait()
        seen = get_rollout_context()
        done.set()
        return seen

    async def main() -> tuple[str | None, RolloutContext | None]:
        started, done = asyncio.Event(), asyncio.Event()
        first, second = await asyncio.gather(enter_and_wait(started, done), look(started, done))
        return first, second

    assert asyncio.run(main()) == ("task-a", None)


def test_api_key_is_not_in_repr() -> None:
    ctx = RolloutContext(chat_completions_url="http://llm/v1", api_key="sk-secret-123")
    assert "sk-secret-123" not in repr(ctx)
    assert "api_key" not in repr(ctx)
    assert "http://llm/v1" in repr(ctx)


def test_empty_fields_are_filled_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSMOSIS_CHAT_COMPLETIONS_URL", "http://env/v1")
    monkeypatch.setenv("OSMOSIS_API_KEY", "sk-env")
    monkeypatch.setenv("OSMOSIS_ROLLOUT_ID", "env-id")
    ctx = RolloutContext()
    assert (ctx.chat_completions_url, ctx.api_key, ctx.rollout_id) == (
        "http://env/v1",
        "sk-env",
        "env-id",
    )
    explicit = RolloutContext(chat_completions_url="http://x/v1", api_key="sk-x", rollout_id="x")
    assert (explicit.chat_completions_url, explicit.api_key, explicit.rollout_id) == (
        "http://x/v1",
        "sk-x",
        "x",
    )


def test_defaults_without_environment() -> None:
    ctx = RolloutContext()
    assert (ctx.chat_completions_url, ctx.api_key, ctx.rollout_id, ctx.sample_source) == (
        "",
        None,
        "",
        None,
    )


def test_get_sample_comes_from_the_registered_source() -> None:
    sample = RolloutSample(messages=[{"role": "assistant", "content": "hi"}])
    ctx = RolloutContext(rollout_id="r")
    assert asyncio.run(ctx.get_sample()) is None
    ctx.set_sample_source(FixedSource(sample))
    assert asyncio.run(ctx.get_sample()) is sample


def test_second_sample_source_is_refused() -> None:
    ctx = RolloutContext(rollout_id="r")
    first = FixedSource(RolloutSample())
    ctx.set_sample_source(first)
    with pytest.raises(ValueError, match="already has a sample source") as exc:
        ctx.set_sample_source(FixedSource(RolloutSample()))
    assert str(exc.value) == (
        "RolloutContext already has a sample source registered; "
        "create one agent integration per rollout"
    )
    assert ctx.sample_source is first


def test_sample_source_preview_defaults_to_none() -> None:
    assert asyncio.run(FixedSource(RolloutSample()).get_preview(5)) is None
