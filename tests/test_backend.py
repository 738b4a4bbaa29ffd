"""LocalBackend: lifecycle, concurrency, grading rules, errors as data, artifacts."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from conftest import stable_id
from pydantic import Field, ValidationError

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    ConcurrencyConfig,
    ExecutionBackend,
    ExecutionOutcome,
    ExecutionRequest,
    ExecutionResult,
    Grader,
    GraderConfig,
    GraderContext,
    LocalBackend,
    RolloutContext,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
    SampleSource,
    get_rollout_context,
)

T = TypeVar("T")
Messages = list[dict[str, Any]]
NO_REWARD = (
    "Sample has no reward after grading: call ctx.set_reward(value), "
    "or set ctx.sample.remove_sample = True to drop the sample"
)
BAD_RETURN = "run() must return AgentWorkflowOutput, a message list, or None; got dict"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep artifacts out of the real ~/.osmosis and the model endpoint out of the env."""
    monkeypatch.setenv("OSMOSIS_ARTIFACT_ROOT", str(tmp_path / "default-root"))
    for name in ("OSMOSIS_CHAT_COMPLETIONS_URL", "OSMOSIS_API_KEY", "OSMOSIS_ROLLOUT_ID"):
        monkeypatch.delenv(name, raising=False)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def request(
    rollout_id: str = "r1",
    *,
    content: str = "4",
    label: str | None = "4",
    metadata: dict[str, Any] | None = None,
    grade: bool = True,
) -> ExecutionRequest:
    return ExecutionRequest(
        id=rollout_id,
        prompt=[{"role": "user", "content": content}],
        label=label,
        metadata=metadata,
        grade=grade,
    )


def execute_all(backend: LocalBackend, requests: list[ExecutionRequest]) -> list[ExecutionOutcome]:
    async def main() -> list[ExecutionOutcome]:
        return list(await asyncio.gather(*(backend.execute(r) for r in requests)))

    return run(main())


def answer(ctx: AgentWorkflowContext[Any]) -> Messages:
    """The prompt plus an assistant message repeating the last prompt message."""
    return [*ctx.prompt, {"role": "assistant", "content": ctx.prompt[-1]["content"]}]


class EchoWorkflow(AgentWorkflow[AgentWorkflowConfig]):
    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> Messages:
        return answer(ctx)


class ExactGrader(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == ctx.label else 0.0)


def workflow_from(
    body: Callable[[AgentWorkflowContext[Any]], Awaitable[Any]],
) -> type[AgentWorkflow[Any]]:
    """A workflow class whose ``run`` is ``body``."""

    class BodyWorkflow(AgentWorkflow[AgentWorkflowConfig]):
        async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> Any:
            return await body(ctx)

    return BodyWorkflow


def grader_from(body: Callable[[GraderContext], Awaitable[Any]]) -> type[Grader]:
    """A grader class whose ``grade`` is ``body``."""

    class BodyGrader(Grader):
        async def grade(self, ctx: GraderContext) -> Any:
            return await body(ctx)

    return BodyGrader


def failed(
    result: ExecutionResult,
) -> tuple[RolloutStatus, RolloutErrorCategory | None, str | None]:
    return result.status, result.err_category, result.err_message


# --- construction -------------------------------------------------------------------------


def test_constructor_is_keyword_only() -> None:
    with pytest.raises(TypeError) as exc:
        LocalBackend(EchoWorkflow)  # type: ignore[call-arg]
    assert str(exc.value) == "LocalBackend.__init__() takes 1 positional argument but 2 were given"


def test_backend_is_an_execution_backend_with_sdk_defaults() -> None:
    backend = LocalBackend(workflow=EchoWorkflow)
    assert isinstance(backend, ExecutionBackend)
    assert backend.has_capacity() is True
    assert backend.rollout_status("r1") is None
    assert backend.cancel_rollouts(all=True) == {}
    run(backend.shutdown())


# --- the happy path -----------------------------------------------------------------------


def test_execute_runs_workflow_then_grader() -> None:
    backend = LocalBackend(workflow=EchoWorkflow, grader=ExactGrader)
    outcome = run(backend.execute(request()))
    assert outcome.workflow.status == RolloutStatus.SUCCESS
    assert outcome.grader is not None
    assert outcome.grader.status == RolloutStatus.SUCCESS
    assert outcome.result is outcome.grader
    sample = outcome.result.sample
    assert sample is not None
    assert sample.model_dump() == {
        "messages": [{"role": "user", "content": "4"}, {"role": "assistant", "content": "4"}],
        "trajectory_messages": [
            {"role": "user", "content": "4"},
            {"role": "assistant", "content": "4"},
        ],
        "label": "4",
        "reward": 1.0,
        "remove_sample": False,
        "metrics": {},
        "extra_fields": {},
    }
    assert outcome.workflow.sample is sample  # graded in place, as the SDK does


