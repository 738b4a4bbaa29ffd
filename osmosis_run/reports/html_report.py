"""Pictures of a run: one self-contained HTML file (inline CSS, JavaScript and SVG; no network).

``render_run_html(run)`` draws one run: the summary numbers, a reward histogram, workflow and
grader latency, the pass@k curve when rows were sampled two or more times, counts by status and
error category, model tokens and cost when the run went through the gateway, and a table of
rollouts (its prompt and final answer at a glance, a rollout that did not pass shown as failed,
the samples of ``-n`` grouped under their row) that can be filtered, sorted and paged; clicking
a rollout shows its transcript, reward, error message and traceback, and links to its files.
``render_compare_html(a, b, comparison=...)`` draws two runs paired by rollout id: the numbers of
``osmosis-run compare`` (the ``Comparison`` that ``compare_runs`` returns, rendered, not computed
again: the same deltas, row-bootstrap intervals, pairing counts and flips), both runs' own
numbers, paired reward deltas, and the rows that flipped (pass -> fail, fail -> pass) with both
transcripts side by side, the first message where they differ highlighted. ``save_run_html``
and ``save_compare_html`` write the page of runs already loaded (``write_run_html`` and
``write_compare_html`` load them first), with links relative to where it is written, so they
work when the HTML sits in or next to the run directory (the page says so).

The page embeds its data once, as JSON in a ``<script type="application/json">`` block (every
``<``, ``>`` and ``&`` escaped, so no ``</script>`` or ``<!--`` in a dataset can end it), and its
own script draws it: tables are paged, and a transcript becomes DOM only when it is opened.
Everything that comes from a dataset or a model is inserted as text, never as markup, and a
Content Security Policy lets only the page's own script run and blocks every network request.

Limits, so that a 20,000-rollout run stays a file a browser opens in well under a second
(measured: 5.7 MB with short transcripts, 15.4 MB when they are over the budget below):

- Every rollout's prompt and final answer (the table's glance columns) are embedded, each cut
  to 100 characters on one line; the drawer shows them whole, from the transcript.
- Message content over 4,000 characters keeps its first 3,000 and last 1,000, with a marker
  saying how many were cut; tool-call arguments and reasoning over 2,000 keep 1,500 + 500.
- A transcript over 120 messages keeps its first 20 and its last 100.
- When all transcripts together are over 8,000,000 characters, only failing rollouts' transcripts
  are embedded (failure, timeout, invalid, or reward below the pass threshold; on the comparison
  page, flipped rows first, then rows failing in either run), up to that budget. The others say
  so and link to their ``trajectory.json``.
- Error messages, labels, metadata and metrics are cut at 2,000 characters each; tracebacks keep
  their last 8,000. At most 50 artifact files are listed per rollout.
- The rollouts table lists at most 20,000 rollouts (``MAX_ROWS``; the comparison page, 20,000
  pairs): every one that did not pass first (on the comparison page, the flipped ones, then those
  failing in either run), then the others in row order. The page says so; its numbers and charts
  count every rollout. A million-rollout run's page is then about as large as a 20,000-rollout
  run's, and it is made in two passes over the results, never holding them all.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import os
import re
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

from osmosis_run import __version__
from osmosis_run.errors import ConfigError
from osmosis_run.reports._files import write_whole
from osmosis_run.reports.message_text import message_text
from osmosis_run.results import outcome
from osmosis_run.results.compare import Comparison, Delta, compare_runs, pair_rollouts
from osmosis_run.results.records import STATUSES, ResultLine, Summary
from osmosis_run.results.rundata import RunData
from osmosis_run.store.layout import (
    ARTIFACTS,
    MODEL_CALLS,
    RESULT_JSON,
    ROLLOUTS,
    TRAJECTORY_JSON,
)
from osmosis_run.store.rundata import load_run

__all__ = [
    "MetricMeans",
    "charts",
    "compare_payload",
    "limits",
    "render_compare_html",
    "rollout_detail",
    "rollout_row",
    "usage_totals",
    "render_run_html",
    "save_compare_html",
    "save_run_html",
    "write_compare_html",
    "write_run_html",
]

MAX_CONTENT_CHARS = 4_000
MAX_ARGUMENT_CHARS = 2_000
MAX_MESSAGES = 120
KEEP_FIRST_MESSAGES = 20
TRANSCRIPT_BUDGET_CHARS = 8_000_000
MAX_FIELD_CHARS = 2_000
# "What the model saw": at most this many calls per rollout are embedded, each request's last
# messages only, and no more than MODEL_CALLS_BUDGET_CHARS of them in the whole page.
MAX_MODEL_CALLS = 20
CALL_MESSAGES = 6
MODEL_CALLS_BUDGET_CHARS = 3_000_000
MAX_TRACEBACK_CHARS = 8_000
MAX_ARTIFACTS = 50
METRIC_KEYS = 12
GLANCE_CHARS = 100  # the prompt and final answer columns of the rollout table
MAX_ROWS = 20_000  # rollouts (or pairs) the table lists
_MAX_ROW_BITS = 1 << 28  # row indices a run page tracks to find rows with several rollouts

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_SURROGATE = re.compile("[\ud800-\udfff]")
_HANDLED_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})
_REASONING_KEYS = ("reasoning_content", "reasoning")


def render_run_html(run: RunData, *, html_dir: Path | None = None) -> str:
    """Render the report of one run as a self-contained HTML page.

    Args:
        run: the run, as ``load_run`` reads it.
        html_dir: the folder the page will be saved in, for relative links to the rollouts'
            files; by default the run directory itself.
    """
    base = _link_base(run.run_dir, html_dir if html_dir is not None else run.run_dir)
    threshold = run.summary.pass_threshold
    scan = _RunScan(threshold)
    for line in run.lines:
        scan.add(line)
    listed, groups = _listed(run.lines, scan)
    where = os.path.join(run.run_dir, ROLLOUTS)
    budget = [MODEL_CALLS_BUDGET_CHARS]
    rollouts = [
        _rollout(line, threshold, os.path.join(where, line.rollout_id), budget)
        for line in (run.lines[position] for position in listed)
    ]
    embedding = _embed(rollouts, lambda r: 0 if r.failing else None)
    payload = {
        "kind": "run",
        "run": _run_info(run, base),
        "summary": run.summary.model_dump(mode="json"),
        "charts": charts(run.summary, scan.rewards, scan.workflow, scan.grader),
        "metrics": scan.metrics.means(),
        "rows": [r.row for r in rollouts],
        "groups": groups,
        "usage": usage_totals(run.summary),
        "limits": {**embedding, **_listing(scan.count, len(rollouts))},
    }
    return _page(f"{_name(run)} · osmosis-run report", payload)


def write_run_html(
    run_dir: Path, out: Path, *, pass_threshold: float | None = None, group_by: str | None = None
) -> Path:
    """Write the report of the run in ``run_dir`` to ``out`` and return ``out``.

    ``pass_threshold`` and ``group_by`` override the run's own, as in ``load_run``.

    Raises:
        RunDirError: ``run_dir`` is not a run directory.
    """
    run = load_run(run_dir, pass_threshold=pass_threshold, group_by=group_by)
    return save_run_html(run, out)


def save_run_html(run: RunData, out: Path) -> Path:
    """Write the report of a run already loaded to ``out`` and return ``out``.

    Raises:
        ConfigError: ``out`` cannot be written.
    """
    return _write(out, render_run_html(run, html_dir=out.parent))


def render_compare_html(
    a: RunData,
    b: RunData,
    *,
    comparison: Comparison | None = None,
    html_dir: Path | None = None,
) -> str:
    """Render a comparison of run ``a`` (before) and run ``b`` (after), paired by rollout id.

    Args:
        a: the baseline run.
        b: the candidate run.
        comparison: ``compare_runs(a, b, ...)``, whose numbers the page shows (and whose pass
            threshold judges both runs' rollouts); by default ``compare_runs(a, b)``.
        html_dir: the folder the page will be saved in, for relative links; by default the
            folder that holds both run directories.
    """
    cmp = comparison if comparison is not None else compare_runs(a, b)
    where = html_dir if html_dir is not None else _common_dir(a.run_dir, b.run_dir)
    bases = (_link_base(a.run_dir, where), _link_base(b.run_dir, where))
    payload = compare_payload(a, b, comparison=cmp, bases=bases)
    return _page(f"{_name(a)} vs {_name(b)} · osmosis-run comparison", payload)


def compare_payload(
    a: RunData, b: RunData, *, comparison: Comparison, bases: tuple[str, str]
) -> dict[str, Any]:
    """What the comparison page draws (the report embeds it; ``osmosis-run view`` serves it):
    ``comparison``'s numbers, both runs, their rollouts paired; ``bases`` prefix the links to
    each run's files."""
    cmp = comparison
    threshold, flips = cmp.pass_threshold, _flips(cmp)
    scan = _PairScan(flips)
    glances_a, glances_b = _glances(a, threshold), _glances(b, threshold)
    for side_a, side_b in pair_rollouts(glances_a, glances_b, lambda g: g.rollout_id):
        scan.add(side_a, side_b)
    listed = {key[-1] for key in scan.choice.result()}
    rows_a = _listed_rollouts(a, listed, threshold)
    rows_b = _listed_rollouts(b, listed, threshold)
    pairs = _pairs(rows_a, rows_b, flips)
    embedding = _embed([*rows_a.values(), *rows_b.values()], lambda r: r.compare_priority)
    return {
        "kind": "compare",
        "a": {**_run_info(a, bases[0]), "summary": _dump(a)},
        "b": {**_run_info(b, bases[1]), "summary": _dump(b)},
        "comparison": _comparison(cmp),
        "paired": scan.stats(),
        "pairs": [p.row for p in pairs],
        "limits": {**embedding, **_listing(scan.count, len(pairs))},
    }


def write_compare_html(
    run_a: Path, run_b: Path, out: Path, *, pass_threshold: float | None = None
) -> Path:
    """Write the comparison of the runs in ``run_a`` and ``run_b`` to ``out`` and return ``out``.

    ``pass_threshold`` overrides both runs' own, as in ``load_run`` and ``compare_runs``.

    Raises:
        RunDirError: either directory is not a run directory.
    """
    a = load_run(run_a, pass_threshold=pass_threshold)
    b = load_run(run_b, pass_threshold=pass_threshold)
    return save_compare_html(
        a, b, out, comparison=compare_runs(a, b, pass_threshold=pass_threshold)
    )


def save_compare_html(
    a: RunData, b: RunData, out: Path, *, comparison: Comparison | None = None
) -> Path:
    """Write the comparison of runs already loaded to ``out`` and return ``out``.

    ``comparison`` is what ``compare_runs(a, b, ...)`` returned, as in ``render_compare_html``.

    Raises:
        ConfigError: ``out`` cannot be written.
    """
    return _write(out, render_compare_html(a, b, comparison=comparison, html_dir=out.parent))


# -- the page ---------------------------------------------------------------------------------


def _page(title: str, payload: dict[str, Any]) -> str:
    assets = resources.files("osmosis_run.reports") / "html"
    script = assets.joinpath("report.js").read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    payload = {
        **payload,
        "statuses": list(STATUSES),
        "version": __version__,
        "generated_at": time.time(),
    }
    values = {
        "title": html.escape(title),
        "version": html.escape(__version__),
        "css": assets.joinpath("report.css").read_text(encoding="utf-8"),
        "script_hash": f"sha256-{digest}",
        "data": _script_json(payload),
        "js": script,
    }
    template = assets.joinpath("report.html").read_text(encoding="utf-8")
    # One pass: text put in a placeholder is never scanned for placeholders again.
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


def _script_json(value: Any) -> str:
    """Serialize ``value`` as JSON safe inside a ``<script>`` element.

    ``<``, ``>`` and ``&`` become ``\\u003c`` etc. (so neither ``</script>`` nor ``<!--`` can
    appear), and lone surrogates, which UTF-8 cannot encode, become U+FFFD.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return _SURROGATE.sub("\ufffd", text)


def _write(out: Path, text: str) -> Path:
    """Write whole: to a temporary name beside ``out``, then renamed into place.

    A failure leaves no temporary file behind (``out`` a directory is refused before one).
    """
    if out.parent.exists() and not out.parent.is_dir():
        raise ConfigError(f"cannot write {out}: {out.parent} is a file; choose another path")
    if out.is_dir():
        raise ConfigError(f"cannot write {out}: it is a directory; give a file name")
    write_whole(out, lambda temporary: temporary.write_text(text, encoding="utf-8"))
    return out


def _link_base(run_dir: Path, html_dir: Path) -> str:
    """The relative URL prefix from the page's folder to the run directory ("" or "a/b/")."""
    try:
        relative = os.path.relpath(run_dir.resolve(), html_dir.resolve())
    except ValueError:  # another drive on Windows: no relative path exists
        return run_dir.resolve().as_uri() + "/"
    if relative == ".":
        return ""
    return "/".join(_quote(part) for part in Path(relative).parts) + "/"


def _quote(segment: str) -> str:
    return quote(segment, safe="")


def _common_dir(a: Path, b: Path) -> Path:
    try:
        return Path(os.path.commonpath([a.resolve(), b.resolve()]))
    except ValueError:
        return a.resolve().parent


def _name(run: RunData) -> str:
    return run.run_dir.resolve().name or str(run.run_dir)


def _dump(run: RunData) -> dict[str, Any]:
    return run.summary.model_dump(mode="json")


def _run_info(run: RunData, base: str) -> dict[str, Any]:
    config = run.config
    fields = ("dataset", "workflow", "grader", "samples", "pass_threshold", "no_messages")
    return {
        "name": _name(run),
        "base": base,
        **{key: config[key] for key in fields if key in config},
        "pass_threshold": run.summary.pass_threshold,
    }


# -- rollouts ---------------------------------------------------------------------------------


@dataclass
class _Rollout:
    """One rollout as the page embeds it: ``row`` is its JSON object, with short keys."""

    row: dict[str, Any]
    transcript: list[dict[str, Any]] | None
    size: int
    failing: bool
    compare_priority: int | None = None


def _listed_rollouts(run: RunData, ids: set[str], threshold: float) -> dict[str, _Rollout]:
    """The rollouts of ``run`` whose ids are in ``ids``, by id (a pass over its results)."""
    where = os.path.join(run.run_dir, ROLLOUTS)
    budget = [MODEL_CALLS_BUDGET_CHARS]
    return {
        line.rollout_id: _rollout(line, threshold, os.path.join(where, line.rollout_id), budget)
        for line in run.lines
        if line.rollout_id in ids
    }


def _listing(rollouts: int, listed: int) -> dict[str, int]:
    """How many rollouts (or pairs) there are and how many the table lists (the page says so)."""
    return {"rollouts": rollouts, "listed": listed, "max_rows": MAX_ROWS}


class _Choice:
    """The ``size`` least keys of a stream (the rollouts a table lists), in O(size) memory.

    Keys are kept, sorted and cut to ``size`` whenever twice as many are kept; the greatest kept
    then bounds what may still enter, so most keys of a long run are one comparison each.
    """

    def __init__(self, size: int) -> None:
        self.size = max(size, 1)
        self.kept: list[tuple[Any, ...]] = []
        self.bound: tuple[Any, ...] | None = None

    def add(self, key: tuple[Any, ...]) -> None:
        if self.bound is not None and not key < self.bound:
            return
        self.kept.append(key)
        if len(self.kept) >= 2 * self.size:
            self._cut()

    def _cut(self) -> None:
        self.kept.sort()
        del self.kept[self.size :]
        self.bound = self.kept[-1]

    def result(self) -> list[tuple[Any, ...]]:
        """The least keys, in order."""
        if self.kept:
            self._cut()
        return self.kept


class _RunScan:
    """The first pass of a run's page over every rollout: what its charts draw, the metric
    means, and which rollouts its table lists (those that did not pass first, then by row)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.count = 0
        self.rewards: array[float] = array("d")
        self.workflow: array[float] = array("d")
        self.grader: array[float] = array("d")
        self.metrics = MetricMeans()
        self.choice = _Choice(MAX_ROWS)
        self.rows = bytearray()  # a bit per row index seen
        self.repeated = False  # a row has two or more rollouts (samples): the table groups them

    def add(self, line: ResultLine) -> None:
        position = self.count
        self.count += 1
        if line.reward is not None:
            self.rewards.append(line.reward)
        if line.workflow_ms is not None:
            self.workflow.append(line.workflow_ms)
        if line.grader_ms is not None:
            self.grader.append(line.grader_ms)
        if line.metrics:
            self.metrics.add(line.metrics)
        failing = outcome.passed(line.status, line.reward, self.threshold) is False
        order = (line.row_index, line.sample_index, line.rollout_id)
        self.choice.add((not failing, *order, position))
        if not self.repeated:
            self._row(line.row_index)

    def _row(self, index: int) -> None:
        if not 0 <= index < _MAX_ROW_BITS:
            self.repeated = True  # not tracked: look for rows with several rollouts
            return
        byte, bit = index >> 3, 1 << (index & 7)
        if byte >= len(self.rows):
            self.rows.extend(bytes(max(byte + 1 - len(self.rows), len(self.rows))))
        if self.rows[byte] & bit:
            self.repeated = True
        self.rows[byte] |= bit


def _listed(
    lines: Sequence[ResultLine], scan: _RunScan
) -> tuple[list[int], dict[str, dict[str, Any]]]:
    """Where the rollouts the table lists are in ``lines``, in row order, and the groups of
    their rows' samples (a second pass counts every rollout of those rows, when a row has
    several)."""
    chosen = scan.choice.result()
    listed = [key[-1] for key in sorted(chosen, key=lambda key: key[1:])]
    if not scan.repeated:
        return listed, {}
    rows = {key[1] for key in chosen}
    groups = _RowGroups(scan.threshold)
    for line in lines:
        if line.row_index in rows:
            groups.add(line)
    return listed, groups.result()


class _RowGroups:
    """Per dataset row with two or more rollouts (``-n``): samples, passed, failed, errors,
    and the mean score (failures count 0), so the table can head each row's samples."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.rows: dict[int, list[float]] = {}  # rollouts, passed, failed, errors, scored, sum

    def add(self, line: ResultLine) -> None:
        tally = self.rows.setdefault(line.row_index, [0, 0, 0, 0, 0, 0.0])
        tally[0] += 1
        kind = _outcome({"st": line.status, "p": _passed(line, self.threshold)})
        if kind in _GROUP_COUNTS:
            tally[_GROUP_COUNTS[kind]] += 1
        score = outcome.score(line.status, _finite(line.reward))
        if score is not None:
            tally[4] += 1
            tally[5] += score

    def result(self) -> dict[str, dict[str, Any]]:
        return {
            str(index): {
                "n": int(n),
                "p": int(p),
                "f": int(f),
                "e": int(e),
                "m": total / scored if scored else None,
            }
            for index, (n, p, f, e, scored, total) in self.rows.items()
            if n >= 2
        }


