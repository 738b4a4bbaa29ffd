"""The SDK's data models: configs, samples, requests, results and their enums.

Same names, fields and meaning as ``osmosis_ai.rollout`` (SDK 0.3.8), so user code ports by
changing the import line.
"""

from __future__ import annotations

import math
import numbers
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

__all__ = [
    "AgentWorkflowConfig",
    "AgentWorkflowOutput",
    "BaseConfig",
    "ConcurrencyConfig",
    "ExecutionOutcome",
    "ExecutionRequest",
    "ExecutionResult",
    "GraderConfig",
    "Messages",
    "RolloutErrorCategory",
    "RolloutSample",
    "RolloutStatus",
]

Messages = list[dict[str, Any]]


class RolloutStatus(StrEnum):
    """Where a rollout is in its life; the last three are terminal."""

    QUEUED = "queued"
    RUNNING = "running"
    GRADING = "grading"
    SUCCESS = "success"
    FAILURE = "failure"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


class RolloutErrorCategory(StrEnum):
    """Why a rollout failed."""

    TIMEOUT = "timeout"
    LEASE_EXPIRED = "lease_expired"
    VALIDATION_ERROR = "validation_error"
    HTTP_ERROR = "http_error"
    AGENT_ERROR = "agent_error"
    INTERNAL_ERROR = "internal_error"


class ConcurrencyConfig(BaseModel):
    """How many executions may run at once: ``None`` is no limit."""

    max_concurrent: int | None = Field(None, ge=1)


class BaseConfig(BaseModel):
    """A user's configuration: a name, a description and any extra fields."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)

    name: str
    description: str | None = None


class AgentWorkflowConfig(BaseConfig):
    """Configuration handed (as a per-execution deep copy) to an ``AgentWorkflow``."""

    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)


class GraderConfig(BaseConfig):
    """Configuration handed to a ``Grader``."""

    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)


class AgentWorkflowOutput(BaseModel):
    """What ``AgentWorkflow.run`` may return: the transcript plus finite float metrics."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, revalidate_instances="always")

    messages: list[dict[str, Any]] | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)


def _reward(value: Any) -> float | None:
    """Accept finite real numbers (NumPy scalars included) as float; refuse the rest."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real | Decimal):
        raise ValueError(f"reward must be a finite number, got {type(value).__name__}")  # noqa: TRY004
    try:
        result = float(value)
    except OverflowError as exc:  # e.g. 10**400; pydantic reports only ValueError
        raise ValueError("reward must be a finite number, got a number out of float range") from exc
    if not math.isfinite(result):
        raise ValueError(f"reward must be a finite number, got {result}")
    return result


Reward = Annotated[float | None, BeforeValidator(_reward)]


def json_copy(value: Any) -> Any:
    """Copy nested dicts and lists (the shape of chat messages); share everything else."""
    if type(value) is list:  # a transcript: its messages copied inline, a call fewer each
        copied = []
        for item in value:
            if type(item) is dict:
                item = item.copy()
                for key, child in item.items():
                    if isinstance(child, _CONTAINERS):
                        item[key] = json_copy(child)  # same keys: safe while iterating
            elif isinstance(item, _CONTAINERS):
                item = json_copy(item)
            copied.append(item)
        return copied
    if isinstance(value, dict):
        return {
            key: json_copy(item) if isinstance(item, _CONTAINERS) else item
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [json_copy(item) if isinstance(item, _CONTAINERS) else item for item in value]
    return value


_CONTAINERS = (dict, list)  # what json_copy copies (tested inline: a call per leaf costs)


class RolloutSample(BaseModel):
    """One sample: the transcript, its reward and what the workflow measured."""

    model_config = ConfigDict(allow_inf_nan=False, validate_assignment=True)

    messages: list[dict[str, Any]] = Field(default_factory=list)
    trajectory_messages: list[dict[str, Any]] | None = None
    label: str | None = None
    reward: Reward = None
    remove_sample: bool = False
    metrics: dict[str, Any] = Field(default_factory=dict)
    extra_fields: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _default_trajectory(self) -> RolloutSample:
        if "trajectory_messages" not in self.model_fields_set:
            # Bypass validate_assignment: this is our own copy of already-validated messages.
            self.__dict__["trajectory_messages"] = json_copy(self.messages)
        return self


def _single_path_segment(value: str) -> str:
    if value in ("", ".", "..") or any(c in value for c in "/\\\x00"):
        raise ValueError(
            "rollout_id must be a single path segment (no path separators, and not '.' or '..')"
        )
    return value


class ExecutionRequest(BaseModel):
    """One rollout to execute: its id, prompt, label and metadata."""

    id: str
    prompt: list[dict[str, Any]]
    label: str | None = None
    metadata: dict[str, Any] | None = None
    agent_timeout_sec: float | None = None
    grader_timeout_sec: float | None = None
    grade: bool = True

    @field_validator("id")
    @classmethod
    def _id_is_segment(cls, value: str) -> str:
        return _single_path_segment(value)

    @field_validator("agent_timeout_sec", "grader_timeout_sec")
    @classmethod
    def _finite_timeout(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("timeout must be finite; omit it to run unbounded")
        return value


class ExecutionResult(BaseModel):
    """The result of one workflow or grader run; ``extra_fields`` holds backend diagnostics."""

    status: RolloutStatus
    sample: RolloutSample | None = None
    err_message: str | None = None
    err_category: RolloutErrorCategory | None = None
    extra_fields: dict[str, Any] | None = None


class ExecutionOutcome(BaseModel):
    """A workflow result and, when grading applied, the grader result."""

    workflow: ExecutionResult
    grader: ExecutionResult | None = None

    @property
    def result(self) -> ExecutionResult:
        """The result that decides the rollout: the failed workflow, else the grader's, if any."""
        if self.workflow.status != RolloutStatus.SUCCESS:
            if self.workflow.sample is None and self.grader is not None:
                return self.workflow.model_copy(update={"sample": self.grader.sample})
            return self.workflow
        return self.grader or self.workflow

    @property
    def result_to_save(self) -> ExecutionResult:
        """The result whose sample becomes the trajectory."""
        if self.grader is not None and self.grader.sample is not None:
            return self.grader
        return self.workflow
