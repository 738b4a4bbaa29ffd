"""Workflows and graders written for osmosis_ai 0.3.8, as its users write them (never changed).

``Flow`` does what its prompt says (one mode per row); ``Judge`` grades as the row's metadata
says (``exact`` without metadata). The interop tests run both through ``osmosis-run eval`` and
through osmosis-ai's own ``LocalBackend`` and compare row for row.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from osmosis_ai.rollout import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    Grader,
    GraderConfig,
    GraderContext,
    RolloutSample,
    SampleSource,
    get_rollout_context,
)

MODES = [
    "output", "messages", "source", "none", "no_messages", "value_error", "type_error",
    "assertion", "timeout", "runtime", "bad_return", "context", "sleep",
]  # fmt: skip


class FlowConfig(AgentWorkflowConfig):
    """A user's config subclass with a field of its own."""

    answer: str = "ok"


flow_config = FlowConfig(name="flow")
judge_config = GraderConfig(name="judge")


class _Source(SampleSource):
    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages

    async def get_sample(self) -> RolloutSample:
        return RolloutSample(messages=self.messages)


class Flow(AgentWorkflow[FlowConfig]):
    """One mode per row: the prompt's text."""

    async def run(self, ctx: AgentWorkflowContext[FlowConfig]) -> Any:
        mode = ctx.prompt[-1]["content"]
        answer = ctx.config.answer if ctx.config is not None else "ok"
        messages = [*ctx.prompt, {"role": "assistant", "content": answer}]
        if mode == "output":
            return AgentWorkflowOutput(messages=messages, metrics={"turns": 1.0})
        if mode == "messages":
            return messages
        if mode == "source":
            rollout = get_rollout_context()
            assert rollout is not None, "no ambient RolloutContext"
            rollout.set_sample_source(_Source(messages))
            return None
        if mode == "none":
            return None
        if mode == "no_messages":
            return AgentWorkflowOutput(messages=None)
        if mode == "sleep":  # past the deadline (--agent-timeout; osmosis-ai: agent_timeout_sec)
            await asyncio.sleep(30)
        if mode == "context":
            # osmosis_ai's own context objects and ambient context, as its LocalBackend gives.
            assert type(ctx) is AgentWorkflowContext, type(ctx)
            assert get_rollout_context() is not None
            return messages
        return _fail(mode)


def _fail(mode: str) -> Any:
    if mode == "value_error":
        raise ValueError("a bad value")
    if mode == "type_error":
        raise TypeError("a bad type")
    if mode == "assertion":
        raise AssertionError("an assertion")
    if mode == "timeout":
        raise TimeoutError("the model timed out")
    if mode == "runtime":
        raise RuntimeError("the agent broke")
    return 42  # bad_return: not an output


class Judge(Grader):
    """Grades as ``metadata["grade"]`` says: exact (default), remove, forget, raise, bad."""

    async def grade(self, ctx: GraderContext) -> None:
        how = (ctx.metadata or {}).get("grade", "exact")
        assert type(ctx) is GraderContext, type(ctx)
        if how == "remove":
            assert ctx.sample is not None
            ctx.sample.remove_sample = True
        elif how == "forget":
            return
        elif how == "raise":
            raise RuntimeError("the grader broke")
        elif how == "bad":
            ctx.set_reward("high")  # type: ignore[arg-type]
        elif ctx.sample is not None:  # no sample: osmosis-ai's reward check says so
            last = ctx.sample.messages[-1]["content"]
            ctx.set_reward(1.0 if last == ctx.label else 0.0)


def osmosis_ai_loaded() -> bool:
    """For tests that check osmosis-run never imports osmosis_ai on its own."""
    return "osmosis_ai" in sys.modules
