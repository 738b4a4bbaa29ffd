# my_rollout.py
from osmosis_run import AgentWorkflow, AgentWorkflowContext, Grader, GraderContext


class EchoAgent(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext):
        question = ctx.prompt[-1]["content"]
        # A real agent calls a model here, e.g. through get_rollout_context().chat_completions_url
        return [*ctx.prompt, {"role": "assistant", "content": question.upper()}]


class ExactMatch(Grader):
    async def grade(self, ctx: GraderContext):
        answer = ctx.sample.messages[-1]["content"]
        ctx.set_reward(1.0 if answer == ctx.label else 0.0)