def test_wrong_answer_gets_reward_zero() -> None:
    backend = LocalBackend(workflow=EchoWorkflow, grader=ExactGrader)
    outcome = run(backend.execute(request(content="5", label="4")))
    assert outcome.result.status == RolloutStatus.SUCCESS
    assert outcome.result.sample is not None
    assert outcome.result.sample.reward == 0.0


def test_workflow_context_gets_prompt_metadata_and_no_label() -> None:
    seen: list[AgentWorkflowContext[Any]] = []

    async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
        seen.append(ctx)
        return answer(ctx)

    run(LocalBackend(workflow=workflow_from(body)).execute(request(metadata={"k": [1]})))
    (ctx,) = seen
    assert (ctx.prompt, ctx.metadata, ctx.config) == (
        [{"role": "user", "content": "4"}],
        {"k": [1]},
        None,
    )
    assert not hasattr(ctx, "label")


def test_workflow_editing_its_prompt_leaves_the_request_alone() -> None:
    async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
        ctx.prompt.append({"role": "assistant", "content": "appended"})
        ctx.prompt[0]["content"] = "edited"
        assert ctx.metadata is not None
        ctx.metadata["k"].append(2)
        return ctx.prompt

    req = request(metadata={"k": [1]})
    run(LocalBackend(workflow=workflow_from(body)).execute(req))
    assert (req.prompt, req.metadata) == ([{"role": "user", "content": "4"}], {"k": [1]})


# --- concurrency --------------------------------------------------------------------------


@dataclass
class Tracker:
    in_flight: int = 0
    peak: int = 0


def tracking_workflow(tracker: Tracker, seconds: float = 0.05) -> type[AgentWorkflow[Any]]:
    async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
        tracker.in_flight += 1
        tracker.peak = max(tracker.peak, tracker.in_flight)
        try:
            await asyncio.sleep(seconds)
        finally:
            tracker.in_flight -= 1
        return answer(ctx)

    return workflow_from(body)


@pytest.mark.parametrize(
    ("config", "peak"),
    [
        (None, 4),
        (AgentWorkflowConfig(name="two", concurrency=ConcurrencyConfig(max_concurrent=2)), 2),
        (
            AgentWorkflowConfig(
                name="unlimited", concurrency=ConcurrencyConfig(max_concurrent=None)
            ),
            12,
        ),
    ],
    ids=["no-config", "max-2", "max-none"],
)
def test_concurrency_limit(config: AgentWorkflowConfig | None, peak: int) -> None:
    tracker = Tracker()
    backend = LocalBackend(workflow=tracking_workflow(tracker), workflow_config=config)
    assert backend.max_concurrent == (None if peak == 12 else peak)
    outcomes = execute_all(backend, [request(f"r{i}") for i in range(12)])
    assert [o.result.status for o in outcomes] == [RolloutStatus.SUCCESS] * 12
    assert tracker.peak == peak


def test_slot_is_held_through_grading() -> None:
    tracker = Tracker()

    async def grade(ctx: GraderContext) -> None:
        tracker.in_flight += 1
        tracker.peak = max(tracker.peak, tracker.in_flight)
        await asyncio.sleep(0.01)
        tracker.in_flight -= 1
        ctx.set_reward(1.0)

    config = AgentWorkflowConfig(name="one", concurrency=ConcurrencyConfig(max_concurrent=1))
    backend = LocalBackend(
        workflow=tracking_workflow(tracker, 0.01), workflow_config=config, grader=grader_from(grade)
    )
    execute_all(backend, [request(f"r{i}") for i in range(4)])
    assert tracker.peak == 1