_GROUP_COUNTS = {"pass": 1, "fail": 2, "error": 3}


def _passed(line: ResultLine, threshold: float) -> bool | None:
    return outcome.passed(line.status, line.reward, threshold)


def _rollout(
    line: ResultLine, threshold: float, where: str, calls_budget: list[int] | None = None
) -> _Rollout:
    row = rollout_row(line, threshold)
    row.update(_files(where))
    if "c" in row.get("f", ""):
        row.update(_model_calls(os.path.join(where, MODEL_CALLS), calls_budget or [0]))
    messages = line.messages
    if outcome.is_error(line.status) or line.error_message is not None:
        details = _error_details(os.path.join(where, RESULT_JSON))
        row.update({k: v for k, v in details.items() if k != "prompt"})
        if messages is None and details.get("prompt"):
            messages, row["tp"] = details["prompt"], True
            row.update(_glance(messages, answered=False))
    transcript, size = _transcript(messages) if messages is not None else (None, 0)
    return _Rollout(row, transcript, size, failing=row.get("p") is False)


def rollout_detail(line: ResultLine, threshold: float, where: str) -> dict[str, Any]:
    """A rollout as the report's drawer shows it: its row with its files, model calls, error
    details and transcript (``"t"``, shortened as the report shortens it); ``where`` is its
    folder, ``rollouts/<id>``."""
    rollout = _rollout(line, threshold, where, [MODEL_CALLS_BUDGET_CHARS])
    if rollout.transcript is not None:
        rollout.row["t"] = rollout.transcript
    return rollout.row


