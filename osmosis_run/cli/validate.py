"""``osmosis-run validate``: options -> EvalSettings -> validate() -> problems -> exit code.

``eval --dry-run`` calls ``run_validate`` with its own settings, so both check the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from osmosis_run.cli import command, exit_codes, options

if TYPE_CHECKING:
    from osmosis_run.run.settings import EvalSettings
    from osmosis_run.run.validate import ValidationReport

SHOWN_PROBLEMS = 50


def register(app: typer.Typer) -> None:
    """Add the validate command to ``app``."""
    command.add(app, "validate", validate_command, epilog=_EPILOG)


_EPILOG = (
    "Exit codes: 0 every row is valid and everything loads; 2 a problem was found "
    "(each is listed with its file:line), or a usage, configuration, import or dataset-file "
    "error. Nothing is run and nothing is written."
)


def validate_command(
    dataset: options.Dataset = None,
    config: options.Config = None,
    dataset_file: options.DatasetFile = None,
    secrets_file: options.SecretsFile = None,
    workflow: options.Workflow = None,
    grader: options.GraderClass = None,
    workflow_config: options.WorkflowConfig = None,
    grader_config: options.GraderConfig = None,
    samples: options.Samples = None,
    limit: options.Limit = None,
    offset: options.Offset = None,
    rows: options.Rows = None,
    ids: options.Ids = None,
    shard: options.Shard = None,
) -> None:
    """Check a dataset, workflow, grader and configs without running anything.

    Loads the classes and configs as eval would and says what it loaded, reads every row, and
    lists each problem with its file:line, then a count line, all on stdout. Every row is read,
    whatever the selection; the selection options only change how many rollouts the count line
    announces.
    """
    values = {
        key: value for key, value in locals().items() if key != "config" and value is not None
    }
    raise typer.Exit(_validate_main(values, config))


def _validate_main(values: dict[str, Any], config: Path | None) -> int:
    from osmosis_run.cli import messages
    from osmosis_run.errors import OsmosisRunError

    try:
        settings = options.resolve(values, config)
    except OsmosisRunError as exc:
        messages.print_error(exc)
        return exit_codes.USAGE
    return run_validate(settings, config=config)


def run_validate(settings: EvalSettings, *, config: Path | None = None) -> int:
    """Validate ``settings``, print what was found, and return the exit code.

    Both ``validate`` and ``eval --dry-run`` end here: 0 when clean, 2 on any problem or any
    loading error (printed in one line, on stderr). What loaded, the problems and the count
    line are the findings: stdout. ``config`` is the config file the settings were read from.
    """
    from osmosis_run.cli import messages, streams
    from osmosis_run.errors import OsmosisRunError
    from osmosis_run.run.validate import validate

    try:
        report = validate(settings)
    except OsmosisRunError as exc:
        messages.print_error(exc)
        return exit_codes.USAGE
    with streams.product() as out:
        for line in [*loaded_lines(report, config=config), *report_lines(report)]:
            out.print(line, markup=False, emoji=False)
    return exit_codes.OK if report.ok else exit_codes.USAGE


def loaded_lines(report: ValidationReport, *, config: Path | None = None) -> list[str]:
    """What was read and loaded, a line each: config file, workflow, grader and their configs."""
    rows: list[tuple[str, str]] = []
    if config is not None:
        rows.append(("config file", f"{config} (read)"))
    if report.server is not None:
        rows.append(("server", f"{report.server} (runs its own workflow and grader)"))
    else:
        rows.append(("workflow", f"{report.workflow} (loaded)"))
        rows += _config(report.workflow_config, report.workflow_config_overrides, "workflow")
        grader = f"{report.grader} (loaded)" if report.grader else "none: rollouts are not graded"
        rows.append(("grader", grader))
        rows += _config(report.grader_config, report.grader_config_overrides, "grader")
    width = max(len(label) for label, _ in rows) + 2
    return [label.ljust(width) + value for label, value in rows]


def _config(ref: str | None, overrides: list[str], role: str) -> list[tuple[str, str]]:
    """The config line of the workflow or grader, if it has a config."""
    if ref is None:
        return []
    fields = f", {', '.join(overrides)} from [{role}_config]" if overrides else ""
    return [(f"{role} config", f"{ref}{fields} (loaded)")]


def report_lines(report: ValidationReport, *, shown: int = SHOWN_PROBLEMS) -> list[str]:
    """The problems (at most ``shown``, then how many more), and the count line."""
    lines = report.problems[:shown]
    if report.problem_count > len(lines):
        lines.append(f"... and {report.problem_count - len(lines)} more")
    count = f"{report.dataset}: {_plural(report.rows, 'row')}, {report.invalid} invalid"
    if report.selected != report.rows or report.samples != 1:
        count += (
            f"; selected {_plural(report.selected, 'row')} x "
            f"{_plural(report.samples, 'sample')} = {_plural(report.rollouts, 'rollout')}"
        )
    return [*lines, count]


def _plural(n: int, noun: str) -> str:
    from osmosis_run.results.words import plural

    return plural(n, noun)
