"""A workflow and graders the grade and show tests run (importable as ``grade_flows``).

``Answer`` refuses to run while ``GRADE_FLOWS_NO_WORKFLOW`` is set: a test sets it around
``osmosis-run grade`` to prove that a re-grade never runs the workflow.
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
    GraderConfig,
    GraderContext,
)

NO_WORKFLOW = "GRADE_FLOWS_NO_WORKFLOW"


class Answer(AgentWorkflow[AgentWorkflowConfig]):
    """Answer "<prompt>!" through a calculator tool call; fail on rows whose metadata says so."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        if os.environ.get(NO_WORKFLOW):
            raise RuntimeError("the workflow ran during a grade")
        if (ctx.metadata or {}).get("fail"):
            raise ValueError("the tool is down")
        question = str(ctx.prompt[-1]["content"])
        if ctx.artifacts_dir is not None:
            (ctx.artifacts_dir / "answer.txt").write_text(question + "!")
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "calc", "arguments": '{"q": "' + question + '"}'},
        }
        return [
            *ctx.prompt,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": question.upper()},
            {"role": "assistant", "content": question + "!"},
        ]


def _answer(ctx: GraderContext) -> str:
    assert ctx.sample is not None
    return str(ctx.sample.messages[-1]["content"])


class Strict(Grader):
    """1.0 when the answer is exactly the label, else 0.0."""

    async def grade(self, ctx: GraderContext) -> None:
        ctx.set_reward(1.0 if _answer(ctx) == ctx.label else 0.0)


class Lenient(Grader):
    """1.0 when the label is in the answer, else 0.25; reads and writes artifacts.

    It checks that the workflow's artifact is there (a missing one fails the grading) and
    leaves ``graded.txt`` beside it; while ``GRADE_FLOWS_BROKEN`` is set it raises instead.
    """

    async def grade(self, ctx: GraderContext) -> None:
        if os.environ.get("GRADE_FLOWS_BROKEN"):
            raise RuntimeError("the judge is down")
        assert ctx.artifacts_dir is not None
        written = (ctx.artifacts_dir / "answer.txt").read_text()
        assert written == _answer(ctx), "the workflow's artifact is not the answer"
        (ctx.artifacts_dir / "graded.txt").write_text("lenient")
        ctx.set_reward(1.0 if (ctx.label or "") in _answer(ctx) else 0.25)


class SlowLenient(Lenient):
    """Lenient, a little slowly (the interrupt test stops it mid-run)."""

    async def grade(self, ctx: GraderContext) -> None:
        await asyncio.sleep(float(os.environ.get("GRADE_FLOWS_DELAY", "0.05")))
        await super().grade(ctx)


class Stuck(Grader):
    """Never finish grading (for --grader-timeout)."""

    async def grade(self, ctx: GraderContext) -> None:
        await asyncio.sleep(3600)


class Scaled(Grader):
    """The label's length, times the config's ``scale``."""

    async def grade(self, ctx: GraderContext) -> None:
        scale = float(getattr(self.config, "scale", 1.0))
        ctx.set_reward(len(ctx.label or "") * scale)


tenth = GraderConfig(name="tenth", scale=0.1)
