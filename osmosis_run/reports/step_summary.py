"""A run summary in Markdown, for the GitHub Actions job summary (``$GITHUB_STEP_SUMMARY``).

Its table has the rows of the terminal's summary (``reports/summary_rows.py``), word for word.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from osmosis_run.errors import ConfigError
from osmosis_run.reports.summary_rows import summary_rows
from osmosis_run.results import outcome
from osmosis_run.results.gates import Verdict
from osmosis_run.results.records import Summary

__all__ = ["STEP_SUMMARY_ENV", "append_step_summary", "markdown_summary"]

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
FIRST_ERRORS = 5
_MESSAGE_CHARS = 200


def markdown_summary(
    summary: Summary, verdicts: Sequence[Verdict], *, run_dir: Path, title: str
) -> str:
    """The summary, the gate verdicts and the first errors of a run, as Markdown.

    Args:
        summary: the run's summary.
        verdicts: the gates and error budget checked (may be empty).
        run_dir: the run directory, shown so the reader can find the files.
        title: the heading.
    """
    parts = [f"### {_text(title)}", "", _status_line(summary, verdicts, run_dir), ""]
    parts += ["| metric | value |", "| --- | --- |"]
    parts += [f"| {_cell(label)} | {_cell(value)} |" for label, value in summary_rows(summary)]
    if verdicts:
        parts += ["", *(_verdict_line(verdict) for verdict in verdicts)]
    if summary.first_errors:
        parts += ["", "<details><summary>First errors</summary>", ""]
        for example in summary.first_errors[:FIRST_ERRORS]:
            category = example.error_category or example.status
            message = _first_line(example.error_message or "")
            parts.append(f"- `{_code(example.rollout_id)}` {_text(category)}: {_text(message)}")
        parts += ["", "</details>"]
    return "\n".join(parts) + "\n"


def append_step_summary(text: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Append ``text`` to the file named by ``$GITHUB_STEP_SUMMARY``.

    Returns:
        True when it was written; False when the variable is not set (not on GitHub Actions).

    Raises:
        ConfigError: the variable names a file that cannot be written.
    """
    target = environ.get(STEP_SUMMARY_ENV)
    if not target:
        return False
    try:
        with open(target, "a", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
    except OSError as exc:
        raise ConfigError(
            f"{STEP_SUMMARY_ENV}={target}: cannot append the step summary: {exc.strerror or exc}"
        ) from None
    return True


def _status_line(summary: Summary, verdicts: Sequence[Verdict], run_dir: Path) -> str:
    if summary.interrupted:
        state = "interrupted"
    elif outcome.is_complete(summary.rollouts, summary.planned, summary.interrupted):
        state = "finished"
    else:
        state = "incomplete"
    line = f"Run `{_code(str(run_dir))}`: {state}"
    if verdicts:
        held = all(verdict.held for verdict in verdicts)
        line += f"; gates **{'passed' if held else 'failed'}**"
    return line + "."


def _verdict_line(verdict: Verdict) -> str:
    mark = ":white_check_mark:" if verdict.held else ":x:"
    return f"- {mark} {_text(verdict.message)}"


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 3] + "..."


def _text(text: str) -> str:
    """User text made inert: no HTML, no table breaks, one line."""
    return html.escape(" ".join(text.split()), quote=False)


def _cell(text: str) -> str:
    """A table cell: inert, one line, and the two-space gaps between a row's parts kept."""
    parts = (_text(part) for part in text.split("  ") if part.strip())
    return " &nbsp;".join(parts).replace("|", "\\|")


def _code(text: str) -> str:
    return text.replace("`", "'")