def test_health_reports_concurrency_while_running() -> None:
    snapshots: list[dict[str, Any]] = []

    async def main() -> None:
        two_running, release = asyncio.Event(), asyncio.Event()
        running: list[str] = []

        async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
            running.append(ctx.prompt[-1]["content"])
            if len(running) == 2:
                two_running.set()
            await release.wait()
            return answer(ctx)

        config = AgentWorkflowConfig(name="two", concurrency=ConcurrencyConfig(max_concurrent=2))
        backend = LocalBackend(workflow=workflow_from(body), workflow_config=config)
        snapshots.append(backend.health())
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(backend.execute(request(f"r{i}"))) for i in range(5)]
            await two_running.wait()
            snapshots.append(backend.health())
            tasks[4].cancel()  # cancelled while still queued for a slot
            await asyncio.sleep(0)
            snapshots.append(backend.health())
            release.set()
        snapshots.append(backend.health())

    run(main())
    assert [s["concurrency"] for s in snapshots] == [
        {"max_concurrent": 2, "queued": 0, "running": 0},
        {"max_concurrent": 2, "queued": 3, "running": 2},
        {"max_concurrent": 2, "queued": 2, "running": 2},
        {"max_concurrent": 2, "queued": 0, "running": 0},
    ]
    assert {s["status"] for s in snapshots} == {"ok"}


def test_health_defaults() -> None:
    assert LocalBackend(workflow=EchoWorkflow).health() == {
        "status": "ok",
        "concurrency": {"max_concurrent": 4, "queued": 0, "running": 0},
    }
    unlimited = LocalBackend(workflow=EchoWorkflow, workflow_config=AgentWorkflowConfig(name="u"))
    assert unlimited.health()["concurrency"]["max_concurrent"] is None


# --- fresh state per execution ------------------------------------------------------------


class ListConfig(AgentWorkflowConfig):
    items: list[str] = Field(default_factory=list)


def test_each_execution_gets_its_own_deep_copy_of_the_config() -> None:
    seen: list[tuple[list[str], bool]] = []

    class MutatingWorkflow(AgentWorkflow[ListConfig]):
        async def run(self, ctx: AgentWorkflowContext[ListConfig]) -> Messages:
            assert ctx.config is not None
            ctx.config.items.append("mutated")
            ctx.config.name = "changed"
            seen.append((list(ctx.config.items), ctx.config is self.config))
            return answer(ctx)

    original = ListConfig(name="orig", items=["a"])
    backend = LocalBackend(workflow=MutatingWorkflow, workflow_config=original)
    for i in range(3):
        run(backend.execute(request(f"r{i}")))
    assert seen == [(["a", "mutated"], True)] * 3
    assert (original.name, original.items) == ("orig", ["a"])
    assert backend.workflow_config is original


def test_fresh_workflow_and_grader_instance_per_execution() -> None:
    workflows: list[AgentWorkflow[Any]] = []
    graders: list[Grader] = []

    class RecordingWorkflow(EchoWorkflow):
        async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> Messages:
            workflows.append(self)
            return answer(ctx)

    class RecordingGrader(ExactGrader):
        async def grade(self, ctx: GraderContext) -> None:
            graders.append(self)
            await super().grade(ctx)

    grader_config = GraderConfig(name="g")
    backend = LocalBackend(
        workflow=RecordingWorkflow, grader=RecordingGrader, grader_config=grader_config
    )
    execute_all(backend, [request(f"r{i}") for i in range(3)])
    run(backend.execute(request("r9")))
    assert len({id(w) for w in workflows}) == len(workflows) == 4
    assert len({id(g) for g in graders}) == len(graders) == 4
    assert all(g.config == grader_config for g in graders)


# --- the ambient RolloutContext -----------------------------------------------------------


def test_rollout_context_inside_workflow_and_grader() -> None:
    seen: list[tuple[str, str, str, str | None]] = []

    def record(stage: str) -> None:
        ctx = get_rollout_context()
        assert ctx is not None
        seen.append((stage, ctx.rollout_id, ctx.chat_completions_url, ctx.api_key))

    async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
        record("workflow")
        return answer(ctx)

    async def grade(ctx: GraderContext) -> None:
        record("grader")
        ctx.set_reward(1.0)

    backend = LocalBackend(workflow=workflow_from(body), grader=grader_from(grade))
    run(backend.execute(request("row-7.s0")))
    assert seen == [("workflow", "row-7.s0", "", None), ("grader", "row-7.s0", "", None)]
    assert get_rollout_context() is None