def limits() -> dict[str, Any]:
    """How the page shortens what it shows (the report's footer and markers say so)."""
    return {
        "budget_chars": TRANSCRIPT_BUDGET_CHARS,
        "max_content_chars": MAX_CONTENT_CHARS,
        "max_messages": MAX_MESSAGES,
        "keep_first_messages": KEEP_FIRST_MESSAGES,
        "max_artifacts": MAX_ARTIFACTS,
    }


def rollout_row(line: ResultLine, threshold: float) -> dict[str, Any]:
    """A rollout's row of the rollouts table, from its results line alone (short keys: the
    page's script reads them; ``osmosis-run view`` serves the same rows)."""
    passed = outcome.passed(line.status, line.reward, threshold)
    row: dict[str, Any] = {
        "i": line.rollout_id,
        "r": line.row_index,
        "l": line.line,
        "s": line.sample_index,
        "st": line.status,
        "a": line.attempts,
    }
    optional = {
        "rid": line.row_id,
        "ec": line.error_category,
        "em": _clip(line.error_message, MAX_FIELD_CHARS),
        "rw": _finite(line.reward),
        "p": passed,
        "wm": _finite(line.workflow_ms),
        "gm": _finite(line.grader_ms),
        "lb": _clip(line.label, MAX_FIELD_CHARS),
        "md": _clip_json(line.metadata),
        "m": _clip_json(line.metrics or None),
        "u": _usage(line.usage),
    }
    row.update({key: value for key, value in optional.items() if value is not None})
    row["o"] = _outcome(row)
    if line.messages is not None:
        row.update(_glance(line.messages))
    return row


