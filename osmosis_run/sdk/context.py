"""What workflows and graders receive, and the ambient per-rollout context."""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from osmosis_run.sdk.types import AgentWorkflowConfig, RolloutSample

__all__ = [
    "AgentWorkflowContext",
    "GraderContext",
    "RolloutContext",
    "SampleSource",
    "get_rollout_context",
]

TConfig = TypeVar("TConfig", bound=AgentWorkflowConfig)


@dataclass
class AgentWorkflowContext(Generic[TConfig]):
    """What ``AgentWorkflow.run`` receives. The label is deliberately not here."""

    prompt: list[dict[str, Any]]
    config: TConfig | None = None
    metadata: dict[str, Any] | None = None
    artifacts_dir: Path | None = None


@dataclass
class GraderContext:
    """What ``Grader.grade`` receives; the grader calls ``set_reward`` on it."""

    label: str | None
    sample: RolloutSample | None
    metadata: dict[str, Any] | None = None
    project_path: str | None = None
    artifacts_dir: Path | None = None

    def set_reward(self, reward: float) -> None:
        """Set the sample's reward.

        Raises:
            ValueError: there is no sample to reward.
            pydantic.ValidationError: the reward is not a finite number.
        """
        if self.sample is None:
            raise ValueError("GraderContext has no sample to reward")
        if reward is None:
            # The field accepts None (an unrewarded sample); a reward of None is a grader bug.
            raise ValidationError.from_exception_data(
                "RolloutSample", [{"type": "float_type", "loc": ("reward",), "input": reward}]
            )
        if type(reward) is float and math.isfinite(reward):  # the usual reward: valid as it is
            self.sample.__dict__["reward"] = reward
            self.sample.__pydantic_fields_set__.add("reward")
            return
        self.sample.reward = reward


class SampleSource(ABC):
    """Where a sample comes from when ``run()`` returns None (an agent integration)."""

    @abstractmethod
    async def get_sample(self) -> RolloutSample:
        """Return the sample of the rollout that just ran."""

    async def get_preview(self, max_messages: int) -> RolloutSample | None:  # noqa: ARG002
        """Return a partial sample for live previews, if the source supports it."""
        return None


_current: ContextVar[RolloutContext | None] = ContextVar("osmosis_rollout_context", default=None)


@dataclass
class RolloutContext:
    """The ambient context of one rollout: its id, the model endpoint and the sample source.

    Entering it makes it what ``get_rollout_context()`` returns; leaving restores the one before.
    ``seed`` (an osmosis-run addition) is this rollout's seed: derived from the row, the sample
    index and ``--seed``, never from execution order, so randomness in a workflow reproduces.
    Empty fields are filled from ``OSMOSIS_CHAT_COMPLETIONS_URL``, ``OSMOSIS_API_KEY`` and
    ``OSMOSIS_ROLLOUT_ID``.
    """

    chat_completions_url: str = ""
    api_key: str | None = field(default=None, repr=False)
    rollout_id: str = ""
    sample_source: SampleSource | None = None
    seed: int | None = None
    _tokens: list[Token[RolloutContext | None]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self.chat_completions_url = self.chat_completions_url or os.environ.get(
            "OSMOSIS_CHAT_COMPLETIONS_URL", ""
        )
        self.api_key = self.api_key or os.environ.get("OSMOSIS_API_KEY") or None
        self.rollout_id = self.rollout_id or os.environ.get("OSMOSIS_ROLLOUT_ID", "")

    def derive(self, rollout_id: str, *, seed: int | None = None) -> RolloutContext:
        """A fresh context for one rollout with this one's endpoint (no environment lookups)."""
        ctx = object.__new__(RolloutContext)
        ctx.chat_completions_url = self.chat_completions_url
        ctx.api_key = self.api_key
        ctx.rollout_id = rollout_id
        ctx.sample_source = None
        ctx.seed = seed
        ctx._tokens = []
        return ctx

    def __enter__(self) -> RolloutContext:
        self._tokens.append(_current.set(self))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _current.reset(self._tokens.pop())

    def set_sample_source(self, source: SampleSource) -> None:
        """Register the one sample source of this rollout.

        Raises:
            ValueError: a sample source is already registered.
        """
        if self.sample_source is not None:
            raise ValueError(
                "RolloutContext already has a sample source registered; "
                "create one agent integration per rollout"
            )
        self.sample_source = source

    async def get_sample(self) -> RolloutSample | None:
        """Return the registered source's sample, or None when none is registered."""
        if self.sample_source is None:
            return None
        return await self.sample_source.get_sample()


def get_rollout_context() -> RolloutContext | None:
    """Return the rollout context of the running rollout, if any."""
    return _current.get()
