"""A run as its readers see it: its results (one per rollout id) and their summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from osmosis_run.results.records import ResultLine, Summary

__all__ = ["RunData"]


class RunData(BaseModel):
    """A run as reports see it: its results (one per rollout id) and their summary."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_dir: Path
    config: dict[str, Any]
    lines: list[ResultLine]
    summary: Summary
    stored_summary: Summary | None
