"""Slow workflows and graders the run-budget tests stop mid-run (importable as ``budget_flows``).

Each rollout that finishes appends its id to the file ``BUDGET_FLOWS_LOG`` names (when set): a
cancelled rollout never gets there, so across a stopped run and its resume every id is logged
exactly once if nothing ran twice.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    Grader,
    GraderContext,
)

LOG = "BUDGET_FLOWS_LOG"
SLEEP_S = 0.1


def _log(what: str) -> None:
    path = os.environ.get(LOG)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(what + "\n")


class Slow(AgentWorkflow[AgentWorkflowConfig]):
    """Sleep ``SLEEP_S``, log the rollout, echo the prompt."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        await asyncio.sleep(SLEEP_S)
        _log(f"run {ctx.prompt[-1]['content']}")
        user = dict(ctx.prompt[-1])
        return [user, {"role": "assistant", "content": user["content"]}]


class SlowGrader(Grader):
    """Sleep ``SLEEP_S``, log the rollout, reward an exact match."""

    async def grade(self, ctx: GraderContext) -> None:
        await asyncio.sleep(SLEEP_S)
        messages = ctx.sample.messages if ctx.sample is not None else []
        answer = messages[-1].get("content") if messages else None
        _log(f"grade {answer}")
        ctx.set_reward(1.0 if answer == ctx.label else 0.0)
