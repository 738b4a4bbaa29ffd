"""The labelled rows of a run summary: what the terminal table and the step summary both show."""

from __future__ import annotations

from typing import Any

from osmosis_run.results.records import Summary, count_rows, model_rows
from osmosis_run.results.words import plural

__all__ = ["summary_rows"]


def summary_rows(s: Summary) -> list[tuple[str, str]]:
    """The summary as (label, value) rows: counts, rewards, pass rates, latency, wall, usage."""
    rows = count_rows(s)
    if s.budget is not None:  # the run budget that stopped it
        rows.append(("budget", s.budget.message or s.budget.reached))
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
    if s.backend is not None and s.backend.get("kind") == "ray":
        rows.append(("ray", _ray_row(s.backend)))
    if s.backend is not None and s.backend.get("kind") == "processes":
        rows.append(("workers", _processes_row(s.backend)))
    for key, group in s.groups.items():
        rows.append(
            (
                f"{s.group_by}={key}",
                f"{plural(group.rollouts, 'rollout')}  mean {_fmt(group.mean_reward)}  "
                f"pass {_fmt(group.pass_rate, '.1%')}  errors {group.errors}",
            )
        )
    return rows


def _ray_row(backend: dict[str, Any]) -> str:
    """Ray's actors by node, and what was lost: "3 actors on 2 nodes (...); 1 lost (...)"."""
    actors = backend.get("actors") or []
    by_node: dict[str, int] = {}
    for actor in actors:
        node = str(actor.get("node"))
        by_node[node] = by_node.get(node, 0) + 1
    where = ", ".join(f"{n} on {node}" for node, n in by_node.items())
    text = f"{plural(len(actors), 'actor')} started on {plural(len(by_node), 'node')} ({where})"
    losses = backend.get("lost") or []
    if losses:
        lost = "; ".join(
            f"node {loss.get('node')}: {plural(int(loss.get('rollouts', 0)), 'rollout')} ran again"
            for loss in losses
        )
        text += f"; {len(losses)} lost ({lost})"
    return text


def _processes_row(backend: dict[str, Any]) -> str:
    """The worker processes, and what was lost: "2 processes (5 started); 3 lost (...)"."""
    workers, started = int(backend.get("workers", 0)), int(backend.get("started", 0))
    text = f"{plural(workers, 'process', 'processes')} ({started} started)"
    losses = backend.get("lost") or []
    if losses:
        kinds: dict[str, int] = {}
        for loss in losses:
            kind = str(loss.get("kind", "lost"))
            kinds[kind] = kinds.get(kind, 0) + 1
        said = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
        rerun = int(backend.get("rollouts_rerun", 0))
        text += f"; {len(losses)} lost ({said}; {plural(rerun, 'rollout')} ran again)"
    return text


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)
