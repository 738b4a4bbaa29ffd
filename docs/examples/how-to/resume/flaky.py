# flaky.py: a workflow whose first attempt at each rollout fails, as a flaky API does
from pathlib import Path

from osmosis_run import AgentWorkflow, AgentWorkflowContext, get_rollout_context

TRIED = Path("tried")  # remembers, across runs, which rollouts were tried once


class FlakyAgent(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> list[dict[str, str]]:
        marker = TRIED / get_rollout_context().rollout_id
        if not marker.exists():
            TRIED.mkdir(exist_ok=True)  # noqa: ASYNC240 (a tiny local folder: fine here)
            marker.touch()
            raise ConnectionError("upstream reset the connection")
        return [*ctx.prompt, {"role": "assistant", "content": ctx.prompt[-1]["content"].upper()}]
