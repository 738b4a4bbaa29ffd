"""Workflows and graders the rollout server tests serve (importable as ``server_flows``).

Each reads what to do from the request's metadata, so one served backend covers many cases:
``sleep`` (seconds before answering), ``grade_sleep``, ``raise`` (a message to raise),
``stubborn`` (ignore cancellation for that many seconds), ``metric`` (a metric value, "inf"
for infinity), ``remove`` (the grader drops the sample).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    ConcurrencyConfig,
    Grader,
    GraderContext,
)


def _last_user(ctx: AgentWorkflowContext[Any]) -> str:
    return str([m for m in ctx.prompt if m["role"] == "user"][-1]["content"])


class Upper(AgentWorkflow[AgentWorkflowConfig]):
    """Answer the last user message in capitals, after ``metadata.sleep`` seconds."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> Any:
        meta = ctx.metadata or {}
        if meta.get("stubborn"):
            end = time.monotonic() + float(meta["stubborn"])
            while time.monotonic() < end:
                try:
                    await asyncio.sleep(0.05)
                except asyncio.CancelledError:
                    continue  # ignores its cancellation
        await asyncio.sleep(float(meta.get("sleep", 0)))
        if "raise" in meta:
            raise RuntimeError(str(meta["raise"]))
        if ctx.artifacts_dir is not None:
            (ctx.artifacts_dir / "answer.txt").write_text(_last_user(ctx).upper())
        messages = [*ctx.prompt, {"role": "assistant", "content": _last_user(ctx).upper()}]
        if "metric" in meta:
            return AgentWorkflowOutput(messages=messages, metrics={"ok": 1.0})
        return messages


class Exact(Grader):
    """Reward 1.0 when the answer equals the label, else 0.0."""

    async def grade(self, ctx: GraderContext) -> None:
        meta = ctx.metadata or {}
        await asyncio.sleep(float(meta.get("grade_sleep", 0)))
        assert ctx.sample is not None
        if "metric" in meta:  # the sample's metrics take any value, an infinity too
            ctx.sample.metrics["odd"] = float(meta["metric"])
        if meta.get("remove"):
            ctx.sample.remove_sample = True
            ctx.set_reward(1.0)
            return
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == ctx.label else 0.0)


class Trivial(AgentWorkflow[AgentWorkflowConfig]):
    """Answer at once (benchmarks)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> Any:
        return [*ctx.prompt, {"role": "assistant", "content": "ok"}]


class Always(Grader):
    """Reward 1.0."""

    async def grade(self, ctx: GraderContext) -> None:
        ctx.set_reward(1.0)


class Sleeper(AgentWorkflow[AgentWorkflowConfig]):
    """Sleep ``metadata.sleep`` seconds (default 1), then answer (the load test)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> Any:
        await asyncio.sleep(float((ctx.metadata or {}).get("sleep", 1.0)))
        return [*ctx.prompt, {"role": "assistant", "content": "slept"}]


TWO_AT_ONCE = AgentWorkflowConfig(name="two", concurrency=ConcurrencyConfig(max_concurrent=2))


class InThread(AgentWorkflow[AgentWorkflowConfig]):
    """Call a blocking client in asyncio.to_thread, and have it never answer."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> Any:
        import time

        await asyncio.to_thread(time.sleep, 3600)
