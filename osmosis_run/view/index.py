"""One run as the view serves it, kept up to date by following results.jsonl by offset.

``RunIndex.refresh()`` reads what was appended to results.jsonl since the last call (complete
lines only: a line being written is read next time) and adds each rollout to:

- its row of the rollouts table (``html_report.rollout_row``, the report's own row, as JSON
  bytes: a page is a join of them), and where its line is in the file (the rollout view and
  the search read it back from there);
- the columns the table sorts and filters by (status, error category, outcome, reward,
  duration, row and sample index, metadata), in flat arrays;
- the run's ``MetricsAccumulator`` (the summary ``report --json`` gives, one definition) and
  the values its charts are drawn from.

So memory holds a few hundred bytes per rollout, never its transcript, and nothing is read
twice: a file that shrank or was replaced (``--fresh``, a resume with ``--retry-failed``,
which rewrites it) is read again from the start. A rollout id seen again (a line appended twice
by a crash and a resume that raced, say) replaces the earlier one, as ``load_run`` does, and
the metrics are counted again from the lines that won.

``page(query)`` answers the table: the rows that pass the filters, in the order asked, one
page of them; the ordering of the last query is kept until the filters, the order or the run
change, so paging through it costs only the page.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from osmosis_run.errors import RunDirError
from osmosis_run.reports.html_report import MetricMeans, charts, rollout_detail, rollout_row
from osmosis_run.results.metrics import MetricsAccumulator
from osmosis_run.results.records import STATUSES, ResultLine, Summary
from osmosis_run.store.layout import (
    FINGERPRINT,
    INVOCATION,
    RESULTS,
    SUMMARY,
    rollout_dir,
)
from osmosis_run.store.rundata import read_json_object, read_run_config
from osmosis_run.store.store import parse_line
from osmosis_run.view.runs import RunState, run_state

__all__ = ["SORTS", "Query", "RunIndex", "started_at"]

_READ_BYTES = 1 << 20
SORTS = ("row", "reward", "duration", "id")
_NAN = math.nan
_OUTCOME = {True: 1, False: 0, None: 2}  # passed, not passed, no verdict


@dataclass(frozen=True, slots=True)
class Query:
    """A view of the rollouts table: its filters and order (the page's URL holds the same).

    Attributes:
        status: one status, or "" for every one.
        category: one error category, "-" for rollouts without an error, "" for every one.
        outcome: "pass", "fail" or "".
        reward_min: the lowest reward shown (inclusive), or None.
        reward_max: the highest reward shown (inclusive), or None.
        sample: one sample index, or None.
        meta_key: a metadata field, with ``meta_value`` the value it must have (as text).
        meta_value: see ``meta_key``.
        sort: one of ``SORTS``.
        descending: the order reversed.
    """

    status: str = ""
    category: str = ""
    outcome: str = ""
    reward_min: float | None = None
    reward_max: float | None = None
    sample: int | None = None
    meta_key: str = ""
    meta_value: str = ""
    sort: str = "row"
    descending: bool = False


class RunIndex:
    """A run's rollouts, their summary and their chart values, followed as they are written."""

    def __init__(self, run_dir: Path, name: str) -> None:
        self.run_dir = run_dir
        self.name = name
        self.lock = threading.Lock()
        self.version = 0  # changes whenever rows were added or the run was read again
        self._clear()

    def _clear(self) -> None:
        try:
            config = read_run_config(self.run_dir)
        except RunDirError:
            config = {}  # shown without it; `osmosis-run report` says what is wrong
        self.config = config
        self.threshold = _number(config.get("pass_threshold"), 1.0)
        self.metrics = MetricsAccumulator(
            pass_threshold=self.threshold,
            samples=int(_number(config.get("samples"), 1)),
            group_by=config.get("group_by") if isinstance(config.get("group_by"), str) else None,
        )
        self._offset = 0
        self._identity: tuple[int, int] | None = None
        self._mtime = 0
        self._position: dict[str, int] = {}
        self.ids: list[str] = []
        self.rows: list[bytes] = []
        self.starts = array("q")
        self.sizes = array("l")
        self.status = bytearray()
        self.outcome = bytearray()
        self.category: list[str | None] = []
        self.reward = array("d")
        self.duration = array("d")
        self.row_index = array("q")
        self.sample = array("l")
        self.metadata: list[dict[str, Any] | None] = []
        self.workflow_ms: list[float] = []
        self.grader_ms: list[float] = []
        self.metric_means = MetricMeans()
        self._ordered: tuple[Any, list[int]] | None = None
        self._recount = False
        self.version += 1

    # -- following the file ------------------------------------------------------------------

    def refresh(self) -> bool:
        """Read what was appended since the last call; return whether anything changed."""
        with self.lock:
            return self._refresh()

    def _refresh(self) -> bool:
        path = self.run_dir / RESULTS
        try:
            status = path.stat()
        except OSError:
            if self.ids:
                self._clear()
                return True
            return False
        identity = (status.st_dev, status.st_ino)
        if self._identity is not None and (
            identity != self._identity
            or status.st_size < self._offset
            or (status.st_size == self._offset and status.st_mtime_ns != self._mtime)
        ):
            self._clear()  # rewritten or started over: read it again from the start
        self._identity, self._mtime = identity, status.st_mtime_ns
        if status.st_size == self._offset:
            return False
        added = self._read(path)
        if self._recount:
            self._count_again()
        if added:
            self.version += 1
            self._ordered = None
        return added

    def _read(self, path: Path) -> bool:
        added = False
        with path.open("rb") as f:
            f.seek(self._offset)
            pending = b""
            while chunk := f.read(_READ_BYTES):
                data = pending + chunk
                end = data.rfind(b"\n")
                if end < 0:
                    pending = data
                    continue
                start = self._offset
                for raw in data[: end + 1].splitlines(keepends=True):
                    self._add(raw, start)
                    start += len(raw)
                    added = True
                self._offset = start
                pending = data[end + 1 :]
        return added

    def _add(self, raw: bytes, start: int) -> None:
        line = parse_line(raw)
        if line is None:
            return  # a corrupt line: skipped, as every reader of results.jsonl skips it
        row = rollout_row(line, self.threshold)
        reward, workflow, grader = line.reward, line.workflow_ms, line.grader_ms
        total = (workflow or 0.0) + (grader or 0.0)
        columns: tuple[tuple[Any, Any], ...] = (
            # A copy: orjson's own bytes keep the whole buffer it wrote into (4 KB and more).
            (self.rows, bytes(memoryview(orjson.dumps(row)))),
            (self.starts, start),
            (self.sizes, len(raw)),
            (self.status, STATUSES.index(line.status)),
            (self.outcome, _OUTCOME[row.get("p")]),
            (self.category, line.error_category),
            (self.reward, reward if reward is not None and math.isfinite(reward) else _NAN),
            (self.duration, total if workflow is not None or grader is not None else _NAN),
            (self.row_index, line.row_index),
            (self.sample, line.sample_index),
            (self.metadata, line.metadata or None),
        )
        at = self._position.get(line.rollout_id)
        if at is not None:  # seen before: the later line wins, and the metrics are counted anew
            for column, value in columns:
                column[at] = value
            self._recount = True
            return
        self._position[line.rollout_id] = len(self.ids)
        self.ids.append(line.rollout_id)
        for column, value in columns:
            column.append(value)
        self._count(line)

    def _count(self, line: ResultLine) -> None:
        """Add a rollout to the metrics and to the values the charts are drawn from."""
        if line.workflow_ms is not None:
            self.workflow_ms.append(line.workflow_ms)
        if line.grader_ms is not None:
            self.grader_ms.append(line.grader_ms)
        if line.metrics:
            self.metric_means.add(line.metrics)
        self.metrics.add(line)

    def _count_again(self) -> None:
        """Count every rollout's last line again (after a rollout id was seen twice)."""
        self.metrics = MetricsAccumulator(
            pass_threshold=self.metrics.pass_threshold,
            samples=self.metrics.samples,
            group_by=self.metrics.group_by,
        )
        self.workflow_ms, self.grader_ms = [], []
        self.metric_means = MetricMeans()
        with (self.run_dir / RESULTS).open("rb") as f:
            for start, size in zip(self.starts, self.sizes, strict=True):
                f.seek(start)
                self._count(ResultLine.model_validate_json(f.read(size)))
        self._recount = False

    # -- what the page asks ------------------------------------------------------------------

    def summary(self) -> Summary:
        """The run's summary: ``report --json``'s numbers (``load_run``'s definition)."""
        from osmosis_run.store.rundata import with_stored_summary

        return with_stored_summary(self.metrics.summary(), _stored_summary(self.run_dir))

    def state(self, summary: Summary) -> RunState:
        """``running``, ``finished`` or ``interrupted``."""
        return run_state(self.run_dir, complete=summary.complete)

    def overview(self) -> dict[str, Any]:
        """The run as the runs list shows it."""
        s = self.summary()
        state = self.state(s)
        planned, wall = s.planned, s.wall_s
        if state == "running":  # what the invocation writing it said when it started
            started = read_json_object(self.run_dir / INVOCATION)
            planned = started.get("planned", planned)
            if isinstance(started.get("started_at"), int | float):
                wall = max(0.0, time.time() - started["started_at"])
        return {
            "name": self.name,
            "path": str(self.run_dir),
            "dataset": self.config.get("dataset"),
            "workflow": self.config.get("workflow"),
            "grader": self.config.get("grader"),
            "state": state,
            "rollouts": s.rollouts,
            "planned": planned,
            "mean_reward": s.reward_all.mean,
            "pass_rate": s.pass_rate,
            "errors": s.errors,
            "started_at": started_at(self.run_dir),
            "wall_s": wall,
            "version": self.version,
        }

    def charts(self) -> dict[str, Any]:
        """The data of the run's charts, over every rollout."""
        rewards = [r for r in self.reward if r == r]  # NaN is the one value not equal to itself
        return charts(self.summary(), rewards, self.workflow_ms, self.grader_ms)

    def page(self, query: Query, *, offset: int, limit: int) -> tuple[int, bytes]:
        """How many rollouts pass the filters, and the JSON array of one page of their rows."""
        order = self._order(query)
        chosen = order[offset : offset + limit]
        return len(order), b"[" + b",".join(self.rows[i] for i in chosen) + b"]"

    def position(self, query: Query, rollout_id: str) -> int | None:
        """Where a rollout is in the table the query shows (None: filtered out, or unknown)."""
        at = self._position.get(rollout_id)
        if at is None:
            return None
        order = self._order(query)
        with contextlib.suppress(ValueError):
            return order.index(at)
        return None

    def line(self, rollout_id: str) -> bytes | None:
        """A rollout's results line as written, or None when the run has no such rollout."""
        at = self._position.get(rollout_id)
        if at is None:
            return None
        with (self.run_dir / RESULTS).open("rb") as f:
            f.seek(self.starts[at])
            return f.read(self.sizes[at])

    def detail(self, rollout_id: str) -> dict[str, Any] | None:
        """A rollout as the drawer shows it (``html_report.rollout_detail``), or None."""
        raw = self.line(rollout_id)
        if raw is None:
            return None
        line = ResultLine.model_validate_json(raw)
        where = str(rollout_dir(self.run_dir, rollout_id))
        return rollout_detail(line, self.threshold, where)

    def metadata_keys(self) -> list[str]:
        """The metadata fields the rollouts have (the first 1,000 rollouts say), for filters."""
        keys: set[str] = set()
        for metadata in self.metadata[:1000]:
            if metadata:
                keys.update(metadata)
        return sorted(keys)

    def _order(self, query: Query) -> list[int]:
        key = (self.version, query)
        if self._ordered is not None and self._ordered[0] == key:
            return self._ordered[1]
        chosen = self._filtered(query)
        if query.sort == "reward":
            chosen.sort(key=_nan_last(self.reward, query.descending), reverse=query.descending)
        elif query.sort == "duration":
            chosen.sort(key=_nan_last(self.duration, query.descending), reverse=query.descending)
        elif query.sort == "id":
            ids = self.ids
            chosen.sort(key=ids.__getitem__, reverse=query.descending)
        else:
            rows, samples, ids = self.row_index, self.sample, self.ids
            chosen.sort(key=lambda i: (rows[i], samples[i], ids[i]), reverse=query.descending)
        self._ordered = (key, chosen)
        return chosen

    def _filtered(self, q: Query) -> list[int]:
        chosen = list(range(len(self.ids)))
        if q.status:
            code = STATUSES.index(q.status) if q.status in STATUSES else -1
            status = self.status
            chosen = [i for i in chosen if status[i] == code]
        if q.category:
            category = self.category
            want = None if q.category == "-" else q.category
            chosen = [i for i in chosen if category[i] == want]
        if q.outcome in ("pass", "fail"):
            code = _OUTCOME[q.outcome == "pass"]
            outcomes = self.outcome
            chosen = [i for i in chosen if outcomes[i] == code]
        if q.reward_min is not None or q.reward_max is not None:
            low = -math.inf if q.reward_min is None else q.reward_min
            high = math.inf if q.reward_max is None else q.reward_max
            reward = self.reward
            chosen = [i for i in chosen if low <= reward[i] <= high]  # NaN: never
        if q.sample is not None:
            sample = self.sample
            chosen = [i for i in chosen if sample[i] == q.sample]
        if q.meta_key:
            metadata, field, value = self.metadata, q.meta_key, q.meta_value
            chosen = [i for i in chosen if _meta_text(metadata[i], field) == value]
        return chosen


def _nan_last(values: array[float], descending: bool) -> Any:
    """A sort key that puts rollouts without a value last, in either direction."""
    missing = -math.inf if descending else math.inf
    return lambda i: values[i] if values[i] == values[i] else missing


def _meta_text(metadata: dict[str, Any] | None, field: str) -> str | None:
    if not metadata or field not in metadata:
        return None
    value = metadata[field]
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _stored_summary(run_dir: Path) -> Summary | None:
    try:
        return Summary.model_validate_json((run_dir / SUMMARY).read_bytes())
    except (OSError, ValidationError):
        return None


def started_at(run_dir: Path) -> float | None:
    """When the run was first started: its fingerprint.json is written then, once."""
    try:
        return (run_dir / FINGERPRINT).stat().st_mtime
    except OSError:
        return None


def _number(value: Any, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return default
