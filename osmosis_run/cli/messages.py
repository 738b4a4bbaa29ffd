"""The one-line messages every command prints on stderr: errors, resume hints, gate verdicts."""

from __future__ import annotations

import shlex
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from osmosis_run.cli.streams import err, stderr

if TYPE_CHECKING:
    from osmosis_run.results.gates import Verdict
    from osmosis_run.results.records import BudgetStop


def print_error(exc: BaseException) -> None:
    """Print a user-facing error in one line; a user's import error keeps its traceback."""
    from osmosis_run.errors import UserModuleImportError

    if isinstance(exc, UserModuleImportError) and exc.__cause__ is not None:
        cause = exc.__cause__
        stderr.write("".join(traceback.format_exception(cause)))
    err.print(f"error: {exc}", markup=False)


def print_resume_hint(run_dir: Path, *, failed: bool = False) -> None:
    """How to continue a run that was interrupted or (``failed``) stopped by the machine."""
    command = shlex.join(["osmosis-run", *sys.argv[1:]])
    why = "fix it and resume" if failed else "interrupted; resume"
    err.print(f"osmosis-run: {why} with: {command}", markup=False)
    err.print(f"osmosis-run: finished rollouts are kept in {run_dir}", markup=False)


def print_budget_reached(stop: BudgetStop, run_dir: Path) -> None:
    """How a run a budget stopped ended, and how to go on (the same command)."""
    err.print(f"osmosis-run: {stop.message or stop.reached}", markup=False)
    command = shlex.join(["osmosis-run", *sys.argv[1:]])
    err.print(f"osmosis-run: resume with: {command}", markup=False)
    err.print(f"osmosis-run: finished rollouts are kept in {run_dir}", markup=False)


def print_verdicts(verdicts: Sequence[Verdict]) -> None:
    """One line per gate."""
    for verdict in verdicts:
        mark = "ok" if verdict.held else "FAILED"
        err.print(f"{mark}: {verdict.message}", markup=False)


def print_unredacted_key(min_length: int) -> None:
    """Say, once, that a short API key is not redacted (it cannot be told from plain text)."""
    err.print(
        f"osmosis-run: the API key is shorter than {min_length} characters; it is used, "
        "but not redacted from outputs",
        markup=False,
    )
