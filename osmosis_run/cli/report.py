"""``osmosis-run report``: run directory -> RunReport -> rendered (or --json) -> exit code."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from osmosis_run.cli import command, exit_codes, options

if TYPE_CHECKING:
    from rich.console import Console

    from osmosis_run.reports.report import FailureCategory, LowReward, RunReport, SlowRollout

SHOWN_IDS = 5
MESSAGE_CHARS = 160


def register(app: typer.Typer) -> None:
    """Add the report command to ``app``."""
    command.add(app, "report", report_command, epilog=exit_codes.REPORT_HELP)


def report_command(
    run_dir: Annotated[
        Path,
        typer.Argument(
            help="Run directory (the one `osmosis-run eval` printed); finished, interrupted "
            "or still running.",
            show_default=False,
            metavar="RUN",
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
        options.junit("Write a JUnit XML report here (one testcase per rollout)."),
    ] = None,
    html: Annotated[Path | None, options.html("Write a self-contained HTML report here.")] = None,
    quiet: options.QuietNotices = False,
) -> None:
    """Summarise a run directory: metrics, failures by category, slowest and lowest rewards.

    The report is text on stdout (> file, | less and | grep work); --json prints it as one
    document instead. With --html or --junit, the files are the report: they are written, and
    stdout gets nothing unless --json asks. Notices (what was written) go to stderr.
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
            quiet=quiet,
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
    quiet: bool = False,
) -> int:
    """Load, render and write the report files; return the exit code."""
    from osmosis_run.cli import messages, streams
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
        with streams.product() as out:
            out.file.write(document.model_dump_json(indent=2) + "\n")
    elif junit is None and html is None:
        with streams.product() as out:
            print_report(document, out)
        if not quiet:
            print_report_notices(document)
    try:
        if quiet:
            write_report_files(run, junit=junit, html=html)
        else:
            write_report_files(run, junit=junit, html=html, on_written=print_written)
    except OsmosisRunError as exc:
        messages.print_error(exc)
        return exit_codes.USAGE
    return exit_codes.OK


def print_written(kind: str, target: str | Path) -> None:
    """Say that a report file was written (stderr)."""
    from osmosis_run.cli.streams import err

    err.print(f"osmosis-run: wrote {kind} report {target}", markup=False)


def print_report(document: RunReport, out: Console) -> None:
    """The summary table, failures, the slowest rollouts and the lowest rewards, on ``out``."""
    from osmosis_run.cli.tables import summary_table

    title = f"osmosis-run: {document.state} {document.run_dir}"
    out.print(summary_table(document.summary, title=title))
    print_failures(document.failures, out)
    print_slowest(document.slowest, out)
    print_lowest(document.lowest, out, threshold=document.summary.pass_threshold)


def print_report_notices(document: RunReport) -> None:
    """What to do next, on stderr: resume a run that did not finish, look at one rollout."""
    from osmosis_run.cli.streams import err

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
    if document.lowest:
        err.print(
            "osmosis-run: one rollout in full: "
            f"osmosis-run show {document.run_dir} {document.lowest[0].rollout_id}",
            markup=False,
        )


def print_failures(categories: list[FailureCategory], out: Console) -> None:
    """Failed rollouts by category, identical messages grouped, with counts and rollout ids."""
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
        out.print(line.rstrip(), markup=False, emoji=False)


def print_slowest(slowest: list[SlowRollout], out: Console) -> None:
    """The slowest rollouts as a table."""
    from osmosis_run.cli.tables import aligned

    if not slowest:
        return
    header = ("rollout", "status", "total ms", "workflow ms", "grader ms", "reward")
    rows = [
        (
            slow.rollout_id,
            slow.status,
            f"{slow.total_ms:.1f}",
            _num(slow.workflow_ms, ".1f"),
            _num(slow.grader_ms, ".1f"),
            _num(slow.reward, ".3f"),
        )
        for slow in slowest
    ]
    out.print()
    out.print(aligned("slowest rollouts", header, rows, right=range(2, len(header))))


def print_lowest(lowest: list[LowReward], out: Console, *, threshold: float) -> None:
    """The graded rollouts below the threshold, lowest first."""
    from osmosis_run.cli.tables import aligned

    if not lowest:
        return
    rows = [
        (
            low.rollout_id,
            f"{low.reward:.3f}",
            _one_line(low.label) if low.label is not None else "-",
            low.answer if low.answer is not None else "-",
        )
        for low in lowest
    ]
    title = f"lowest rewards (below the pass threshold {threshold:g})"
    out.print()
    out.print(aligned(title, ("rollout", "reward", "label", "answer"), rows, right=(1,)))


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _one_line(message: str) -> str:
    lines = message.strip().splitlines()
    text = lines[0] if lines else "(no message)"
    if len(lines) > 1:
        text += " ..."
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."