def _glance(messages: list[Any], *, answered: bool = True) -> dict[str, str]:
    """The rollout at a glance: its prompt ("pr": the last user message before the first
    answer) and its final answer ("fa": the last assistant message with text), cut short."""
    dicts = [m for m in messages if isinstance(m, dict)]
    first_answer = next(
        (i for i, m in enumerate(dicts) if m.get("role") == "assistant"), len(dicts)
    )
    asked = [m for m in dicts[:first_answer] if m.get("role") == "user"] or [
        m for m in dicts if m.get("role") == "user"
    ]
    said = [
        m for m in dicts if m.get("role") == "assistant" and message_text(m.get("content")).strip()
    ]
    out = {}
    if asked:
        out["pr"] = _short(message_text(asked[-1].get("content")))
    if said and answered:
        out["fa"] = _short(message_text(said[-1].get("content")))
    return out


def _short(text: str) -> str:
    """One line of at most GLANCE_CHARS characters: whitespace runs become one space."""
    flat = " ".join(text.split())
    return flat if len(flat) <= GLANCE_CHARS else flat[: GLANCE_CHARS - 1] + "…"


# A results line's usage (the gateway's accounting) -> the page's short keys.
_USAGE_KEYS = {
    "requests": "rq",
    "prompt_tokens": "pt",
    "completion_tokens": "ct",
    "total_tokens": "tt",
    "retries": "rt",
    "rate_limited": "rl",
    "errors": "er",
    "model_wait_ms": "w",
    "cost": "$",
}