def test_outer_context_is_inherited_and_restored() -> None:
    seen: list[tuple[str, str, str | None]] = []

    async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
        inner = get_rollout_context()
        assert inner is not None
        seen.append((inner.rollout_id, inner.chat_completions_url, inner.api_key))
        return answer(ctx)

    backend = LocalBackend(workflow=workflow_from(body))
    outer = RolloutContext(chat_completions_url="http://llm.local/v1", api_key="sk-outer")

    async def main() -> RolloutContext | None:
        with outer:
            await backend.execute(request("a"))
            await backend.run_workflow(request("b"))
            return get_rollout_context()

    assert run(main()) is outer
    assert seen == [
        ("a", "http://llm.local/v1", "sk-outer"),
        ("b", "http://llm.local/v1", "sk-outer"),
    ]
    assert outer.rollout_id == ""
    assert get_rollout_context() is None


def test_concurrent_rollouts_each_see_their_own_id() -> None:
    async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
        await asyncio.sleep(0.01)
        current = get_rollout_context()
        assert current is not None
        return [{"role": "assistant", "content": current.rollout_id}]

    backend = LocalBackend(
        workflow=workflow_from(body), workflow_config=AgentWorkflowConfig(name="u")
    )
    outcomes = execute_all(backend, [request(f"r{i}") for i in range(10)])
    contents = [o.result.sample.messages[0]["content"] for o in outcomes if o.result.sample]
    assert contents == [f"r{i}" for i in range(10)]


# --- where the sample comes from ----------------------------------------------------------


class FixedSource(SampleSource):
    def __init__(self, sample: RolloutSample) -> None:
        self.sample = sample

    async def get_sample(self) -> RolloutSample:
        return self.sample


def registering_workflow(*samples: RolloutSample) -> type[AgentWorkflow[Any]]:
    async def body(ctx: AgentWorkflowContext[Any]) -> None:
        rollout = get_rollout_context()
        assert rollout is not None
        for sample in samples:
            rollout.set_sample_source(FixedSource(sample))

    return workflow_from(body)


def test_sample_from_a_returned_list() -> None:
    outcome = run(LocalBackend(workflow=EchoWorkflow).execute(request(label="lbl")))
    assert outcome.result.sample is not None
    assert outcome.result.sample.messages[-1] == {"role": "assistant", "content": "4"}
    assert outcome.result.sample.label == "lbl"


def test_sample_from_a_returned_output() -> None:
    async def body(ctx: AgentWorkflowContext[Any]) -> AgentWorkflowOutput:
        return AgentWorkflowOutput(
            messages=answer(ctx), metrics={"turns": 2, "score": np.float64(0.5)}, info={"x": 1}
        )

    outcome = run(LocalBackend(workflow=workflow_from(body)).execute(request()))
    sample = outcome.result.sample
    assert sample is not None
    assert (sample.messages[-1]["content"], sample.metrics, sample.extra_fields) == (
        "4",
        {"turns": 2.0, "score": 0.5},
        {},
    )
    assert sample.trajectory_messages == sample.messages
    assert sample.trajectory_messages is not sample.messages


def test_output_without_messages_gives_no_sample() -> None:
    async def body(ctx: AgentWorkflowContext[Any]) -> AgentWorkflowOutput:
        return AgentWorkflowOutput(metrics={"turns": 1})

    outcome = run(LocalBackend(workflow=workflow_from(body)).execute(request()))
    assert (outcome.result.status, outcome.result.sample) == (RolloutStatus.SUCCESS, None)


def test_sample_from_the_registered_source() -> None:
    sample = RolloutSample(messages=[{"role": "assistant", "content": "4"}], label="from-source")
    backend = LocalBackend(workflow=registering_workflow(sample), grader=ExactGrader)
    outcome = run(backend.execute(request(label="4")))
    assert outcome.result.status == RolloutStatus.SUCCESS
    assert outcome.result.sample is sample
    assert (sample.label, sample.reward) == ("from-source", 1.0)


def test_no_return_and_no_source_gives_no_sample() -> None:
    outcome = run(LocalBackend(workflow=registering_workflow()).execute(request(grade=False)))
    assert (outcome.result.status, outcome.result.sample, outcome.grader) == (
        RolloutStatus.SUCCESS,
        None,
        None,
    )


def test_two_sample_sources_is_a_validation_error() -> None:
    backend = LocalBackend(workflow=registering_workflow(RolloutSample(), RolloutSample()))
    outcome = run(backend.execute(request()))
    assert failed(outcome.result) == (
        RolloutStatus.FAILURE,
        RolloutErrorCategory.VALIDATION_ERROR,
        "RolloutContext already has a sample source registered; "
        "create one agent integration per rollout",
    )


