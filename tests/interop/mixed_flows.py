"""osmosis_run workflows (the import line changed) that still use osmosis_ai objects."""

from __future__ import annotations

from typing import Any

import osmosis_ai.rollout as oai

import osmosis_run


class TheirSource(oai.SampleSource):
    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages

    async def get_sample(self) -> oai.RolloutSample:
        return oai.RolloutSample(messages=self.messages, metrics={"from": "theirs"})


class Mixed(osmosis_run.AgentWorkflow[osmosis_run.AgentWorkflowConfig]):
    """Returns or registers osmosis_ai objects, as the prompt says."""

    async def run(self, ctx: osmosis_run.AgentWorkflowContext[Any]) -> Any:
        mode = ctx.prompt[-1]["content"]
        messages = [*ctx.prompt, {"role": "assistant", "content": "ok"}]
        if mode == "their_output":
            return oai.AgentWorkflowOutput(messages=messages, metrics={"turns": 2.0})
        if mode == "their_sample":
            return oai.RolloutSample(messages=messages)
        if mode == "their_source_on_ours":
            ours = osmosis_run.get_rollout_context()
            assert ours is not None
            ours.set_sample_source(TheirSource(messages))
            return None
        if mode == "their_source_on_theirs":
            theirs = oai.get_rollout_context()
            assert theirs is not None, "no osmosis_ai RolloutContext"
            assert theirs.rollout_id == osmosis_run.get_rollout_context().rollout_id  # type: ignore[union-attr]
            theirs.set_sample_source(TheirSource(messages))
            return None
        raise ValueError(f"unknown mode {mode}")


class Exact(osmosis_run.Grader):
    async def grade(self, ctx: osmosis_run.GraderContext) -> None:
        assert ctx.sample is not None
        assert type(ctx.sample) is osmosis_run.RolloutSample  # theirs was made ours
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == ctx.label else 0.0)
