"""Workflows that call a model through the rollout's endpoint: the real ``openai`` SDK and httpx."""

from __future__ import annotations

from typing import Any

import httpx
from openai import AsyncOpenAI

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    get_rollout_context,
)

CALLS = 2  # calls per rollout of the workflows below


def _endpoint() -> tuple[str, str]:
    ctx = get_rollout_context()
    assert ctx is not None
    return ctx.chat_completions_url, ctx.api_key or ""


class OpenAIWorkflow(AgentWorkflow[Any]):
    """Two calls with the OpenAI SDK; the answers become the transcript."""

    async def run(self, ctx: AgentWorkflowContext[Any]) -> AgentWorkflowOutput:
        url, key = _endpoint()
        messages = list(ctx.prompt)
        client: Any = AsyncOpenAI(base_url=url, api_key=key, max_retries=0)
        async with client:
            for _ in range(CALLS):
                reply = await client.chat.completions.create(
                    model="test-model", messages=messages, temperature=0
                )
                messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        return AgentWorkflowOutput(messages=messages)


class StreamingWorkflow(AgentWorkflow[Any]):
    """One streamed call with the OpenAI SDK, asking for usage in the stream."""

    async def run(self, ctx: AgentWorkflowContext[Any]) -> AgentWorkflowOutput:
        url, key = _endpoint()
        parts: list[str] = []
        client: Any = AsyncOpenAI(base_url=url, api_key=key, max_retries=0)
        async with client:
            stream = await client.chat.completions.create(
                model="test-model", messages=list(ctx.prompt), stream=True
            )
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
        return AgentWorkflowOutput(
            messages=[*ctx.prompt, {"role": "assistant", "content": "".join(parts)}]
        )


class HttpxWorkflow(AgentWorkflow[Any]):
    """One call with plain httpx, as a custom workflow would make it."""

    async def run(self, ctx: AgentWorkflowContext[Any]) -> AgentWorkflowOutput:
        url, key = _endpoint()
        async with httpx.AsyncClient() as client:
            reply = await client.post(
                f"{url}/chat/completions",
                json={"model": "test-model", "messages": list(ctx.prompt)},
                headers={"Authorization": f"Bearer {key}"},
            )
        reply.raise_for_status()
        message = reply.json()["choices"][0]["message"]
        return AgentWorkflowOutput(messages=[*ctx.prompt, message])


class KeyReporter(AgentWorkflow[Any]):
    """Puts what the rollout was handed (URL and key) in its transcript, for the leak tests."""

    async def run(self, ctx: AgentWorkflowContext[Any]) -> AgentWorkflowOutput:
        url, key = _endpoint()
        return AgentWorkflowOutput(
            messages=[*ctx.prompt, {"role": "assistant", "content": f"{url} {key}"}]
        )
