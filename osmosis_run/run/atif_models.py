"""Pydantic models of ATIF v1.7 (Agent Trajectory Interchange Format), for validation only.

The shape follows the copy the Osmosis SDK 0.3.8 carries ("adapted from Harbor 0.20.0"):
every model forbids unknown fields and non-finite floats. The hot path never builds these
models; ``osmosis_run.run.atif`` writes plain dicts, and tests and ``osmosis-run validate`` check
them here with ``validate_trajectory``.

    Trajectory
    ├── agent: Agent
    ├── steps: [Step]                  step_id runs 1..n
    │   ├── message: str | [ContentPart (text | image: ImageSource)]
    │   ├── tool_calls: [ToolCall]     agent steps only
    │   ├── observation: Observation
    │   │   └── results: [ObservationResult]
    │   │       └── subagent_trajectory_ref: [SubagentTrajectoryRef]
    │   └── metrics: Metrics           agent steps only
    ├── final_metrics: FinalMetrics
    └── subagent_trajectories: [Trajectory]
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "Agent",
    "ContentPart",
    "FinalMetrics",
    "ImageSource",
    "Metrics",
    "Observation",
    "ObservationResult",
    "SchemaVersion",
    "Step",
    "SubagentTrajectoryRef",
    "ToolCall",
    "Trajectory",
    "validate_trajectory",
]

SchemaVersion = Literal[
    "ATIF-v1.0",
    "ATIF-v1.1",
    "ATIF-v1.2",
    "ATIF-v1.3",
    "ATIF-v1.4",
    "ATIF-v1.5",
    "ATIF-v1.6",
    "ATIF-v1.7",
]

# Fields a step may carry only when an agent (an LLM) produced it.
_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")
# Fields that describe an LLM call, so they cannot appear on a step that made none.
_LLM_CALL_ONLY = ("metrics", "reasoning_content")


class _Model(BaseModel):
    # protected_namespaces=(): ATIF names a field "model_name", which older pydantic warns about.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, protected_namespaces=())


class ImageSource(_Model):
    """Where an image lives and what kind it is."""

    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    path: str


class ContentPart(_Model):
    """One part of multimodal content: text, or an image."""

    type: Literal["text", "image"]
    text: str | None = None
    source: ImageSource | None = None

    @model_validator(mode="after")
    def _fields_match_type(self) -> ContentPart:
        if self.type == "text" and (self.text is None or self.source is not None):
            raise ValueError("a text content part needs 'text' and no 'source'")
        if self.type == "image" and (self.source is None or self.text is not None):
            raise ValueError("an image content part needs 'source' and no 'text'")
        return self


class Agent(_Model):
    """The agent that produced the trajectory."""

    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class ToolCall(_Model):
    """One function call an agent step asked for."""

    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class SubagentTrajectoryRef(_Model):
    """A pointer to a delegated subagent's trajectory, embedded or in a file."""

    trajectory_id: str | None = None
    session_id: str | None = None
    trajectory_path: str | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _points_somewhere(self) -> SubagentTrajectoryRef:
        if self.trajectory_id is None and self.trajectory_path is None:
            raise ValueError("a subagent trajectory ref needs trajectory_id or trajectory_path")
        return self


class ObservationResult(_Model):
    """One result seen after a step, usually the output of one tool call."""

    source_call_id: str | None = None
    content: str | list[ContentPart] | None = None
    subagent_trajectory_ref: list[SubagentTrajectoryRef] | None = None
    extra: dict[str, Any] | None = None


class Observation(_Model):
    """What the environment returned after a step."""

    results: list[ObservationResult]


class Metrics(_Model):
    """Token counts, cost and log-probabilities of one LLM call."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(_Model):
    """Totals over the whole trajectory."""

    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class Step(_Model):
    """One turn of the trajectory: a system, user or agent message and what followed it."""

    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str | list[ContentPart]
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    is_copied_context: bool | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None

    @field_validator("timestamp")
    @classmethod
    def _iso_8601(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                datetime.fromisoformat(value)
            except ValueError:
                raise ValueError(f"timestamp must be ISO 8601, got {value!r}") from None
        return value

    @model_validator(mode="after")
    def _fields_match_source(self) -> Step:
        if self.source != "agent":
            self._refuse(_AGENT_ONLY, f"only allowed when source is 'agent', not {self.source!r}")
        if self.llm_call_count == 0:
            self._refuse(_LLM_CALL_ONLY, "not allowed when llm_call_count is 0")
        return self

    def _refuse(self, names: tuple[str, ...], why: str) -> None:
        present = [name for name in names if getattr(self, name) is not None]
        if present:
            raise ValueError(f"step {self.step_id}: {', '.join(present)} {why}")

    def unmatched_source_call_ids(self) -> list[str]:
        """Return the observation source_call_ids that name no tool call of this step."""
        if self.observation is None:
            return []
        call_ids = {call.tool_call_id for call in self.tool_calls or ()}
        return [
            result.source_call_id
            for result in self.observation.results
            if result.source_call_id is not None and result.source_call_id not in call_ids
        ]


class Trajectory(_Model):
    """A whole ATIF document: the agent, its steps, totals and any subagent trajectories."""

    schema_version: SchemaVersion = "ATIF-v1.7"
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: Agent
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None
    subagent_trajectories: list[Trajectory] | None = None

    @model_validator(mode="after")
    def _step_ids_sequential(self) -> Trajectory:
        for expected, step in enumerate(self.steps, start=1):
            if step.step_id != expected:
                raise ValueError(
                    f"steps[{expected - 1}].step_id must be {expected} (step_id runs 1..n), "
                    f"got {step.step_id}"
                )
        return self

    @model_validator(mode="after")
    def _source_call_ids_match(self) -> Trajectory:
        for step in self.steps:
            unmatched = step.unmatched_source_call_ids()
            if unmatched:
                raise ValueError(
                    f"step {step.step_id}: observation source_call_id {unmatched[0]!r} "
                    "matches no tool_call_id of that step"
                )
        return self

    @model_validator(mode="after")
    def _subagent_ids_unique(self) -> Trajectory:
        seen: set[str] = set()
        for index, sub in enumerate(self.subagent_trajectories or ()):
            if sub.trajectory_id is None:
                raise ValueError(f"subagent_trajectories[{index}] needs a trajectory_id")
            if sub.trajectory_id in seen:
                raise ValueError(
                    f"subagent_trajectories[{index}].trajectory_id {sub.trajectory_id!r} "
                    "is not unique"
                )
            seen.add(sub.trajectory_id)
        return self


def validate_trajectory(data: dict[str, Any]) -> Trajectory:
    """Validate an ATIF document; raise ``pydantic.ValidationError`` when it is not one."""
    return Trajectory.model_validate(data)