def _usage_dict(usage: Any) -> dict[str, Any] | None:
    """A usage record as a dict, whether it was read as a model or as plain JSON."""
    if usage is None:
        return None
    if hasattr(usage, "model_dump"):
        usage = usage.model_dump(mode="json")
    return usage if isinstance(usage, dict) else None


def _usage(usage: Any) -> dict[str, float] | None:
    """One rollout's model usage in the page's short form (finite numbers only)."""
    data = _usage_dict(usage)
    if data is None:
        return None
    out: dict[str, float] = {}
    for key, short in _USAGE_KEYS.items():
        value = data.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if math.isfinite(value) and (value or short not in _ONLY_IF_ANY):
            out[short] = value
    return out or None


_ONLY_IF_ANY = frozenset({"rl", "er"})  # 429s and failed calls: kept out of the page when none


def usage_totals(summary: Summary, lines: Iterable[ResultLine] = ()) -> dict[str, Any] | None:
    """The run's model usage: the summary's totals when it has them, else the lines' sums.

    None when no rollout went through the gateway (the page then shows no token figures).
    """
    model = _usage_dict(getattr(summary, "model", None))
    sums: dict[str, float] = {}
    costed = rollouts = 0
    for line in lines:
        usage = _usage(getattr(line, "usage", None))
        if usage is None:
            continue
        rollouts += 1
        costed += "$" in usage
        for key, value in usage.items():
            sums[key] = sums.get(key, 0) + value
    if model is not None:
        sums = _usage(model) or {}
        rollouts = int(model.get("rollouts") or rollouts)
        costed = int("$" in sums)
    if not rollouts and not sums:
        return None
    if not costed:
        sums.pop("$", None)
    return {"rollouts": rollouts, **sums}


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _clip(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit:,} more characters]"


def _clip_json(value: Any) -> Any:
    """``value`` as JSON data when that is short and strict JSON, else as (cut) JSON text.

    Text covers what strict JSON cannot carry: NaN and infinities (which Python's json reads
    from a dataset) and objects that are not JSON at all.
    """
    if value is None:
        return None
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)
    except ValueError:
        return _clip(json.dumps(value, ensure_ascii=False, default=str), MAX_FIELD_CHARS)
    return json.loads(text) if len(text) <= MAX_FIELD_CHARS else _clip(text, MAX_FIELD_CHARS)


def _files(where: str) -> dict[str, Any]:
    """Which of result.json and trajectory.json exist, and the artifact files (capped)."""
    try:
        with os.scandir(where) as entries:
            names = {entry.name for entry in entries}
    except OSError:
        return {}
    flags = ("r" if RESULT_JSON in names else "") + ("t" if TRAJECTORY_JSON in names else "")
    flags += "c" if MODEL_CALLS in names else ""
    found: dict[str, Any] = {"f": flags}
    if ARTIFACTS in names:
        artifacts = _artifacts(os.path.join(where, ARTIFACTS))
        if artifacts:
            found["af"] = artifacts[:MAX_ARTIFACTS]
            if len(artifacts) > MAX_ARTIFACTS:
                found["afn"] = len(artifacts)
    return found


def _artifacts(root: str) -> list[list[Any]]:
    """``[relative path, size]`` of the files under ``root``, sorted, folders walked in order."""
    found: list[list[Any]] = []
    pending = [("", root)]
    while pending and len(found) <= 10 * MAX_ARTIFACTS:  # count a few more than are listed
        prefix, folder = pending.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            continue
        folders = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                folders.append((f"{prefix}{entry.name}/", entry.path))
            else:
                found.append([prefix + entry.name, _size_of(entry)])
        pending.extend(reversed(folders))
    return found


def _size_of(entry: os.DirEntry[str]) -> int | None:
    try:
        return entry.stat().st_size
    except OSError:
        return None


def _error_details(path: str) -> dict[str, Any]:
    """The traceback, stage and (for a transcript-less failure) the prompt, from result.json."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    details: dict[str, Any] = {}
    error = doc.get("error")
    if isinstance(error, dict):
        traceback = error.get("traceback")
        if isinstance(traceback, str):
            cut = max(0, len(traceback) - MAX_TRACEBACK_CHARS)
            details["tb"] = ("… [earlier lines cut]\n" if cut else "") + traceback[cut:]
        if isinstance(error.get("stage"), str):
            details["es"] = error["stage"]
    request = doc.get("request")
    if isinstance(request, dict) and isinstance(request.get("prompt"), list):
        details["prompt"] = request["prompt"]
    return details


# -- transcripts ------------------------------------------------------------------------------


def _transcript(messages: list[Any]) -> tuple[list[dict[str, Any]], int]:
    """Messages in the page's short form, capped; and a cheap estimate of their JSON size."""
    out = [_message(m) if isinstance(m, dict) else _message({"content": m}) for m in messages]
    if len(out) > MAX_MESSAGES:
        tail = MAX_MESSAGES - KEEP_FIRST_MESSAGES
        gap = {"r": "gap", "om": len(out) - MAX_MESSAGES}
        out = [*out[:KEEP_FIRST_MESSAGES], gap, *out[-tail:]]
    size = sum(_size(m) for m in out)
    return out, size


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value) + 3
    if isinstance(value, dict):
        return sum(len(k) + 4 + _size(v) for k, v in value.items()) + 2
    if isinstance(value, list):
        return sum(_size(v) + 1 for v in value) + 2
    return 6


