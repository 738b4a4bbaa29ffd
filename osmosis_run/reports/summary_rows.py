"""The labelled rows of a run summary: what the terminal table and the step summary both show."""

from __future__ import annotations

from osmosis_run.results.records import Summary, count_rows, model_rows
from osmosis_run.results.words import plural

__all__ = ["summary_rows"]


def summary_rows(s: Summary) -> list[tuple[str, str]]:
    """The summary as (label, value) rows: counts, rewards, pass rates, latency, wall, usage."""
    rows = count_rows(s)
    g, a = s.reward_graded, s.reward_all
    rows.append(
        (
            "reward (graded)",
            f"mean {_fmt(g.mean)}  std {_fmt(g.std)}  min {_fmt(g.min)}  "
            f"median {_fmt(g.median)}  max {_fmt(g.max)}  (n={g.count})",
        )
    )
    rows.append(
        (
            "reward (all)",
            f"mean {_fmt(a.mean)}  std {_fmt(a.std)}  (n={a.count}, failed rollouts count as 0)",
        )
    )
    rows.append(
        (
            "pass rate",
            f"{_fmt(s.pass_rate, '.1%')} ({s.passed}/{a.count} at reward >= {s.pass_threshold:g})",
        )
    )
    if s.pass_at_k:
        rows.append(("pass@k", "  ".join(f"k={p.k} {p.value:.3f}" for p in s.pass_at_k)))
        rows.append(("pass^k", "  ".join(f"k={p.k} {p.value:.3f}" for p in s.pass_hat_k)))
    for name, d in (("workflow ms", s.workflow_ms), ("grader ms", s.grader_ms)):
        if d.count:
            rows.append(
                (
                    name,
                    f"p50 {_fmt(d.p50, '.1f')}  p90 {_fmt(d.p90, '.1f')}  p99 {_fmt(d.p99, '.1f')}",
                )
            )
    if s.wall_s is not None:
        rate = f"{s.throughput_per_s:.1f}/s" if s.throughput_per_s else "-"
        rows.append(("wall", f"{s.wall_s:.2f}s  ({rate})"))
    if s.model is not None:
        rows.extend(model_rows(s.model))
    for key, group in s.groups.items():
        rows.append(
            (
                f"{s.group_by}={key}",
                f"{plural(group.rollouts, 'rollout')}  mean {_fmt(group.mean_reward)}  "
                f"pass {_fmt(group.pass_rate, '.1%')}  errors {group.errors}",
            )
        )
    return rows


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)
