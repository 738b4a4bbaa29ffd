"""Build run directories by hand (results.jsonl, run.toml, summary.json) for report tests."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tomli_w

from osmosis_run.results.records import ERROR_STATUSES, ResultLine, RolloutState, Summary


def line(
    rollout_id: str,
    *,
    status: RolloutState = "success",
    reward: float | None = 1.0,
    threshold: float = 1.0,
    **fields: Any,
) -> ResultLine:
    """One results line; an error status gets no reward and a default category and message."""
    if status in ERROR_STATUSES or status in ("ungraded", "removed"):
        reward = None
    row, _, sample = rollout_id.rpartition(".s")
    values: dict[str, Any] = {
        "row_index": 0,
        "row_id": row,
        "line": 1,
        "sample_index": int(sample),
        "passed": None if reward is None else reward >= threshold,
        "workflow_ms": 1.0,
        "grader_ms": 0.5,
    }
    if status in ERROR_STATUSES:
        values |= {"passed": False, "error_category": "agent_error", "error_message": "boom"}
    return ResultLine(rollout_id=rollout_id, status=status, reward=reward, **(values | fields))


def write_run(
    run_dir: Path,
    lines: Iterable[ResultLine],
    *,
    summary: Summary | None = None,
    torn_tail: str = "",
    **config: Any,
) -> Path:
    """Write a run directory: run.toml from ``config``, results.jsonl, and summary.json if given."""
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = {"pass_threshold": 1.0, "samples": 1} | config
    (run_dir / "run.toml").write_text(tomli_w.dumps(settings), encoding="utf-8")
    text = "".join(item.model_dump_json() + "\n" for item in lines)
    (run_dir / "results.jsonl").write_text(text + torn_tail, encoding="utf-8")
    if summary is not None:
        (run_dir / "summary.json").write_text(summary.model_dump_json(), encoding="utf-8")
    return run_dir


def finished(rollouts: int, *, wall_s: float = 2.0) -> Summary:
    """The summary.json of a run that finished all of its ``rollouts``."""
    return Summary(rollouts=rollouts, planned=rollouts, complete=True, wall_s=wall_s)