def _message(message: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"r": str(message.get("role") or "message")[:40]}
    content = message_text(message.get("content"))
    if content:
        out.update(_cut(content, MAX_CONTENT_CHARS, "c"))
    for key in _REASONING_KEYS:
        if isinstance(message.get(key), str) and message[key]:
            out.update(_cut(message[key], MAX_ARGUMENT_CHARS, "rs"))
            break
    if message.get("name") is not None:
        out["n"] = str(message["name"])[:200]
    if message.get("tool_call_id") is not None:
        out["tid"] = str(message["tool_call_id"])[:200]
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        out["tc"] = [_tool_call(call) for call in calls]
    extra = {
        k: v for k, v in message.items() if k not in _HANDLED_KEYS and k not in _REASONING_KEYS
    }
    if extra:
        out["x"] = _clip(json.dumps(extra, ensure_ascii=False, default=str), MAX_FIELD_CHARS)
    return out


def _tool_call(call: Any) -> dict[str, Any]:
    if not isinstance(call, dict):
        return _cut(json.dumps(call, ensure_ascii=False, default=str), MAX_ARGUMENT_CHARS, "a")
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    assert isinstance(function, dict)
    name = function.get("name", call.get("name"))
    arguments = function.get("arguments", call.get("arguments"))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False, default=str)
    out: dict[str, Any] = {"id": str(call.get("id") or ""), "n": str(name or "")}
    out.update(_cut(arguments, MAX_ARGUMENT_CHARS, "a"))
    return out


def _cut(text: str, limit: int, key: str) -> dict[str, Any]:
    """``{key: text}``, or its head, tail and the number of characters cut between them."""
    if len(text) <= limit:
        return {key: text}
    head, tail = limit * 3 // 4, limit // 4
    return {key: text[:head], key + "x": len(text) - head - tail, key + "t": text[-tail:]}


def _embed(rollouts: list[_Rollout], priority: Callable[[_Rollout], int | None]) -> dict[str, Any]:
    """Put transcripts into their rows: all when they fit the budget, else by ``priority``."""
    with_transcript = [r for r in rollouts if r.transcript is not None]
    total = sum(r.size for r in with_transcript)
    chosen = with_transcript
    if total > TRANSCRIPT_BUDGET_CHARS:
        ranked = sorted(
            (r for r in with_transcript if priority(r) is not None),
            key=lambda r: priority(r) or 0,
        )
        chosen, spent = [], 0
        for r in ranked:
            if spent + r.size <= TRANSCRIPT_BUDGET_CHARS:
                chosen.append(r)
                spent += r.size
    chosen_ids = {id(r) for r in chosen}
    for r in with_transcript:
        if id(r) in chosen_ids:
            r.row["t"] = r.transcript
        else:
            r.row["tz"] = 1
    return {
        "transcripts": len(with_transcript),
        "embedded": len(chosen),
        "over_budget": total > TRANSCRIPT_BUDGET_CHARS,
        **limits(),
    }


# -- charts and numbers -----------------------------------------------------------------------


def charts(
    summary: Summary, rewards: Sequence[float], workflow: Sequence[float], grader: Sequence[float]
) -> dict[str, Any]:
    """The data of a run's charts: every rollout's reward and latencies, and its summary's
    counts (the report embeds it; ``osmosis-run view`` serves it)."""
    return {
        "reward": _histogram(rewards),
        "latency": _latency(workflow, grader),
        "status": [[s, summary.counts[s]] for s in STATUSES if summary.counts.get(s)],
        "categories": sorted(summary.error_categories.items(), key=lambda kv: (-kv[1], kv[0])),
    }


def _histogram(values: Sequence[float]) -> dict[str, Any] | None:
    """Ten equal bins over [0, 1] when the finite values fit there, else over [min, max]."""
    low = min((v for v in values if math.isfinite(v)), default=None)
    if low is None:
        return None
    high = max(v for v in values if math.isfinite(v))
    if low >= 0.0 and high <= 1.0:
        low, high = 0.0, 1.0
    elif high - low < 1e-12:
        low, high = low - 0.5, high + 0.5
    bins = 10
    width = (high - low) / bins
    counts = [0] * bins
    for value in values:
        if math.isfinite(value):
            counts[min(bins - 1, int((value - low) / width))] += 1
    return {"edges": [low + width * i for i in range(bins + 1)], "counts": counts}


def _latency(workflow: Sequence[float], grader: Sequence[float]) -> dict[str, Any] | None:
    """Log-spaced bins, a quarter decade wide (half for very wide ranges), for both stages."""
    positive = [v for values in (workflow, grader) if values for v in _range(values)]
    if not positive:
        return None
    start = math.floor(math.log10(min(positive)) * 4) / 4
    stop = math.ceil(math.log10(max(positive)) * 4) / 4
    if stop - start < 1.5:  # at least a decade and a half, so the shape has room
        start = math.floor((start + stop - 1.5) / 2 * 4) / 4
        stop = start + 1.5
    step = 0.25 if stop - start <= 8 else 0.5
    bins = max(1, math.ceil(round((stop - start) / step, 6)))
    edges = [10 ** (start + step * i) for i in range(bins + 1)]

    def count(values: Sequence[float]) -> list[int]:
        counts = [0] * bins
        for v in values:
            if not math.isfinite(v):
                continue
            at = (math.log10(v) - start) / step if v > 0 else 0.0
            counts[min(bins - 1, max(0, int(at)))] += 1
        return counts

    return {"edges": edges, "workflow": count(workflow), "grader": count(grader)}


def _range(values: Sequence[float]) -> list[float]:
    """The least and the greatest positive finite values (none, one or two of them)."""
    least = min((v for v in values if v > 0 and math.isfinite(v)), default=None)
    if least is None:
        return []
    return [least, max(v for v in values if v > 0 and math.isfinite(v))]


