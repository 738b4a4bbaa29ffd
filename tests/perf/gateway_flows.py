"""The workflow of the gateway benchmarks: ``CALLS`` sequential chat completions per rollout.

A few ``httpx.AsyncClient`` objects per process (made on first use, on the run's event loop) so
that the figures measure the path to the model, not building a client per rollout. Each call's latency,
as the workflow saw it, goes into the rollout's metrics (``call_ms_0``...), from which the
benchmark computes what the gateway adds.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    get_rollout_context,
)

CALLS = 4
POOLS = 16
_clients: list[httpx.AsyncClient] = []


def _shared(rollout_id: str) -> httpx.AsyncClient:
    """One of a few clients (httpcore's single large pool is slow with 100 calls in flight)."""
    if not _clients:
        _clients.extend(httpx.AsyncClient(timeout=60.0) for _ in range(POOLS))
    return _clients[hash(rollout_id) % POOLS]


class Caller(AgentWorkflow[AgentWorkflowConfig]):
    """``CALLS`` chat completions in a row through the rollout's endpoint."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> AgentWorkflowOutput:
        """Ask ``CALLS`` times; return the transcript and each call's latency."""
        ambient = get_rollout_context()
        assert ambient is not None
        url = f"{ambient.chat_completions_url}/chat/completions"
        headers = {"Authorization": f"Bearer {ambient.api_key}"}
        client = _shared(ambient.rollout_id)
        messages: list[dict[str, Any]] = list(ctx.prompt)
        metrics: dict[str, float] = {}
        for n in range(CALLS):
            started = time.perf_counter()
            reply = await client.post(
                url, json={"model": "bench", "messages": messages}, headers=headers
            )
            metrics[f"call_ms_{n}"] = (time.perf_counter() - started) * 1000
            reply.raise_for_status()
            messages.append(reply.json()["choices"][0]["message"])
        return AgentWorkflowOutput(messages=messages, metrics=metrics)
