"""``osmosis-run grade``: a run's recorded samples -> a re-grade Plan -> Scheduler -> exit code.

Only the grader runs: the engine replays the source run's rollouts through the re-grade
executor (``backends/regrade.py``) into a new run directory, which resumes, gates and reports
exactly as an eval's does. The source run is only read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO

import typer

from osmosis_run.cli import command, exit_codes, options

if TYPE_CHECKING:
    from osmosis_run.backends.regrade import RegradeExecutor
    from osmosis_run.run.plan import Plan


# What the options a grade inherits from the source run's run.toml say they default to.
_INHERITED = "default: the run's own"


def register(app: typer.Typer) -> None:
    """Add the grade command to ``app``."""
    command.add(app, "grade", grade_command, epilog=exit_codes.EXIT_CODES_HELP)


def grade_command(
    run_dir: Annotated[
        Path,
        typer.Argument(
            help="The run directory whose recorded samples are graded again (never changed).",
            metavar="RUN",
            show_default=False,
        ),
    ],
    grader: options.GraderClass = None,
    grader_config: options.GraderConfig = None,
    out: Annotated[
        str | None,
        options.opt(
            "--out",
            "-o",
            help="The new run directory (default: beside RUN, <RUN>-grade-<fingerprint>).",
        ),
    ] = None,
    grader_timeout: options.GraderTimeout = None,
    concurrency: options.Concurrency = None,
    fresh: options.Fresh = None,
    retry_failed: Annotated[
        bool | None,
        options.opt(
            "--retry-failed",
            help="Grade failed and timed-out rollouts again (workflow failures stay as they were).",
        ),
    ] = None,
    jsonl: options.Jsonl = None,
    group_by: Annotated[str | None, options.group_by(_INHERITED)] = None,
    pass_threshold: Annotated[
        float | None, options.pass_threshold(_INHERITED, panel=options.GATES)
    ] = None,
    fail_under: Annotated[
        list[str] | None, options.fail_under(_INHERITED, panel=options.GATES)
    ] = None,
    max_error_rate: Annotated[
        str | None, options.max_error_rate(_INHERITED, panel=options.GATES)
    ] = None,
    time_limit: options.TimeLimit = None,
    html: options.RunHtml = None,
    junit: options.RunJunit = None,
    baseline: options.Baseline = None,
    fail_on_regression: options.FailOnRegression = None,
    verbose: options.Verbose = 0,
    quiet: options.Quiet = False,
) -> None:
    """Grade a run's recorded samples again with another grader; the workflow never runs.

    Writes a new run directory (the source is left as it is) with the new rewards; workflow
    failures stay failures. The source run's pass threshold and gates (--fail-under,
    --max-error-rate) hold unless given here. Re-running the same command resumes it. Then
    `osmosis-run compare RUN NEW` shows what the grader change did.
    """
    values = {
        key: value for key, value in locals().items() if key not in ("run_dir", "verbose", "quiet")
    }
    from osmosis_run.cli import logs

    with logs.to_stderr(verbose):
        code = run_grade(run_dir, values, quiet=quiet)
    raise typer.Exit(code)


def run_grade(source: Path, values: dict[str, Any], *, quiet: bool = False) -> int:
    """Prepare the re-grade, run it, render; return the exit code (``quiet``: no progress)."""
    from osmosis_run.backends.regrade import RegradeExecutor
    from osmosis_run.cli.messages import print_error
    from osmosis_run.cli.streams import err, results_channel
    from osmosis_run.errors import OsmosisRunError
    from osmosis_run.reports.finish import check_targets
    from osmosis_run.run.components import add_import_path
    from osmosis_run.run.regrade import prepare_grade

    try:
        add_import_path(Path.cwd())
        plan = prepare_grade(source, {k: v for k, v in values.items() if v is not None})
        check_targets(plan.settings.after)
    except OsmosisRunError as exc:
        print_error(exc)
        return exit_codes.USAGE
    if not quiet:
        err.print(
            f"osmosis-run: grading the samples recorded in {source} with "
            f"{plan.settings.run.grader} (the workflow does not run)",
            markup=False,
        )
    with results_channel(jsonl=plan.settings.output.jsonl) as results:
        code = _run(plan, RegradeExecutor.from_plan(plan), results, quiet=quiet)
    if code in (exit_codes.OK, exit_codes.GATE_FAILED, exit_codes.ERROR_BUDGET):
        err.print(
            f"osmosis-run: see what changed: osmosis-run compare {source} {plan.run_dir}",
            markup=False,
        )
    return code


def _run(
    plan: Plan, executor: RegradeExecutor, results: BinaryIO | None, *, quiet: bool = False
) -> int:
    """Open the run and drive it as eval does (signals, failures, gates and reports)."""
    from osmosis_run.cli.messages import print_error
    from osmosis_run.cli.progress import make_reporter
    from osmosis_run.cli.running import run_opened
    from osmosis_run.errors import OsmosisRunError
    from osmosis_run.run.scheduler import Scheduler

    settings = plan.settings
    try:
        reporter = make_reporter(jsonl=settings.output.jsonl, out=results, quiet=quiet)
        runner = Scheduler.open(plan, executor, reporter=reporter)
        reporter.on_stdout_closed = runner.stop
    except OsmosisRunError as exc:
        print_error(exc)
        return exit_codes.USAGE
    return run_opened(settings, runner, reporter)