class MetricMeans:
    """``[name, mean, count]`` of the numeric rollout metrics seen most often (the report's
    "Rollout metrics" card; ``osmosis-run view`` keeps one per run)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: Counter[str] = Counter()

    def add(self, metrics: dict[str, Any]) -> None:
        for key, value in metrics.items():
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if number and math.isfinite(value):
                self.sums[key] = self.sums.get(key, 0.0) + value
                self.counts[key] += 1

    def means(self) -> list[list[Any]]:
        counts, sums = self.counts, self.sums
        top = sorted(counts, key=lambda k: (-counts[k], k))[:METRIC_KEYS]
        return [[key[:200], sums[key] / counts[key], counts[key]] for key in sorted(top)]


# -- comparison -------------------------------------------------------------------------------


@dataclass
class _Pair:
    row: dict[str, Any]
    kind: str
    delta: float | None


_OUTCOMES = ("pass", "fail", "error", "none")


def _outcome(row: dict[str, Any] | None) -> str:
    if row is None:
        return "missing"
    if outcome.is_error(row["st"]):
        return "error"
    passed = row.get("p")
    return "none" if passed is None else ("pass" if passed else "fail")


def _scored_reward(row: dict[str, Any] | None) -> float | None:
    """The rollout's score by the outcome rule, as compare counts it: failures count 0."""
    if row is None:
        return None
    return outcome.score(row["st"], row.get("rw"))


def _flips(cmp: Comparison) -> dict[str, str]:
    """The comparison's flipped rollouts: rollout id -> "pf" (pass -> fail) or "fp"."""
    return dict.fromkeys(cmp.pass_to_fail, "pf") | dict.fromkeys(cmp.fail_to_pass, "fp")


def _pairs(
    rows_a: dict[str, _Rollout], rows_b: dict[str, _Rollout], flips: dict[str, str]
) -> list[_Pair]:
    def order(key: str) -> tuple[int, int, str]:
        row = (rows_a.get(key) or rows_b[key]).row
        return row["r"], row["s"], key

    pairs: list[_Pair] = []
    for key in sorted(rows_a.keys() | rows_b.keys(), key=order):
        sides = [side for side in (rows_a.get(key), rows_b.get(key)) if side is not None]
        a, b = (
            (rows_a[key].row if key in rows_a else None),
            (rows_b[key].row if key in rows_b else None),
        )
        kind = _kind(a, b, flips.get(key))
        wa, wb = _scored_reward(a), _scored_reward(b)
        delta = wb - wa if wa is not None and wb is not None else None
        row: dict[str, Any] = {"i": key, "k": kind, "A": a, "B": b}
        if delta is not None:
            row["d"] = delta
        if key in rows_a and key in rows_b:
            first = _first_difference(rows_a[key].transcript, rows_b[key].transcript)
            if first is not None:
                row["fd"] = first
        pairs.append(_Pair(row, kind, delta))
        # Over the transcript budget, flipped rows come first, then rows failing in either run.
        failing = any(side.failing for side in sides)
        priority = 0 if kind in ("pf", "fp") else (1 if failing else None)
        for side in sides:
            side.compare_priority = priority
    return pairs


def _first_difference(a: list[dict[str, Any]] | None, b: list[dict[str, Any]] | None) -> int | None:
    """The index of the first message that differs between two transcripts (as the page
    shows them), or None when either has none or they are the same."""
    if a is None or b is None:
        return None
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def _kind(a: dict[str, Any] | None, b: dict[str, Any] | None, flip: str | None) -> str:
    """pf/fp: flipped (the comparison's flips); pp/ff: same; oa/ob: only in A/B; na: other."""
    if a is None:
        return "ob"
    if b is None:
        return "oa"
    if flip is not None:
        return flip
    pa, pb = a.get("p"), b.get("p")
    if pa is True and pb is True:
        return "pp"
    if pa is False and pb is False:
        return "ff"
    return "na"


@dataclass(frozen=True, slots=True)
class _Glance:
    """What the comparison page's first pass needs of one rollout of one run."""

    rollout_id: str
    row_index: int
    sample_index: int
    status: str
    reward: float | None
    passed: bool | None

    @property
    def failing(self) -> bool:
        return self.passed is False

    @property
    def outcome(self) -> str:
        return _outcome({"st": self.status, "p": self.passed})

    @property
    def score(self) -> float | None:
        """The rollout's score by the outcome rule, as compare counts it: failures count 0."""
        return outcome.score(self.status, _finite(self.reward))


def _glances(run: RunData, threshold: float) -> Iterator[_Glance]:
    for line in run.lines:
        passed = outcome.passed(line.status, line.reward, threshold)
        yield _Glance(
            line.rollout_id, line.row_index, line.sample_index, line.status, line.reward, passed
        )


class _PairScan:
    """The comparison page's first pass over every pair: its counts, the outcome matrix, the
    reward deltas, and which pairs its table lists (flipped, then failing in either run, then
    the others, each in row order)."""

    def __init__(self, flips: dict[str, str]) -> None:
        self.flips = flips
        self.count = 0
        self.kinds: Counter[str] = Counter()
        self.matrix: Counter[tuple[str, str]] = Counter()
        self.both = 0
        self.deltas: array[float] = array("d")
        self.choice = _Choice(MAX_ROWS)

    def add(self, a: _Glance | None, b: _Glance | None) -> None:
        self.count += 1
        kind = _glance_kind(a, b, self.flips)
        self.kinds[kind] += 1
        self.matrix[_side_outcome(a), _side_outcome(b)] += 1
        if a is not None and b is not None:
            self.both += 1
            wa, wb = a.score, b.score
            if wa is not None and wb is not None:
                self.deltas.append(wb - wa)
        first = a if a is not None else b
        assert first is not None
        failing = any(side is not None and side.failing for side in (a, b))
        priority = 0 if kind in ("pf", "fp") else (1 if failing else 2)
        self.choice.add((priority, first.row_index, first.sample_index, first.rollout_id))

    def stats(self) -> dict[str, Any]:
        deltas = self.deltas
        return {
            "kinds": dict(self.kinds),
            "both": self.both,
            "scored": len(deltas),
            "improved": sum(d > 1e-12 for d in deltas),
            "worsened": sum(d < -1e-12 for d in deltas),
            "outcomes": list(_OUTCOMES),
            "matrix": [[self.matrix[(x, y)] for y in _OUTCOMES] for x in _OUTCOMES],
            "delta_hist": _delta_histogram(deltas),
        }


