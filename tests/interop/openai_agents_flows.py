"""A workflow using osmosis_ai's OpenAI Agents integration, as the workspace template writes one.

``AgentsWorkflow`` subclasses osmosis_ai's class; ``MixedWorkflow`` is the same code with the
import line changed to osmosis_run while the integration keeps its osmosis_ai import.
"""

from __future__ import annotations

from typing import Any

from agents import ModelSettings, Runner
from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowConfig, Grader, GraderContext
from osmosis_ai.rollout.integrations.agents.openai_agents import (
    OsmosisAgent,
    OsmosisMemorySession,
    OsmosisRolloutModel,
)

import osmosis_run


class AgentsConfig(AgentWorkflowConfig):
    name: str = "multiply"
    model: Any
    model_settings: Any


agents_config = AgentsConfig(
    model=OsmosisRolloutModel(), model_settings=ModelSettings(temperature=0.0)
)
mixed_config = osmosis_run.AgentWorkflowConfig(name="mixed")


async def _run_agent(prompt: list[dict[str, Any]], model: Any, settings: Any) -> None:
    agent = OsmosisAgent(name="multiply", instructions="Multiply.", model=model,
                         model_settings=settings)  # fmt: skip
    session = OsmosisMemorySession()  # registers itself as the rollout's sample source
    await Runner.run(agent, prompt, session=session, max_turns=2)  # type: ignore[arg-type]


class AgentsWorkflow(AgentWorkflow[AgentsConfig]):
    async def run(self, ctx: Any) -> None:
        await _run_agent(ctx.prompt, ctx.config.model, ctx.config.model_settings)


class MixedWorkflow(osmosis_run.AgentWorkflow[osmosis_run.AgentWorkflowConfig]):
    async def run(self, ctx: Any) -> None:
        await _run_agent(ctx.prompt, OsmosisRolloutModel(), ModelSettings(temperature=0.0))


def _text(message: Any) -> str:
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


class AnswerGrader(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        ctx.set_reward(1.0 if ctx.label and ctx.label in _text(ctx.sample.messages[-1]) else 0.0)


class MixedGrader(osmosis_run.Grader):
    async def grade(self, ctx: osmosis_run.GraderContext) -> None:
        assert ctx.sample is not None
        ctx.set_reward(1.0 if ctx.label and ctx.label in _text(ctx.sample.messages[-1]) else 0.0)
