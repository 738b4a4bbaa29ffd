"""A run summary in Markdown, for the GitHub Actions job summary (``$GITHUB_STEP_SUMMARY``)."""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from osmosis_run.errors import ConfigError
from osmosis_run.results import outcome
from osmosis_run.results.gates import Verdict
from osmosis_run.results.records import Distribution, Summary, count_rows, model_rows
from osmosis_run.results.words import plural

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
    parts += [f"| {_cell(label)} | {_cell(value)} |" for label, value in _rows(summary)]
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


def _rows(s: Summary) -> list[tuple[str, str]]:
    rows = count_rows(s)
    rows.append(
        (
            "mean reward (failed rollouts count as 0)",
            f"{_num(s.reward_all.mean)} (n={s.reward_all.count})",
        )
    )
    rows.append(
        ("mean reward (graded)", f"{_num(s.reward_graded.mean)} (n={s.reward_graded.count})")
    )
    rate = "-" if s.pass_rate is None else f"{s.pass_rate:.1%}"
    rows.append(
        ("pass rate", f"{rate} ({s.passed}/{s.reward_all.count} at reward >= {s.pass_threshold:g})")
    )
    if s.pass_at_k:
        rows.append(("pass@k", ", ".join(f"k={p.k}: {p.value:.3f}" for p in s.pass_at_k)))
        rows.append(("pass^k", ", ".join(f"k={p.k}: {p.value:.3f}" for p in s.pass_hat_k)))
    for name, latency in (("workflow ms", s.workflow_ms), ("grader ms", s.grader_ms)):
        if latency.count:
            rows.append((f"{name} p50 / p90 / p99", _latency(latency)))
    if s.wall_s is not None:
        rows.append(("wall time", f"{s.wall_s:.2f}s"))
    if s.model is not None:
        rows.extend(model_rows(s.model))
    for key, group in s.groups.items():
        rows.append(
            (
                f"{s.group_by}={key}",
                f"{plural(group.rollouts, 'rollout')}, mean {_num(group.mean_reward)}, "
                f"pass {'-' if group.pass_rate is None else f'{group.pass_rate:.1%}'}, "
                f"errors {group.errors}",
            )
        )
    return rows


def _latency(d: Distribution) -> str:
    return " / ".join("-" if v is None else f"{v:.1f}" for v in (d.p50, d.p90, d.p99))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 3] + "..."


def _text(text: str) -> str:
    """User text made inert: no HTML, no table breaks, one line."""
    return html.escape(" ".join(text.split()), quote=False)


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")


def _code(text: str) -> str:
    return text.replace("`", "'")
