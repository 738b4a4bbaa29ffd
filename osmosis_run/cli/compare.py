"""``osmosis-run compare``: two run directories -> Comparison -> rendered or --json -> exit code."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from osmosis_run.cli import command, exit_codes, options

if TYPE_CHECKING:
    from osmosis_run.results.compare import Comparison
    from osmosis_run.results.gates import Verdict


def register(app: typer.Typer) -> None:
    """Add the compare command to ``app``."""
    command.add(app, "compare", compare_command, epilog=exit_codes.COMPARE_HELP)


def compare_command(
    run_a: Annotated[
        Path, typer.Argument(help="The baseline run directory (A).", show_default=False)
    ],
    run_b: Annotated[
        Path, typer.Argument(help="The candidate run directory (B).", show_default=False)
    ],
    metric: Annotated[
        Literal["mean", "pass_rate"],
        typer.Option(
            "--metric",
            help="What --fail-on-regression judges: mean reward (failures count 0) or pass rate.",
        ),
    ] = "mean",
    fail_on_regression: Annotated[
        float | None,
        options.fail_on_regression(
            "Exit 1 when B is worse than A by more than this (e.g. 0.02) and the 95% "
            "confidence interval of the difference excludes zero.",
            min=0.0,
        ),
    ] = None,
    pass_threshold: Annotated[float | None, options.pass_threshold("default: run A's")] = None,
    resamples: Annotated[
        int, typer.Option("--resamples", min=1, help="Bootstrap resamples for the interval.")
    ] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap.")] = 0,
    json_output: Annotated[
        bool, options.json_output("Print the comparison as one JSON document to stdout.")
    ] = False,
    html: Annotated[
        Path | None, options.html("Write a self-contained HTML diff report here.")
    ] = None,
    quiet: options.QuietNotices = False,
) -> None:
    """Compare run B with run A rollout by rollout: paired deltas, flips, new and fixed errors.

    Deltas (B - A) come with a 95% confidence interval from a seeded bootstrap over rows. The
    comparison is text on stdout (--json: one document); with --html the file is the report and
    stdout gets nothing unless --json asks. Gate verdicts and notices go to stderr.
    """
    raise typer.Exit(
        run_compare(
            run_a,
            run_b,
            metric=metric,
            fail_on_regression=fail_on_regression,
            pass_threshold=pass_threshold,
            resamples=resamples,
            seed=seed,
            json_output=json_output,
            html=html,
            quiet=quiet,
        )
    )


def run_compare(
    run_a: Path,
    run_b: Path,
    *,
    metric: Literal["mean", "pass_rate"],
    fail_on_regression: float | None,
    pass_threshold: float | None,
    resamples: int,
    seed: int,
    json_output: bool,
    html: Path | None,
    quiet: bool = False,
) -> int:
    """Load both runs, compare, render, write the HTML report; return the exit code."""
    from osmosis_run.cli import messages
    from osmosis_run.cli.report import print_written
    from osmosis_run.errors import OsmosisRunError
    from osmosis_run.reports.report import open_run
    from osmosis_run.results.compare import compare_runs, regression_verdict

    try:
        a = open_run(run_a, pass_threshold=pass_threshold)
        b = open_run(run_b, pass_threshold=pass_threshold)
    except OsmosisRunError as exc:
        messages.print_error(exc)
        return exit_codes.USAGE
    cmp = compare_runs(
        a, b, metric=metric, resamples=resamples, seed=seed, pass_threshold=pass_threshold
    )
    verdict = None if fail_on_regression is None else regression_verdict(cmp, fail_on_regression)
    _show(cmp, verdict, json_output=json_output, text=html is None)
    if verdict is not None:
        messages.print_verdicts([verdict])
    if html is not None:
        from osmosis_run.reports.html_report import save_compare_html

        try:
            save_compare_html(a, b, html, comparison=cmp)
        except OsmosisRunError as exc:
            messages.print_error(exc)
            return exit_codes.USAGE
        if not quiet:
            print_written("HTML", html)
    if verdict is not None and not verdict.held:
        return exit_codes.GATE_FAILED
    return exit_codes.OK


def _show(cmp: Comparison, verdict: Verdict | None, *, json_output: bool, text: bool) -> None:
    """The comparison on stdout: its JSON document, or (``text``) its tables and lists."""
    from osmosis_run.cli import streams, tables
    from osmosis_run.results.compare import comparison_json

    if json_output:
        with streams.product() as out:
            out.file.write(comparison_json(cmp, verdict) + "\n")
    elif text:
        with streams.product() as out:
            tables.print_comparison(cmp, out)
