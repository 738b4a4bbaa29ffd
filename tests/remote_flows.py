"""Workflows and graders that eval --server's tests serve (importable as ``remote_flows``).

``Mixed`` does what its row's ``metadata.kind`` says, so one dataset gives every status: echo
(the default), ``raise`` (an agent error), ``sleep`` (``metadata.sleep`` seconds, then echo),
``gate`` (wait while the file ``$REMOTE_GATE`` exists, then echo). ``Judge`` scores an exact
match, and removes the sample when ``metadata.remove`` is set.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    Grader,
    GraderContext,
)

_seen: dict[str, int] = {}


class Mixed(AgentWorkflow[AgentWorkflowConfig]):
    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        meta = ctx.metadata or {}
        kind = meta.get("kind", "echo")
        if kind == "raise":
            raise RuntimeError("workflow exploded")
        if kind == "flaky":  # fails the first time each prompt is seen in this process
            key = str(ctx.prompt)
            _seen[key] = _seen.get(key, 0) + 1
            if _seen[key] == 1:
                raise ConnectionError("upstream hiccup")
        if kind == "sleep":
            await asyncio.sleep(float(meta.get("sleep", 0.3)))
        if kind == "gate":
            gate = Path(os.environ["REMOTE_GATE"])
            while await asyncio.to_thread(gate.exists):  # noqa: ASYNC110  (a file, not an event)
                await asyncio.sleep(0.02)
        answer = str(ctx.prompt[-1]["content"])
        return [*ctx.prompt, {"role": "assistant", "content": answer}]


class Judge(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        if (ctx.metadata or {}).get("remove"):
            ctx.sample.remove_sample = True
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == ctx.label else 0.0)