def test_returning_a_dict_is_a_validation_error_naming_the_type() -> None:
    async def body(ctx: AgentWorkflowContext[Any]) -> dict[str, str]:
        return {"role": "assistant", "content": "4"}

    backend = LocalBackend(workflow=workflow_from(body), grader=ExactGrader)
    outcome = run(backend.execute(request()))
    assert failed(outcome.result) == (
        RolloutStatus.FAILURE,
        RolloutErrorCategory.VALIDATION_ERROR,
        BAD_RETURN,
    )
    assert (outcome.grader, outcome.result.sample) == (None, None)


def test_nan_metric_is_a_validation_error() -> None:
    async def body(ctx: AgentWorkflowContext[Any]) -> AgentWorkflowOutput:
        return AgentWorkflowOutput.model_construct(messages=answer(ctx), metrics={"bad": math.nan})

    with pytest.raises(ValidationError) as expected:
        AgentWorkflowOutput(metrics={"bad": math.nan})
    outcome = run(LocalBackend(workflow=workflow_from(body)).execute(request()))
    assert failed(outcome.result) == (
        RolloutStatus.FAILURE,
        RolloutErrorCategory.VALIDATION_ERROR,
        str(expected.value),
    )


# --- when grading applies -----------------------------------------------------------------


@dataclass
class GraderSpy:
    calls: list[tuple[str | None, dict[str, Any] | None]] = field(default_factory=list)

    def grader(self) -> type[Grader]:
        async def grade(ctx: GraderContext) -> None:
            self.calls.append((ctx.label, ctx.metadata))
            ctx.set_reward(0.5)

        return grader_from(grade)


def test_no_label_and_no_metadata_skips_grading_as_ungraded_success() -> None:
    spy = GraderSpy()
    backend = LocalBackend(workflow=EchoWorkflow, grader=spy.grader())
    outcome = run(backend.execute(request(label=None, metadata=None)))
    assert (outcome.result.status, outcome.grader, spy.calls) == (RolloutStatus.SUCCESS, None, [])
    assert outcome.result.sample is not None
    assert outcome.result.sample.reward is None
    assert outcome.result.err_message is None


def test_empty_metadata_counts_as_metadata() -> None:
    spy = GraderSpy()
    backend = LocalBackend(workflow=EchoWorkflow, grader=spy.grader())
    outcome = run(backend.execute(request(label=None, metadata={})))
    assert spy.calls == [(None, {})]
    assert outcome.grader is not None
    assert outcome.result.sample is not None
    assert (outcome.result.status, outcome.result.sample.reward) == (RolloutStatus.SUCCESS, 0.5)


def test_metadata_alone_drives_grading() -> None:
    spy = GraderSpy()
    backend = LocalBackend(workflow=EchoWorkflow, grader=spy.grader())
    run(backend.execute(request(label=None, metadata={"answer": 4})))
    assert spy.calls == [(None, {"answer": 4})]


def test_grade_false_skips_grading() -> None:
    spy = GraderSpy()
    backend = LocalBackend(workflow=EchoWorkflow, grader=spy.grader())
    outcome = run(backend.execute(request(grade=False)))
    assert (outcome.result.status, outcome.grader, spy.calls) == (RolloutStatus.SUCCESS, None, [])
    assert outcome.result.sample is not None
    assert outcome.result.sample.reward is None


def test_no_grader_configured_is_ungraded_success() -> None:
    outcome = run(LocalBackend(workflow=EchoWorkflow).execute(request(label="4")))
    assert (outcome.result.status, outcome.grader) == (RolloutStatus.SUCCESS, None)
    assert outcome.result.sample is not None
    assert outcome.result.sample.reward is None


def test_workflow_failure_skips_the_grader() -> None:
    spy = GraderSpy()

    async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
        raise RuntimeError("workflow broke")

    backend = LocalBackend(workflow=workflow_from(body), grader=spy.grader())
    outcome = run(backend.execute(request()))
    assert (outcome.grader, spy.calls) == (None, [])
    assert failed(outcome.result) == (
        RolloutStatus.FAILURE,
        RolloutErrorCategory.AGENT_ERROR,
        "workflow broke",
    )


# --- what the grader must do --------------------------------------------------------------


def test_grader_that_sets_no_reward_fails_and_keeps_the_sample() -> None:
    async def grade(ctx: GraderContext) -> float:
        return 1.0  # the return value is ignored

    backend = LocalBackend(workflow=EchoWorkflow, grader=grader_from(grade))
    outcome = run(backend.execute(request()))
    assert outcome.grader is not None
    assert failed(outcome.result) == (
        RolloutStatus.FAILURE,
        RolloutErrorCategory.VALIDATION_ERROR,
        NO_REWARD,
    )
    assert outcome.result.sample is not None
    assert outcome.result.sample.reward is None
    assert outcome.result_to_save is outcome.grader


