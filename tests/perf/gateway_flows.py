"""The workflow of the gateway benchmarks: ``CALLS`` sequential chat completions per rollout.

The HTTP client is ``$OSMOSIS_BENCH_CLIENT``: ``aiohttp`` (the default) or ``httpx``. What the
benchmarks measure is the gateway, so by default the workflows use a client whose own cost is
small beside it: on this 2-core machine ``aiohttp`` spends about 0.1 ms of CPU a call,
``httpx.AsyncClient`` about 0.7 ms and the ``openai`` client about 1.6 ms, all on the same
interpreter lock as the gateway's thread. W12 (replay, no upstream wait) is the figure that
shows it; tests/perf/gateway.py reports it with ``httpx`` beside the default.

A few clients per process (made on first use, on the run's event loop) so that the figures
measure the path to the model, not building a client per rollout. Each call's latency, as the
workflow saw it, goes into the rollout's metrics (``call_ms_0``...), from which the benchmark
computes what the gateway adds.
"""

from __future__ import annotations

import importlib
import os
import time
from typing import Any

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    get_rollout_context,
)

CALLS = 4
POOLS = 16  # httpx: httpcore's single large pool is slow with 100 calls in flight
CLIENT_ENV = "OSMOSIS_BENCH_CLIENT"
CLIENTS = ("aiohttp", "httpx")
_pool: list[Any] = []


def _client() -> Any:
    """The chosen client's module, imported with the workflow (not within the runner's wall)."""
    name = os.environ.get(CLIENT_ENV, CLIENTS[0])
    if name not in CLIENTS:
        raise ValueError(f"{CLIENT_ENV}={name!r}: use one of {', '.join(CLIENTS)}")
    return importlib.import_module(name)


_lib = _client()


async def _post_aiohttp(url: str, body: dict[str, Any], headers: dict[str, str], key: str) -> Any:
    if not _pool:
        _pool.append(_lib.ClientSession(timeout=_lib.ClientTimeout(total=60)))
    async with _pool[0].post(url, json=body, headers=headers) as reply:
        reply.raise_for_status()
        return await reply.json()


async def _post_httpx(url: str, body: dict[str, Any], headers: dict[str, str], key: str) -> Any:
    if not _pool:
        _pool.extend(_lib.AsyncClient(timeout=60.0) for _ in range(POOLS))
    reply = await _pool[hash(key) % POOLS].post(url, json=body, headers=headers)
    reply.raise_for_status()
    return reply.json()


_post = _post_aiohttp if _lib.__name__ == "aiohttp" else _post_httpx


class Caller(AgentWorkflow[AgentWorkflowConfig]):
    """``CALLS`` chat completions in a row through the rollout's endpoint."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> AgentWorkflowOutput:
        """Ask ``CALLS`` times; return the transcript and each call's latency."""
        ambient = get_rollout_context()
        assert ambient is not None
        url = f"{ambient.chat_completions_url}/chat/completions"
        headers = {"Authorization": f"Bearer {ambient.api_key}"}
        messages: list[dict[str, Any]] = list(ctx.prompt)
        metrics: dict[str, float] = {}
        for n in range(CALLS):
            started = time.perf_counter()
            reply = await _post(
                url, {"model": "bench", "messages": messages}, headers, ambient.rollout_id
            )
            metrics[f"call_ms_{n}"] = (time.perf_counter() - started) * 1000
            messages.append(reply["choices"][0]["message"])
        return AgentWorkflowOutput(messages=messages, metrics=metrics)
