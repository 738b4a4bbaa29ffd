"""The workflow and grader of the long-transcript benchmark (W15); copied into its workspace.

``Transcript`` sleeps ``PROBES`` times ``PROBE_S`` (0.05 s in all: model calls that cost no
CPU), measuring how late each ``asyncio.sleep(PROBE_S)`` wakes: the event loop's lag as a running
rollout sees it, while the runner records the rollouts that finished around it. The lateness of
each sleep goes into the rollout's metrics (``lag_ms_0``...), from which the benchmark takes its
percentiles. It returns a transcript of ``MESSAGES`` messages of ``$OSMOSIS_BENCH_MESSAGE_BYTES``
characters each (8,192: a 256 KB transcript), each message a string of its own, made as a
model's replies arrive: a share after each sleep. (Made all at once at the end, 64 rollouts
ending together would spend 7 ms of the loop building their own transcripts: the workflow's
cost, not the runner's, which is what the benchmark measures.) ``Count`` rewards 1.0 when the
transcript has all its messages.
"""

from __future__ import annotations

import asyncio
import os
import string
import time
from typing import Any

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    Grader,
    GraderContext,
    get_rollout_context,
)

MESSAGES = 32
PROBES = 5
PROBE_S = 0.01
MESSAGE_BYTES_ENV = "OSMOSIS_BENCH_MESSAGE_BYTES"
MESSAGE_BYTES = int(os.environ.get(MESSAGE_BYTES_ENV, "8192"))
# Text to cut messages from: printable, varied, and long enough for any message size.
_TEXT = (string.ascii_letters + string.digits + " .,;:-") * (MESSAGE_BYTES // 60 + 2)


def message(rollout_id: str, n: int, size: int = MESSAGE_BYTES) -> dict[str, Any]:
    """Message ``n`` of a transcript: ``size`` characters, a user's or an assistant's turn."""
    head = f"{rollout_id} message {n}: "
    return {
        "role": "assistant" if n % 2 else "user",
        "content": (head + _TEXT[n : n + size])[:size],
    }


def transcript(rollout_id: str, size: int = MESSAGE_BYTES) -> list[dict[str, Any]]:
    """The ``MESSAGES`` messages of a transcript, all at once (the benchmark's floor)."""
    return [message(rollout_id, n, size) for n in range(MESSAGES)]


class Transcript(AgentWorkflow[AgentWorkflowConfig]):
    """Sleep ``PROBES`` x ``PROBE_S`` timing each sleep's lateness; return a long transcript."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> AgentWorkflowOutput:
        """Probe the loop's lag while waiting, then answer with the transcript."""
        ambient = get_rollout_context()
        rollout_id = ambient.rollout_id if ambient is not None else "rollout"
        metrics: dict[str, float] = {}
        messages: list[dict[str, Any]] = []
        for n in range(PROBES):
            started = time.perf_counter()
            await asyncio.sleep(PROBE_S)
            metrics[f"lag_ms_{n}"] = (time.perf_counter() - started - PROBE_S) * 1000
            arrived = range(n * MESSAGES // PROBES, (n + 1) * MESSAGES // PROBES)
            messages += (message(rollout_id, k) for k in arrived)
        return AgentWorkflowOutput(messages=messages, metrics=metrics)


class Count(Grader):
    """Reward 1.0 when the transcript has all ``MESSAGES`` messages."""

    async def grade(self, ctx: GraderContext) -> None:
        """Set the reward."""
        messages = ctx.sample.messages if ctx.sample is not None else []
        ctx.set_reward(1.0 if len(messages) == MESSAGES else 0.0)
