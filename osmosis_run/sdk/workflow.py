"""The two classes users write: ``AgentWorkflow`` (the agent) and ``Grader`` (the reward)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

from osmosis_run.sdk.context import AgentWorkflowContext, GraderContext
from osmosis_run.sdk.types import AgentWorkflowConfig, AgentWorkflowOutput, GraderConfig

__all__ = ["AgentWorkflow", "Grader"]

TConfig = TypeVar("TConfig", bound=AgentWorkflowConfig)


class AgentWorkflow(ABC, Generic[TConfig]):
    """An agent: turns one dataset prompt into one sample (a chat transcript)."""

    def __init__(self, config: TConfig | None = None) -> None:
        self.config = config

    @abstractmethod
    async def run(
        self, ctx: AgentWorkflowContext[TConfig]
    ) -> AgentWorkflowOutput | list[dict[str, Any]] | None:
        """Run one rollout.

        Returns:
            An ``AgentWorkflowOutput``, a list of message dicts, or None to take the sample
            from the sample source registered on the ambient ``RolloutContext``.
        """


class Grader(ABC):
    """A reward function: turns a sample and the row's label into one float reward."""

    def __init__(self, config: GraderConfig | None = None) -> None:
        self.config = config

    @abstractmethod
    async def grade(self, ctx: GraderContext) -> Any:
        """Grade ``ctx.sample`` by calling ``ctx.set_reward``; the return value is ignored."""
