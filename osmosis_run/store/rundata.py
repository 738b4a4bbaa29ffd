"""Read a run directory back (finished, interrupted or still running) for reports."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from osmosis_run.errors import RunDirError
from osmosis_run.results import outcome
from osmosis_run.results.metrics import summarize
from osmosis_run.results.records import ResultLine, Summary
from osmosis_run.results.rundata import RunData
from osmosis_run.store.layout import FINGERPRINT, RESULTS, RUN_CONFIG
from osmosis_run.store.store import read_results, read_summary

__all__ = [
    "load_run",
    "read_fingerprint",
    "read_json_object",
    "read_run_config",
    "with_stored_summary",
]


def load_run(
    run_dir: Path, *, pass_threshold: float | None = None, group_by: str | None = None
) -> RunData:
    """Load ``run_dir``; the summary is recomputed from results.jsonl (the last line per id wins).

    Raises:
        RunDirError: the directory is not a run directory.
    """
    if not (run_dir / RESULTS).is_file() and not (run_dir / RUN_CONFIG).is_file():
        raise RunDirError(
            f"{run_dir} is not an osmosis-run run directory (no results.jsonl); "
            "give the directory `osmosis-run eval` printed"
        )
    config = read_run_config(run_dir)
    by_id: dict[str, ResultLine] = {}
    for line in read_results(run_dir):
        by_id[line.rollout_id] = line
    lines = list(by_id.values())
    threshold = pass_threshold if pass_threshold is not None else config.get("pass_threshold", 1.0)
    summary = summarize(
        lines,
        pass_threshold=float(threshold),
        samples=int(config.get("samples", 1)),
        group_by=group_by if group_by is not None else config.get("group_by"),
    )
    stored = read_summary(run_dir)
    summary = with_stored_summary(summary, stored)
    return RunData(
        run_dir=run_dir,
        config=config,
        lines=lines,
        summary=summary,
        stored_summary=stored,
        fingerprint=read_fingerprint(run_dir),
    )


def with_stored_summary(summary: Summary, stored: Summary | None) -> Summary:
    """A summary computed from results.jsonl, completed by what summary.json knows.

    The numbers are the results'; the run's plan, whether it was stopped, its wall time and
    what the gateway saw come from summary.json. Without one the run is still going, or was
    killed: not complete either way. Every reader of a run (reports, ``osmosis-run view``)
    makes its summary so.
    """
    if stored is not None:
        summary.planned = stored.planned
        summary.interrupted = stored.interrupted
        summary.wall_s = stored.wall_s
        summary.throughput_per_s = stored.throughput_per_s
        summary.budget = stored.budget
        if stored.model is not None and summary.model is not None:  # what the gateway saw
            summary.model.gateway = stored.model.gateway
    stopped = stored is None or stored.interrupted
    summary.complete = outcome.is_complete(summary.rollouts, summary.planned, stopped)
    return summary


def read_fingerprint(run_dir: Path) -> dict[str, Any] | None:
    """fingerprint.json, or None when it is missing or unreadable (it only informs reports)."""
    try:
        data = json.loads((run_dir / FINGERPRINT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """run.toml, or {} when there is none.

    Raises:
        RunDirError: it cannot be read.
    """
    path = run_dir / RUN_CONFIG
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RunDirError(f"{path}: cannot read the run's configuration: {exc}") from None


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object a run wrote (result.json, invocation.json), or {} when it is missing,
    unreadable or not an object: what reads it only shows it."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
