"""Plain osmosis_run code, with no osmosis_ai import anywhere."""

from __future__ import annotations

import sys
from typing import Any

import osmosis_run


class Plain(osmosis_run.AgentWorkflow[osmosis_run.AgentWorkflowConfig]):
    """Reports, in its metrics, whether anything imported osmosis_ai."""

    async def run(self, ctx: osmosis_run.AgentWorkflowContext[Any]) -> Any:
        return osmosis_run.AgentWorkflowOutput(
            messages=[*ctx.prompt, {"role": "assistant", "content": "ok"}],
            metrics={"osmosis_ai_loaded": float("osmosis_ai" in sys.modules)},
        )
