"""The workflows and grader the benchmarks run; copied into each run's temporary directory.

``Echo`` answers at once with the prompt, ``Sleepy`` first awaits ``asyncio.sleep(0.05)``, and
``ExactMatch`` rewards 1.0 when the assistant's content equals the label (the rows' prompts equal
their labels, so every rollout earns 1.0), mirroring the per-row work of ``bench/floor.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    Grader,
    GraderContext,
)

SLEEP_S = 0.05

Context = AgentWorkflowContext[AgentWorkflowConfig]


def _echo(ctx: Context) -> list[dict[str, Any]]:
    user = ctx.prompt[-1]
    return [dict(user), {"role": "assistant", "content": user["content"]}]


class Echo(AgentWorkflow[AgentWorkflowConfig]):
    """Answer at once, echoing the prompt."""

    async def run(self, ctx: Context) -> list[dict[str, Any]]:
        """Return [user message, assistant message echoing it]."""
        return _echo(ctx)


class Sleepy(AgentWorkflow[AgentWorkflowConfig]):
    """Await 50 ms (a model call that costs no CPU), then echo the prompt."""

    async def run(self, ctx: Context) -> list[dict[str, Any]]:
        """Sleep, then return [user message, assistant message echoing it]."""
        await asyncio.sleep(SLEEP_S)
        return _echo(ctx)


class ExactMatch(Grader):
    """Reward 1.0 when the last message's content equals the label, else 0.0."""

    async def grade(self, ctx: GraderContext) -> None:
        """Set the reward."""
        messages = ctx.sample.messages if ctx.sample is not None else []
        answer = messages[-1].get("content") if messages else None
        ctx.set_reward(1.0 if answer == ctx.label else 0.0)