def test_removed_sample_needs_no_reward() -> None:
    async def grade(ctx: GraderContext) -> None:
        assert ctx.sample is not None
        ctx.sample.remove_sample = True

    outcome = run(LocalBackend(workflow=EchoWorkflow, grader=grader_from(grade)).execute(request()))
    assert outcome.result.status == RolloutStatus.SUCCESS
    assert outcome.result.sample is not None
    assert (outcome.result.sample.reward, outcome.result.sample.remove_sample) == (None, True)


@pytest.mark.parametrize(
    ("reward", "expected"),
    [(1, 1.0), (0.5, 0.5), (np.float32(0.25), 0.25), (np.int64(1), 1.0), (np.float64(0.75), 0.75)],
    ids=["int", "float", "np.float32", "np.int64", "np.float64"],
)
def test_rewards_are_stored_as_float(reward: float, expected: float) -> None:
    async def grade(ctx: GraderContext) -> None:
        ctx.set_reward(reward)

    outcome = run(LocalBackend(workflow=EchoWorkflow, grader=grader_from(grade)).execute(request()))
    assert outcome.result.status == RolloutStatus.SUCCESS
    assert outcome.result.sample is not None
    assert outcome.result.sample.reward == expected
    assert type(outcome.result.sample.reward) is float


@pytest.mark.parametrize(
    "reward", [math.nan, math.inf, "0.5", True, None, object(), [1.0]], ids=stable_id
)
def test_bad_reward_is_a_validation_error(reward: Any) -> None:
    async def grade(ctx: GraderContext) -> None:
        ctx.set_reward(reward)

    with pytest.raises(ValidationError) as expected:
        GraderContext(label=None, sample=RolloutSample()).set_reward(reward)
    outcome = run(LocalBackend(workflow=EchoWorkflow, grader=grader_from(grade)).execute(request()))
    assert failed(outcome.result) == (
        RolloutStatus.FAILURE,
        RolloutErrorCategory.VALIDATION_ERROR,
        str(expected.value),
    )


def test_set_reward_without_sample_fails_the_grading() -> None:
    async def grade(ctx: GraderContext) -> None:
        ctx.set_reward(1.0)

    backend = LocalBackend(workflow=registering_workflow(), grader=grader_from(grade))
    outcome = run(backend.execute(request()))
    assert outcome.workflow.status == RolloutStatus.SUCCESS
    assert failed(outcome.result) == (
        RolloutStatus.FAILURE,
        RolloutErrorCategory.VALIDATION_ERROR,
        "GraderContext has no sample to reward",
    )


def test_grading_no_sample_without_set_reward_fails() -> None:
    async def grade(ctx: GraderContext) -> None:
        return None

    backend = LocalBackend(workflow=registering_workflow(), grader=grader_from(grade))
    outcome = run(backend.execute(request()))
    assert failed(outcome.result) == (
        RolloutStatus.FAILURE,
        RolloutErrorCategory.VALIDATION_ERROR,
        "no sample to grade: the workflow returned no messages and registered no sample source",
    )


# --- errors become data -------------------------------------------------------------------


def make_validation_error() -> ValidationError:
    try:
        RolloutSample(reward="not a number")
    except ValidationError as exc:
        return exc
    raise AssertionError("expected a ValidationError")


ERRORS: list[tuple[Callable[[], BaseException], RolloutErrorCategory, str]] = [
    (
        lambda: TimeoutError("http client gave up"),
        RolloutErrorCategory.TIMEOUT,
        "http client gave up",
    ),
    (lambda: TimeoutError(), RolloutErrorCategory.TIMEOUT, "TimeoutError"),
    (lambda: ValueError("bad value"), RolloutErrorCategory.VALIDATION_ERROR, "bad value"),
    (lambda: TypeError("bad type"), RolloutErrorCategory.VALIDATION_ERROR, "bad type"),
    (lambda: AssertionError("expected 4"), RolloutErrorCategory.VALIDATION_ERROR, "expected 4"),
    (make_validation_error, RolloutErrorCategory.VALIDATION_ERROR, str(make_validation_error())),
    (lambda: RuntimeError("boom"), RolloutErrorCategory.AGENT_ERROR, "boom"),
    (lambda: KeyError("k"), RolloutErrorCategory.AGENT_ERROR, "'k'"),
    (lambda: RuntimeError(), RolloutErrorCategory.AGENT_ERROR, "RuntimeError"),
    (lambda: ConnectionError("refused"), RolloutErrorCategory.AGENT_ERROR, "refused"),
    (
        lambda: ZeroDivisionError("division by zero"),
        RolloutErrorCategory.AGENT_ERROR,
        "division by zero",
    ),
]
ERROR_IDS = [
    "timeout",
    "timeout-empty",
    "value",
    "type",
    "assert",
    "pydantic",
    "runtime",
    "key",
    "empty",
    "connection",
    "zerodiv",
]


