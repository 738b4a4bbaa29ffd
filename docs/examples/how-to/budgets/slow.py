# slow.py: a workflow that takes half a second per rollout
import asyncio

from osmosis_run import AgentWorkflow, AgentWorkflowContext


class SlowAgent(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> list[dict[str, str]]:
        await asyncio.sleep(0.5)
        return [*ctx.prompt, {"role": "assistant", "content": ctx.prompt[-1]["content"].upper()}]
