# rollouts/my-rollout/main.py, ported from osmosis_ai by its import lines:
#   from osmosis_ai.rollout import ...  ->  from osmosis_run import ...
import os

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    Grader,
    GraderContext,
    LocalBackend,
)


class MyAgentWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> list[dict[str, str]]:
        # SERVICE_TOKEN comes from [secrets]; STYLE from [env]
        assert os.environ["SERVICE_TOKEN"], "no SERVICE_TOKEN"
        answer = ctx.prompt[-1]["content"].strip()
        if os.environ.get("STYLE") == "upper":
            answer = answer.upper()
        return [*ctx.prompt, {"role": "assistant", "content": answer}]


class MyGrader(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == ctx.label else 0.0)


backend = LocalBackend(
    workflow=MyAgentWorkflow,
    workflow_config=AgentWorkflowConfig(name="my-rollout"),
    grader=MyGrader,
)
