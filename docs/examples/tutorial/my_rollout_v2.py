# my_rollout_v2.py: a workflow config, metrics, an artifact and partial credit
from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    Grader,
    GraderContext,
)


class ShoutConfig(AgentWorkflowConfig):
    suffix: str = ""


config = ShoutConfig(name="shout", suffix="!")


class ShoutAgent(AgentWorkflow[ShoutConfig]):
    async def run(self, ctx: AgentWorkflowContext[ShoutConfig]) -> AgentWorkflowOutput:
        question = ctx.prompt[-1]["content"]
        suffix = ctx.config.suffix if ctx.config else ""
        answer = question.upper() + suffix
        if ctx.artifacts_dir is not None:  # None when the folder could not be created
            (ctx.artifacts_dir / "answer.txt").write_text(answer + "\n")
        return AgentWorkflowOutput(
            messages=[*ctx.prompt, {"role": "assistant", "content": answer}],
            metrics={"answer_chars": len(answer)},
        )


class LenientMatch(Grader):
    """1.0 for the exact label, 0.5 when only case or punctuation differ, else 0.0."""

    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        assert ctx.label is not None
        answer = ctx.sample.messages[-1]["content"]
        if answer == ctx.label:
            ctx.set_reward(1.0)
        elif _letters(answer) == _letters(ctx.label):
            ctx.set_reward(0.5)
        else:
            ctx.set_reward(0.0)


def _letters(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalnum())