@pytest.mark.parametrize(("make", "category", "message"), ERRORS, ids=ERROR_IDS)
def test_workflow_exception_is_classified(
    make: Callable[[], BaseException], category: RolloutErrorCategory, message: str
) -> None:
    async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
        raise make()

    outcome = run(LocalBackend(workflow=workflow_from(body), grader=ExactGrader).execute(request()))
    assert failed(outcome.result) == (RolloutStatus.FAILURE, category, message)
    assert (outcome.result.sample, outcome.grader) == (None, None)


@pytest.mark.parametrize(("make", "category", "message"), ERRORS, ids=ERROR_IDS)
def test_grader_exception_is_classified_and_keeps_the_sample(
    make: Callable[[], BaseException], category: RolloutErrorCategory, message: str
) -> None:
    async def grade(ctx: GraderContext) -> None:
        raise make()

    outcome = run(LocalBackend(workflow=EchoWorkflow, grader=grader_from(grade)).execute(request()))
    assert outcome.workflow.status == RolloutStatus.SUCCESS
    assert failed(outcome.result) == (RolloutStatus.FAILURE, category, message)
    assert outcome.result.sample is outcome.workflow.sample


def explode_in_helper() -> None:
    raise RuntimeError("deep failure")


def test_traceback_is_kept_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
        explode_in_helper()
        return answer(ctx)

    with caplog.at_level(logging.ERROR, logger="osmosis_run"):
        outcome = run(LocalBackend(workflow=workflow_from(body)).execute(request("r-tb")))
    extra = outcome.result.extra_fields
    assert extra is not None
    assert (extra["stage"], extra["error_type"]) == ("workflow", "RuntimeError")
    assert "explode_in_helper" in extra["traceback"]
    assert extra["traceback"].endswith("RuntimeError: deep failure\n")
    (record,) = caplog.records
    assert record.getMessage() == "workflow of rollout r-tb raised RuntimeError"
    assert record.exc_info is not None or record.exc_text  # text once a secret is registered


def test_one_failure_among_fifty_concurrent_rollouts() -> None:
    async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
        content = ctx.prompt[-1]["content"]
        if content == "bad":
            await asyncio.sleep(0.005)
            raise RuntimeError("only this one")
        await asyncio.sleep(0.02)
        return answer(ctx)

    async def grade(ctx: GraderContext) -> None:
        assert ctx.sample is not None
        ctx.set_reward(int(ctx.sample.messages[-1]["content"]) / 100)

    backend = LocalBackend(
        workflow=workflow_from(body),
        workflow_config=AgentWorkflowConfig(name="unlimited"),
        grader=grader_from(grade),
    )
    requests = [request(f"r{i}", content=str(i), label=str(i)) for i in range(50)]
    requests.insert(25, request("bad", content="bad", label="bad"))
    outcomes = execute_all(backend, requests)
    bad = outcomes.pop(25)
    assert failed(bad.result) == (
        RolloutStatus.FAILURE,
        RolloutErrorCategory.AGENT_ERROR,
        "only this one",
    )
    assert [o.result.status for o in outcomes] == [RolloutStatus.SUCCESS] * 50
    assert [o.result.sample.reward if o.result.sample else None for o in outcomes] == [
        i / 100 for i in range(50)
    ]


def test_backend_does_not_enforce_request_timeouts() -> None:
    async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
        await asyncio.sleep(0.03)
        return answer(ctx)

    req = request().model_copy(update={"agent_timeout_sec": 0.001, "grader_timeout_sec": 0.001})
    outcome = run(LocalBackend(workflow=workflow_from(body), grader=ExactGrader).execute(req))
    assert outcome.result.status == RolloutStatus.SUCCESS


# --- run_workflow -------------------------------------------------------------------------


