"""``osmosis-run validate``: options -> EvalSettings -> validate() -> problems -> exit code.

``eval --dry-run`` calls ``run_validate`` with its own settings, so both check the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from osmosis_run.cli import exit_codes

if TYPE_CHECKING:
    from osmosis_run.settings import EvalSettings
    from osmosis_run.validate import ValidationReport

SHOWN_PROBLEMS = 50

_SELECT = "Selection"


def _opt(*names: str, help: str, panel: str | None = None) -> Any:  # noqa: A002
    return typer.Option(*names, help=help, rich_help_panel=panel, show_default=False)


def register(app: typer.Typer) -> None:
    """Add the validate command to ``app``."""
    app.command("validate", epilog=_EPILOG)(validate_command)


_EPILOG = (
    "Exit codes: 0 every row is valid and everything loads; 2 a problem was found "
    "(each is listed with its file:line), or a usage, configuration, import or dataset-file "
    "error. Nothing is run and nothing is written."
)


def validate_command(
    dataset: Annotated[
        str | None,
        typer.Argument(
            help="JSONL dataset file, or - to read rows from stdin.", show_default=False
        ),
    ] = None,
    config: Annotated[
        Path | None,
        _opt("--config", help="TOML config file, as for eval (see configs/)."),
    ] = None,
    workflow: Annotated[
        str | None, _opt("--workflow", "-w", help="AgentWorkflow class as module:Class.")
    ] = None,
    grader: Annotated[
        str | None, _opt("--grader", "-g", help="Grader class as module:Class.")
    ] = None,
    workflow_config: Annotated[
        str | None,
        _opt("--workflow-config", help="AgentWorkflowConfig instance as module:attr."),
    ] = None,
    grader_config: Annotated[
        str | None, _opt("--grader-config", help="GraderConfig instance as module:attr.")
    ] = None,
    samples: Annotated[
        int | None, _opt("--samples", "-n", help="Rollouts per row (default 1).", panel=_SELECT)
    ] = None,
    limit: Annotated[
        int | None, _opt("--limit", help="Take at most N rows.", panel=_SELECT)
    ] = None,
    offset: Annotated[
        int | None, _opt("--offset", help="Skip the first K rows.", panel=_SELECT)
    ] = None,
    rows: Annotated[
        str | None,
        _opt("--rows", help='Row indices and ranges, 0-based: "3,7,10-20".', panel=_SELECT),
    ] = None,
    ids: Annotated[
        str | None,
        _opt("--ids", help="Only rows with these ids: a,b,c (each must exist).", panel=_SELECT),
    ] = None,
    shard: Annotated[
        str | None,
        _opt("--shard", help="Take shard I of N (I/N), stable by row key.", panel=_SELECT),
    ] = None,
) -> None:
    """Check a dataset, workflow, grader and configs without running anything.

    Loads the classes and configs as eval would, reads every row, and lists each problem with
    its file:line, then a count line. Every row is read, whatever the selection; the selection
    options only change how many rollouts the count line announces.
    """
    values = {
        key: value for key, value in locals().items() if key != "config" and value is not None
    }
    raise typer.Exit(_validate_main(values, config))


def _validate_main(values: dict[str, Any], config: Path | None) -> int:
    from osmosis_run.cli import render
    from osmosis_run.errors import OsmosisRunError
    from osmosis_run.runner import add_import_path
    from osmosis_run.settings import resolve_settings

    add_import_path(Path.cwd())
    try:
        if config is not None:
            add_import_path(config.parent)
        settings = resolve_settings(values, config_file=config)
    except OsmosisRunError as exc:
        render.print_error(exc)
        return exit_codes.USAGE
    return run_validate(settings)


def run_validate(settings: EvalSettings) -> int:
    """Validate ``settings``, print what was found, and return the exit code.

    Both ``validate`` and ``eval --dry-run`` end here: 0 when clean, 2 on any problem or any
    loading error (printed in one line).
    """
    from osmosis_run.cli import render
    from osmosis_run.errors import OsmosisRunError
    from osmosis_run.validate import validate

    try:
        report = validate(settings)
    except OsmosisRunError as exc:
        render.print_error(exc)
        return exit_codes.USAGE
    for line in report_lines(report):
        render.err.print(line, markup=False, emoji=False)
    return exit_codes.OK if report.ok else exit_codes.USAGE


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
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
