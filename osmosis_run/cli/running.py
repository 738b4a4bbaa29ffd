"""An opened run driven to its exit code, as eval and grade both do it.

Signals stop it cleanly (``cli/process.py``); an infrastructure error is one line and exit 4;
a finished run gets its summary, its gates and reports, and the exit code of its ending.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from osmosis_run.cli import exit_codes, messages, tables
from osmosis_run.cli.process import Interrupts, run_loop
from osmosis_run.cli.streams import err

if TYPE_CHECKING:
    from osmosis_run.errors import InfrastructureError, OsmosisRunError
    from osmosis_run.run.scheduler import RunOutcome, Scheduler
    from osmosis_run.run.settings import EvalSettings

# How a finished run ends (osmosis_run.reports.finish.Ending) -> its exit code.
_EXIT_OF_ENDING = {
    "ok": exit_codes.OK,
    "gate_failed": exit_codes.GATE_FAILED,
    "error_budget": exit_codes.ERROR_BUDGET,
}


def run_opened(settings: EvalSettings, runner: Scheduler, reporter: Any) -> int:
    """Run an opened scheduler to its end; render its ending; return the exit code."""
    from osmosis_run.errors import InfrastructureError, OsmosisRunError

    failure: InfrastructureError | None = None
    unready: OsmosisRunError | None = None
    note = (
        "osmosis-run: interrupted after the rollouts ended; what they recorded "
        f"is kept in {runner.store.dir}"
    )
    with Interrupts(ended_note=note) as interrupts:
        try:
            outcome = run_loop(
                _run(interrupts, runner, reporter),
                concurrency=runner.plan.concurrency,
                who="osmosis-run",
            )
        except* InfrastructureError as group:  # even nested in a group, never show the group
            failure = _first(group)
        except* OsmosisRunError as group:  # the executor could not get ready: nothing ran
            unready = group.exceptions[0]  # type: ignore[assignment]
        if unready is not None:
            messages.print_error(unready)
            return exit_codes.USAGE
        if failure is not None:
            messages.print_error(failure)
            messages.print_resume_hint(runner.store.dir, failed=True)
            return exit_codes.INFRASTRUCTURE
        return _finish(settings, outcome)


async def _run(interrupts: Interrupts, runner: Scheduler, reporter: Any) -> RunOutcome:
    """``runner.run()``, with the first signal meanwhile stopping it."""

    def first_stop() -> None:
        reporter.stopping()
        runner.stop()

    try:
        with interrupts.stopping(first_stop):
            return await runner.run()
    finally:
        reporter.close()


def _first(error: BaseException) -> InfrastructureError:
    """The first InfrastructureError in a (nested) exception group."""
    from osmosis_run.errors import InfrastructureError

    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, InfrastructureError)
    return error


def _finish(settings: EvalSettings, outcome: RunOutcome) -> int:
    from osmosis_run.cli.report import print_written
    from osmosis_run.errors import InfrastructureError, OsmosisRunError
    from osmosis_run.reports.finish import finish_run

    tables.print_summary(outcome)
    if outcome.abandoned:
        which = (
            "1 rollout ignored its cancellation and was"
            if outcome.abandoned == 1
            else f"{outcome.abandoned} rollouts ignored their cancellation and were"
        )
        err.print(
            f"osmosis-run: {which} "
            "abandoned (recorded as timeouts, or left unfinished by a stop); not waiting for them",
            markup=False,
        )
    if outcome.failure is not None:  # the run could not go on: no gates, no reports
        messages.print_error(outcome.failure)
        if not isinstance(outcome.failure, InfrastructureError):
            return exit_codes.USAGE  # the input changed under the run (a streamed dataset)
        messages.print_resume_hint(outcome.run_dir, failed=True)
        return exit_codes.INFRASTRUCTURE
    if outcome.budget is not None:
        messages.print_budget_reached(outcome.budget, outcome.run_dir)
        return exit_codes.BUDGET_REACHED
    if outcome.interrupted:
        messages.print_resume_hint(outcome.run_dir)
        return exit_codes.INTERRUPTED
    try:
        finish = finish_run(
            settings.after,
            outcome.summary,
            outcome.run_dir,
            on_comparison=tables.print_comparison,
            on_written=print_written,
        )
    except OsmosisRunError as exc:
        messages.print_error(exc)
        return exit_codes.USAGE
    messages.print_verdicts(finish.verdicts)
    return _EXIT_OF_ENDING[finish.ending]
