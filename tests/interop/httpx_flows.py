"""A raw-httpx workflow for osmosis_ai, as benchmark repositories write one: it posts to the
ambient context's chat completions URL with its key, and returns the transcript."""

from __future__ import annotations

from typing import Any

import httpx
from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowOutput, Grader, get_rollout_context


class HttpxWorkflow(AgentWorkflow):
    async def run(self, ctx: Any) -> AgentWorkflowOutput:
        rollout = get_rollout_context()
        assert rollout is not None
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.post(
                f"{rollout.chat_completions_url}/chat/completions",
                headers={"Authorization": f"Bearer {rollout.api_key}"},
                json={"model": "benchmark", "messages": ctx.prompt},
            )
            response.raise_for_status()
        reply = response.json()["choices"][0]["message"]
        return AgentWorkflowOutput(messages=[*ctx.prompt, reply], metrics={"calls": 1.0})


class ContainsLabel(Grader):
    async def grade(self, ctx: Any) -> None:
        ctx.set_reward(
            1.0 if ctx.label and ctx.label in ctx.sample.messages[-1]["content"] else 0.0
        )
