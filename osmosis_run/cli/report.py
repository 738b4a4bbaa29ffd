"""``osmosis-run report``: run directory -> RunReport -> rendered (or --json) -> exit code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from osmosis_run.cli import exit_codes, options

if TYPE_CHECKING:
    from osmosis_run.reports.report import FailureCategory, LowReward, RunReport, SlowRollout

SHOWN_IDS = 5
MESSAGE_CHARS = 160


def register(app: typer.Typer) -> None:
    """Add the report command to ``app``."""
    app.command("report", epilog=exit_codes.REPORT_HELP)(report_command)


def report_command(
    run_dir: Annotated[
        Path,
        typer.Argument(
            help="Run directory (the one `osmosis-run eval` printed); finished, interrupted "
            "or still running.",
            show_default=False,
        ),
    ],
    json_output: Annotated[
        bool,
        options.json_output(
            "Print one JSON document to stdout (summary, failures, slowest, lowest rewards)."
        ),
    ] = False,
    pass_threshold: Annotated[
        float | None, options.pass_threshold("default: the run's own")
    ] = None,
    group_by: Annotated[str | None, options.group_by("default: the run's own")] = None,
    top: Annotated[
        int,
        typer.Option("--top", min=0, help="How many of the slowest rollouts to show."),
    ] = 10,
    lowest: Annotated[
        int,
        typer.Option(
            "--lowest",
            min=0,
            help="How many of the lowest-reward rollouts below the pass threshold to show.",
        ),
    ] = 10,
    junit: Annotated[
        Path | None,
        options.junit("Also write a JUnit XML report here: one testcase per rollout."),
    ] = None,
    html: Annotated[
        Path | None, options.html("Also write a self-contained HTML report here.")
    ] = None,
) -> None:
    """Summarise a run directory: metrics, failures by category, slowest and lowest rewards.

    Reports go to stderr; --json prints a document to stdout instead.
    """
    raise typer.Exit(
        run_report(
            run_dir,
            json_output=json_output,
            pass_threshold=pass_threshold,
            group_by=group_by,
            top=top,
            lowest=lowest,
            junit=junit,
            html=html,
        )
    )


def run_report(
    run_dir: Path,
    *,
    json_output: bool,
    pass_threshold: float | None,
    group_by: str | None,
    top: int,
    junit: Path | None,
    html: Path | None,
    lowest: int = 10,
) -> int:
    """Load, render and write the report files; return the exit code."""
    from osmosis_run.cli import messages
    from osmosis_run.errors import OsmosisRunError
    from osmosis_run.reports.finish import write_report_files
    from osmosis_run.reports.report import read_report

    try:
        run, document = read_report(
            run_dir, pass_threshold=pass_threshold, group_by=group_by, slowest=top, lowest=lowest
        )
    except OsmosisRunError as exc:
        messages.print_error(exc)
        return exit_codes.USAGE
    if json_output:
        sys.stdout.write(document.model_dump_json(indent=2) + "\n")
    else:
        print_report(document)
    try:
        write_report_files(run, junit=junit, html=html, on_written=print_written)
    except OsmosisRunError as exc:
        messages.print_error(exc)
        return exit_codes.USAGE
    return exit_codes.OK


def print_written(kind: str, target: object) -> None:
    """Say that a report file was written (stderr)."""
    from osmosis_run.cli.streams import err

    err.print(f"osmosis-run: wrote {kind} report {target}", markup=False)


def print_report(document: RunReport) -> None:
    """The summary table, the state of the run, failures and the slowest rollouts (stderr)."""
    from osmosis_run.cli.streams import err
    from osmosis_run.cli.tables import summary_table

    title = f"osmosis-run: {document.state} {document.run_dir}"
    err.print(summary_table(document.summary, title=title))
    if document.state == "interrupted":
        err.print(
            "osmosis-run: the run was interrupted; re-run its eval command to resume it",
            markup=False,
        )
    elif document.state == "incomplete":
        err.print(
            "osmosis-run: no summary.json yet: the run is still going, or was killed "
            "(re-run its eval command to resume it)",
            markup=False,
        )
    print_failures(document.failures)
    print_slowest(document.slowest)
    print_lowest(
        document.lowest, run_dir=document.run_dir, threshold=document.summary.pass_threshold
    )


def print_failures(categories: list[FailureCategory]) -> None:
    """Failed rollouts by category, identical messages grouped, with counts and rollout ids."""
    from osmosis_run.cli.streams import err

    if not categories:
        return
    from osmosis_run.results.words import plural

    total = sum(category.count for category in categories)
    lines = ["", f"failures: {plural(total, 'rollout')}"]
    for category in categories:
        lines.append(f"  {category.category}: {category.count}")
        for group in category.groups:
            lines.append(f"    {group.count}x {_one_line(group.message)}")
            shown = group.rollout_ids[:SHOWN_IDS]
            more = f" (+{group.count - len(shown)} more)" if group.count > len(shown) else ""
            lines.append(f"       {', '.join(shown)}{more}")
        if category.more_messages:
            lines.append(f"    ... and {category.more_messages} other messages")
    for line in lines:
        err.print(line, markup=False)


def print_slowest(slowest: list[SlowRollout]) -> None:
    """The slowest rollouts as a table."""
    from rich.table import Table
    from rich.text import Text

    from osmosis_run.cli.streams import err

    if not slowest:
        return
    err.print()
    table = Table(title="slowest rollouts", title_justify="left", box=None, pad_edge=False)
    for name in ("rollout", "status", "total ms", "workflow ms", "grader ms", "reward"):
        table.add_column(name, justify="left" if name in ("rollout", "status") else "right")
    for slow in slowest:
        table.add_row(
            Text(slow.rollout_id),
            slow.status,
            f"{slow.total_ms:.1f}",
            _num(slow.workflow_ms, ".1f"),
            _num(slow.grader_ms, ".1f"),
            _num(slow.reward, ".3f"),
        )
    err.print(table)


def print_lowest(lowest: list[LowReward], *, run_dir: Path, threshold: float) -> None:
    """The graded rollouts below the threshold, lowest first, and how to look at one."""
    from rich.table import Table
    from rich.text import Text

    from osmosis_run.cli.streams import err

    if not lowest:
        return
    err.print()
    title = f"lowest rewards (below the pass threshold {threshold:g})"
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for name in ("rollout", "reward", "label", "answer"):
        table.add_column(name, justify="right" if name == "reward" else "left")
    for low in lowest:
        table.add_row(
            Text(low.rollout_id),
            f"{low.reward:.3f}",
            Text(_one_line(low.label) if low.label is not None else "-"),
            Text(low.answer if low.answer is not None else "-"),
        )
    err.print(table)
    err.print(
        f"osmosis-run: one rollout in full: osmosis-run show {run_dir} {lowest[0].rollout_id}",
        markup=False,
    )


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _one_line(message: str) -> str:
    lines = message.strip().splitlines()
    text = lines[0] if lines else "(no message)"
    if len(lines) > 1:
        text += " ..."
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."
