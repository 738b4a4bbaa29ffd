"""``osmosis-run show``: a run and a rollout id (or row id, or --worst N) -> the rollout, rendered.

Printed to stdout (``| less`` works), plain text when stdout is not a terminal: its status,
reward, label, error and traceback, the transcript with roles, tool calls and tool results, its
metrics, and the files in its directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from osmosis_run.cli import command, exit_codes, options

if TYPE_CHECKING:
    from rich.text import Text

    from osmosis_run.reports.show import RolloutView

SHOW_HELP = (
    "Exit codes: 0 shown; 2 the directory is not a run directory, no rollout has that id, "
    "or an option is invalid."
)
_INDENT = "    "
_STATUS_STYLE = {"success": "green", "failure": "red", "timeout": "red", "invalid": "red"}
_ROLE_STYLE = {"user": "cyan", "assistant": "green", "tool": "magenta", "system": "yellow"}


def register(app: typer.Typer) -> None:
    """Add the show command to ``app``."""
    command.add(app, "show", show_command, epilog=SHOW_HELP)


def show_command(
    run_dir: Annotated[
        Path,
        typer.Argument(
            help="Run directory (the one `osmosis-run eval` printed).",
            metavar="RUN",
            show_default=False,
        ),
    ],
    rollout: Annotated[
        str | None,
        typer.Argument(
            help="A rollout id (q7.s0), or a row id (every sample of the row).",
            metavar="ROLLOUT_ID",
            show_default=False,
        ),
    ] = None,
    worst: Annotated[
        int | None,
        options.opt(
            "--worst", min=1, help="Show the N lowest-reward rollouts (failures count as 0)."
        ),
    ] = None,
    json_output: Annotated[
        bool, options.json_output("Print the rollouts as one JSON document to stdout.")
    ] = False,
) -> None:
    """Show one rollout at a glance: status, reward, error, transcript, metrics and files."""
    raise typer.Exit(run_show(run_dir, rollout, worst=worst, json_output=json_output))


def run_show(run_dir: Path, rollout: str | None, *, worst: int | None, json_output: bool) -> int:
    """Find the rollouts, render them; return the exit code."""
    from osmosis_run.cli import messages, streams
    from osmosis_run.errors import ConfigError, OsmosisRunError
    from osmosis_run.reports.report import open_run
    from osmosis_run.reports.show import find_rollouts, rollout_view, worst_rollouts

    try:
        if rollout is not None and worst is not None:
            raise ConfigError("give a ROLLOUT_ID or --worst N, not both")
        if rollout is None and worst is None:
            raise ConfigError(
                "give a ROLLOUT_ID, or --worst N for the lowest rewards "
                f"(`osmosis-run report {run_dir}` lists failures and the lowest rewards)"
            )
        run = open_run(run_dir)
        lines = find_rollouts(run, rollout) if rollout is not None else None
    except OsmosisRunError as exc:
        messages.print_error(exc)
        return exit_codes.USAGE
    if lines is None:
        lines = worst_rollouts(run, worst or 0)
        if not lines:
            streams.err.print(
                f"osmosis-run: {run_dir} has no scored rollouts (none graded or failed)",
                markup=False,
            )
            return exit_codes.OK
    views = [rollout_view(run, line) for line in lines]
    if json_output:
        document = [view.model_dump(mode="json") for view in views]
        with streams.product() as out:
            out.file.write(json.dumps(document, indent=2) + "\n")
        return exit_codes.OK
    with streams.product() as console:
        for number, view in enumerate(views):
            if number:
                console.print()
            console.print(rollout_text(view))
    return exit_codes.OK


def rollout_text(view: RolloutView) -> Text:
    """One rollout as aligned, labelled lines, then its transcript and files."""
    from rich.text import Text

    from osmosis_run.cli.tables import without_trailing_spaces

    line = view.line
    text = Text()
    row = f"row {line.row_id}" if line.row_id is not None else f"row index {line.row_index}"
    _field(text, "rollout", Text(line.rollout_id, style="bold"))
    text.append(f"  ({row}, line {line.line}, sample {line.sample_index})\n")
    status = Text(line.status, style=_STATUS_STYLE.get(line.status, "yellow"))
    status.append(f"   reward {_num(line.reward, '.3f')}   passed {_passed(line.passed)}")
    _field(text, "status", status, end="\n")
    _field(text, "label", Text("-" if line.label is None else line.label), end="\n")
    timing = f"{line.attempts}   workflow {_ms(line.workflow_ms)}   grader {_ms(line.grader_ms)}"
    _field(text, "attempts", Text(timing), end="\n")
    if line.metadata:
        _field(text, "metadata", Text(_compact(line.metadata)), end="\n")
    if line.metrics:
        metrics = "  ".join(f"{key}={_metric(value)}" for key, value in line.metrics.items())
        _field(text, "metrics", Text(metrics), end="\n")
    _error(text, view)
    _transcript(text, view.messages)
    _files(text, view)
    return without_trailing_spaces(text)


def _field(text: Text, label: str, value: Text, *, end: str = "") -> None:
    text.append(f"{label:<10}", style="bold")
    text.append_text(value)
    text.append(end)


def _error(text: Text, view: RolloutView) -> None:
    from rich.text import Text

    line = view.line
    if line.error_message is None and line.error_category is None:
        return
    stage = f" ({view.error_stage})" if view.error_stage else ""
    message = (line.error_message or "").strip()
    first, *rest = message.splitlines() or [""]
    value = Text(f"{line.error_category or line.status}{stage}: {first}", style="red")
    _field(text, "error", value, end="\n")
    for more in rest:
        text.append(f"{_INDENT}{more}\n")
    for attempt in view.previous_attempts:
        text.append(
            f"{_INDENT}attempt {attempt.get('attempt')}: "
            f"{attempt.get('error_category')}: {_first_line(attempt.get('error_message'))}\n"
        )
    if view.traceback:
        text.append("traceback\n", style="bold")
        for tb_line in view.traceback.rstrip().splitlines():
            text.append(f"{_INDENT}{tb_line}\n")


def _transcript(text: Text, messages: list[dict[str, Any]] | None) -> None:
    if messages is None:
        text.append("transcript", style="bold")
        text.append("  none recorded\n")
        return
    text.append("transcript", style="bold")
    text.append(f"  {_count(len(messages), 'message')}\n")
    for message in messages:
        _message(text, message)


def _message(text: Text, message: dict[str, Any]) -> None:
    from osmosis_run.reports.message_text import message_text

    role = str(message.get("role", "?"))
    text.append("  ")
    text.append(role, style=f"bold {_ROLE_STYLE.get(role, '')}".strip())
    if message.get("name"):
        text.append(f" {message['name']}")
    if message.get("tool_call_id"):
        text.append(f"  [{message['tool_call_id']}]")
    text.append("\n")
    for call in message.get("tool_calls") or []:
        text.append(f"{_INDENT}-> {_call(call)}\n", style="magenta")
    for content_line in message_text(message.get("content")).splitlines():
        text.append(f"{_INDENT}{content_line}\n")


def _call(call: Any) -> str:
    """A tool call as ``name(arguments)  [id]``."""
    if not isinstance(call, dict):
        return str(call)
    function = call.get("function") or {}
    name = function.get("name", "?")
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = _compact(arguments)
    ident = f"  [{call['id']}]" if call.get("id") else ""
    return f"{name}({arguments}){ident}"


def _files(text: Text, view: RolloutView) -> None:
    text.append("files", style="bold")
    text.append(f"     {view.directory}/\n")
    for entry in view.files:
        text.append(f"{_INDENT}{entry.path}  {_size(entry.size)}\n")
    if view.more_files:
        text.append(f"{_INDENT}... and {view.more_files} more\n")


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def _count(count: int, noun: str) -> str:
    from osmosis_run.results.words import plural

    return plural(count, noun)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _metric(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return _compact(value) if isinstance(value, dict | list) else str(value)


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _passed(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _first_line(message: Any) -> str:
    lines = str(message or "").strip().splitlines()
    return lines[0] if lines else ""
