"""Quality gates and the error budget: a summary in, a verdict per rule out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from osmosis_run.results.records import Summary
from osmosis_run.results.words import plural

__all__ = ["Gate", "GateMetric", "Verdict", "check_error_budget", "check_gates", "gate_value"]


GateMetric = Literal["mean", "mean_graded", "pass_rate"]


class Gate(BaseModel):
    """A quality gate: the run fails (exit 1) when ``metric`` is below ``threshold``."""

    model_config = ConfigDict(frozen=True)

    metric: GateMetric
    threshold: float


class Verdict(BaseModel):
    """Whether one rule held, in a sentence."""

    name: str
    held: bool
    message: str


def gate_value(summary: Summary, metric: str) -> float | None:
    """The summary's value of a gate metric."""
    if metric == "pass_rate":
        return summary.pass_rate
    if metric == "mean_graded":
        return summary.reward_graded.mean
    return summary.reward_all.mean


def check_gates(summary: Summary, gates: Sequence[Gate]) -> list[Verdict]:
    """One verdict per ``--fail-under`` gate."""
    verdicts = []
    for gate in gates:
        value = gate_value(summary, gate.metric)
        name = f"{gate.metric} >= {gate.threshold:g}"
        if value is None:
            verdicts.append(
                Verdict(name=name, held=False, message=f"{name}: failed (no rollout was scored)")
            )
            continue
        held = value >= gate.threshold
        detail = "held" if held else f"failed by {gate.threshold - value:.4f}"
        verdicts.append(Verdict(name=name, held=held, message=f"{name}: {detail} ({value:.4f})"))
    return verdicts


def check_error_budget(summary: Summary, budget: float | int) -> Verdict:
    """Whether failed, timed-out and invalid rollouts stayed within ``--max-error-rate``."""
    errors, total = summary.errors, summary.rollouts
    if isinstance(budget, float):
        held = errors <= budget * total
        allowed = f"{budget:.2%} allowed"
    else:
        held = errors <= budget
        allowed = f"{budget} allowed"
    rate = f"{errors / total:.2%}" if total else "0%"
    detail = "held" if held else "exceeded"
    message = (
        f"error budget: {detail} ({errors} of {plural(total, 'rollout')} failed, {rate}; {allowed})"
    )
    return Verdict(name="max_error_rate", held=held, message=message)
