# agent.py: one chat completion per rollout, through the run's model gateway
from openai import AsyncOpenAI

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowContext,
    Grader,
    GraderContext,
    get_rollout_context,
)


class Agent(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> list[dict[str, str]]:
        rollout = get_rollout_context()  # this rollout's URL and key
        client = AsyncOpenAI(base_url=rollout.chat_completions_url, api_key=rollout.api_key)
        reply = await client.chat.completions.create(model="gpt-4o-mini", messages=ctx.prompt)
        answer = reply.choices[0].message.content or ""
        return [*ctx.prompt, {"role": "assistant", "content": answer}]


class Contains(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        answer = ctx.sample.messages[-1]["content"]
        ctx.set_reward(1.0 if (ctx.label or "") in answer else 0.0)
