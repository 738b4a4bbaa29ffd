"""A well-formed user module: a workflow, a grader, their configs and some wrong kinds."""

from __future__ import annotations

from typing import Any

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    Grader,
    GraderConfig,
    GraderContext,
)


class EchoConfig(AgentWorkflowConfig):
    """A config subclass with one extra field."""

    suffix: str = "!"


class EchoWorkflow(AgentWorkflow[EchoConfig]):
    """Answer with the last prompt message's content plus the configured suffix."""

    async def run(self, ctx: AgentWorkflowContext[EchoConfig]) -> list[dict[str, Any]]:
        suffix = ctx.config.suffix if ctx.config is not None else ""
        answer = {"role": "assistant", "content": f"{ctx.prompt[-1]['content']}{suffix}"}
        return [*ctx.prompt, answer]


class ExactGrader(Grader):
    """Reward 1.0 when the last message equals the label, else 0.0."""

    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == ctx.label else 0.0)


class Namespace:
    """Holds a class one attribute down, for dotted ``module:Outer.Inner`` paths."""

    Workflow = EchoWorkflow


async def grade_function(ctx: GraderContext) -> None:
    """A grader written as a function: the wrong kind for ``grader=``."""
    ctx.set_reward(1.0)


echo_config = EchoConfig(name="echo", suffix="?")
exact_config = GraderConfig(name="exact")
NOTHING = None