def _side_outcome(side: _Glance | None) -> str:
    return "missing" if side is None else side.outcome


def _glance_kind(a: _Glance | None, b: _Glance | None, flips: dict[str, str]) -> str:
    """``_kind`` of a pair in the first pass."""
    if a is None:
        return "ob"
    if b is None:
        return "oa"
    return _kind({"p": a.passed}, {"p": b.passed}, flips.get(a.rollout_id))


# The comparison's lists of rollouts: the page has them in its pairs, so it embeds only counts.
_LISTED = ("pass_to_fail", "fail_to_pass", "new_errors", "fixed_errors")


def _comparison(cmp: Comparison) -> dict[str, Any]:
    """The comparison as ``compare --json`` reports it, its lists as counts, and its text.

    The text is formatted here, as the ``compare`` table prints it, rather than in the page's
    script: JavaScript rounds some ties differently, and the page must show the same digits.
    """
    data = cmp.model_dump(mode="json", exclude={"run_a", "run_b", *_LISTED})
    data["counts"] = {name: len(getattr(cmp, name)) for name in _LISTED}
    data["text"] = {
        "mean": _delta_text(cmp.mean, ".3f"),
        "pass_rate": _delta_text(cmp.pass_rate, ".1%"),
    }
    return data


def _delta_text(delta: Delta, spec: str) -> dict[str, str]:
    """A, B, B - A and the interval, in ``spec``, as ``osmosis-run compare`` prints them."""

    def shown(value: float | None, sign: str = "") -> str:
        return "-" if value is None else format(value, sign + spec)

    ci = "-" if delta.ci is None else f"[{shown(delta.ci.low, '+')}, {shown(delta.ci.high, '+')}]"
    return {"a": shown(delta.a), "b": shown(delta.b), "delta": shown(delta.delta, "+"), "ci": ci}


def _delta_histogram(deltas: Sequence[float]) -> dict[str, Any] | None:
    """21 bins symmetric around 0 (one centred on it), as wide as the largest change."""
    if not deltas:
        return None
    reach = max(1.0 if all(abs(d) <= 1.0 for d in deltas) else max(abs(d) for d in deltas), 1e-9)
    bins = 21
    width = 2 * reach / (bins - 1)
    low = -reach - width / 2
    counts = [0] * bins
    for d in deltas:
        counts[min(bins - 1, max(0, int((d - low) / width)))] += 1
    return {"edges": [low + width * i for i in range(bins + 1)], "counts": counts}


# -- what the model saw (the gateway's rollouts/<id>/model_calls.jsonl) -------------------------


def _model_calls(path: str, budget: list[int]) -> dict[str, Any]:
    """A rollout's model calls in the page's short form: ``mc``, and ``mcn`` when some are left out.

    Each call: number, status, milliseconds, attempts, cached, streamed, model, the request's
    last messages (``q``, with ``qn`` the request's message count), the answer (``o``), usage,
    error. ``budget`` (characters left for the whole page) is spent as calls are taken.
    """
    calls: list[dict[str, Any]] = []
    total = 0
    try:
        with open(path, "rb") as f:
            for raw in f:
                total += 1
                if len(calls) >= MAX_MODEL_CALLS or budget[0] <= 0:
                    continue
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    call = _model_call(record)
                    budget[0] -= _size(call)
                    calls.append(call)
    except OSError:
        return {}
    found: dict[str, Any] = {"mc": calls}
    if total > len(calls):
        found["mcn"] = total
    return found


def _model_call(record: dict[str, Any]) -> dict[str, Any]:
    request = record.get("request") if isinstance(record.get("request"), dict) else {}
    assert isinstance(request, dict)
    messages = request.get("messages") if isinstance(request.get("messages"), list) else []
    assert isinstance(messages, list)
    call: dict[str, Any] = {
        "n": record.get("call"),
        "st": record.get("status"),
        "ms": _finite(record.get("ms")) if isinstance(record.get("ms"), int | float) else None,
        "a": record.get("attempt"),
        "ca": bool(record.get("cached")),
        "sm": bool(record.get("stream")),
        "md": _clip(str(record.get("model") or ""), 200),
        "qn": len(messages),
        "q": _transcript(messages[-CALL_MESSAGES:])[0],
    }
    if request.get("truncated"):
        call["qx"] = request.get("bytes")
    response = record.get("response")
    if isinstance(response, dict):
        choices = response.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
            if isinstance(message, dict):
                call["o"] = _message(message)
        elif response.get("truncated"):
            call["ox"] = response.get("bytes")
    if isinstance(record.get("usage"), dict):
        call["u"] = {k: v for k, v in record["usage"].items() if isinstance(v, int)}
    if record.get("error"):
        call["e"] = _clip(str(record["error"]), MAX_FIELD_CHARS)
    if isinstance(record.get("previous_attempts"), list):
        call["pa"] = [_attempt_text(a) for a in record["previous_attempts"] if isinstance(a, dict)]
    return call


def _attempt_text(attempt: dict[str, Any]) -> str:
    status = attempt.get("status") or "no answer"
    error = attempt.get("error") or ""
    return _clip(f"attempt {attempt.get('attempt')}: {status} {error}".strip(), 300) or ""