def test_run_workflow_is_public() -> None:
    backend = LocalBackend(workflow=EchoWorkflow, grader=ExactGrader)
    result = run(backend.run_workflow(request()))
    assert result.status == RolloutStatus.SUCCESS
    assert result.sample is not None
    assert (result.sample.messages[-1]["content"], result.sample.reward) == ("4", None)
    assert backend.grading_applies(request(), result) is True
    graded = run(backend.run_grader(request(), result))
    assert graded.sample is not None
    assert graded.sample.reward == 1.0


def test_run_workflow_turns_exceptions_into_results() -> None:
    async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
        raise ValueError("nope")

    result = run(LocalBackend(workflow=workflow_from(body)).run_workflow(request()))
    assert failed(result) == (RolloutStatus.FAILURE, RolloutErrorCategory.VALIDATION_ERROR, "nope")


# --- artifacts ----------------------------------------------------------------------------


@dataclass
class ArtifactSpy:
    dirs: list[tuple[str, Path | None]] = field(default_factory=list)
    grader_read: list[str] = field(default_factory=list)

    def backend(self, **kwargs: Any) -> LocalBackend:
        async def body(ctx: AgentWorkflowContext[Any]) -> Messages:
            self.dirs.append(("workflow", ctx.artifacts_dir))
            if ctx.artifacts_dir:
                (ctx.artifacts_dir / "wf.txt").write_text("from workflow")
            return answer(ctx)

        async def grade(ctx: GraderContext) -> None:
            self.dirs.append(("grader", ctx.artifacts_dir))
            if ctx.artifacts_dir:
                self.grader_read.append((ctx.artifacts_dir / "wf.txt").read_text())
                (ctx.artifacts_dir / "grader.txt").write_text("from grader")
            ctx.set_reward(1.0)

        return LocalBackend(workflow=workflow_from(body), grader=grader_from(grade), **kwargs)


def test_artifacts_dir_is_shared_by_workflow_and_grader(tmp_path: Path) -> None:
    spy = ArtifactSpy()
    outcome = run(spy.backend(artifact_root=tmp_path / "root").execute(request("rid")))
    expected = tmp_path / "root" / "rid" / "artifacts"
    assert outcome.result.status == RolloutStatus.SUCCESS
    assert spy.dirs == [("workflow", expected), ("grader", expected)]
    assert spy.grader_read == ["from workflow"]
    assert sorted(p.name for p in expected.iterdir()) == ["grader.txt", "wf.txt"]


def test_artifacts_dir_is_reused_by_a_second_execution(tmp_path: Path) -> None:
    spy = ArtifactSpy()
    backend = spy.backend(artifact_root=str(tmp_path))
    run(backend.execute(request("rid")))
    outcome = run(backend.execute(request("rid")))
    assert outcome.result.status == RolloutStatus.SUCCESS
    assert {d for _, d in spy.dirs} == {tmp_path / "rid" / "artifacts"}


def test_artifact_root_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OSMOSIS_ARTIFACT_ROOT", str(tmp_path / "env-root"))
    spy = ArtifactSpy()
    run(spy.backend().execute(request("rid")))
    assert spy.dirs[0] == ("workflow", tmp_path / "env-root" / "rid" / "artifacts")
    keyword = ArtifactSpy()
    run(keyword.backend(artifact_root=tmp_path / "kw").execute(request("rid")))
    assert keyword.dirs[0] == ("workflow", tmp_path / "kw" / "rid" / "artifacts")


def test_artifact_root_defaults_to_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OSMOSIS_ARTIFACT_ROOT")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    spy = ArtifactSpy()
    run(spy.backend().execute(request("rid")))
    assert spy.dirs[0] == ("workflow", tmp_path / "home" / ".osmosis" / "rid" / "artifacts")


def test_unusable_artifact_root_costs_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "a-file"
    root.write_text("not a directory")
    spy = ArtifactSpy()
    backend = spy.backend(artifact_root=root)
    started = time.perf_counter()
    outcomes = execute_all(backend, [request(f"r{i}") for i in range(20)])
    elapsed = time.perf_counter() - started
    assert [o.result.status for o in outcomes] == [RolloutStatus.SUCCESS] * 20
    assert [o.result.sample.reward if o.result.sample else None for o in outcomes] == [1.0] * 20
    assert {d for _, d in spy.dirs} == {None}
    assert len(spy.dirs) == 40
    assert elapsed < 0.5
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].getMessage().startswith("cannot create artifacts directory ")
