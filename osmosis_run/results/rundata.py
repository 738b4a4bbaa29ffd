"""A run as its readers see it: its results (one per rollout id) and their summary."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, SkipValidation

from osmosis_run.results.records import ResultLine, Summary

__all__ = ["RunData"]


class RunData(BaseModel):
    """A run as reports see it: its results (one per rollout id) and their summary."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_dir: Path
    config: dict[str, Any]
    lines: Annotated[Sequence[ResultLine], SkipValidation]
    """The results, one per rollout id: a list (``load_run``), or the run's results file read
    again at each pass (``reports.report.open_run``: a large run is never all in memory).
    Go through it in passes; index it only for a few rollouts."""
    summary: Summary
    stored_summary: Summary | None
    fingerprint: dict[str, Any] | None = None
    """What the run was made from (fingerprint.json); a re-grade's holds its provenance:
    ``graded_from``, ``source_fingerprint``, ``grader``."""

    @property
    def grader(self) -> str | None:
        """The grader's ``module:attr`` path, as the run recorded it."""
        value = (self.fingerprint or {}).get("grader", self.config.get("grader"))
        return value if isinstance(value, str) else None

    @property
    def graded_from(self) -> Path | None:
        """The run whose samples this run graded again (``osmosis-run grade``), if any."""
        value = (self.fingerprint or {}).get("graded_from")
        return Path(value) if isinstance(value, str) else None
