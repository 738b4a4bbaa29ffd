"""``osmosis-run eval``: options -> EvalSettings -> Plan -> Scheduler -> summary -> exit code."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO

import typer

from osmosis_run.cli import exit_codes, options

if TYPE_CHECKING:
    from osmosis_run.errors import InfrastructureError
    from osmosis_run.run.scheduler import RunOutcome, Scheduler
    from osmosis_run.run.settings import EvalSettings

_SELECT = options.SELECTION
_RUN = "Execution"
_OUT = "Output"
_GATES = "Gates and reports"
_MODEL = "Model gateway"
_RAY = "Ray (--backend ray)"
# How a finished run ends (osmosis_run.reports.finish.Ending) -> its exit code.
_EXIT_OF_ENDING = {
    "ok": exit_codes.OK,
    "gate_failed": exit_codes.GATE_FAILED,
    "error_budget": exit_codes.ERROR_BUDGET,
}


def _opt(*names: str, help: str, panel: str = _RUN, **kw: Any) -> Any:  # noqa: A002
    return options.opt(*names, help=help, panel=panel, **kw)


def register(app: typer.Typer) -> None:
    """Add the eval command to ``app``."""
    app.command("eval", epilog=exit_codes.EXIT_CODES_HELP)(eval_command)


def eval_command(
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
    shuffle: Annotated[
        bool | None,
        _opt("--shuffle/--no-shuffle", help="Run rows in a seeded random order.", panel=_SELECT),
    ] = None,
    seed: Annotated[
        int | None, _opt("--seed", help="Seed for --shuffle (default 0).", panel=_SELECT)
    ] = None,
    shard: options.Shard = None,
    concurrency: Annotated[
        str | None,
        _opt(
            "--concurrency",
            "-c",
            help="Rollouts in flight (default: the workflow config's limit, else 4); "
            "0 or unlimited for no limit.",
        ),
    ] = None,
    agent_timeout: Annotated[
        float | None,
        _opt("--agent-timeout", help="Seconds a workflow may run (from its start, not queue)."),
    ] = None,
    grader_timeout: Annotated[
        float | None, _opt("--grader-timeout", help="Seconds a grader may run.")
    ] = None,
    retries: Annotated[
        int | None,
        _opt("--retries", help="Retry timeouts and agent errors up to R times (default 0)."),
    ] = None,
    chat_completions_url: Annotated[
        str | None,
        _opt(
            "--chat-completions-url",
            help="Model endpoint for every rollout's RolloutContext "
            "(env OSMOSIS_CHAT_COMPLETIONS_URL).",
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        _opt("--api-key", help="API key for the endpoint (env OSMOSIS_API_KEY); never written."),
    ] = None,
    no_gateway: Annotated[
        bool | None,
        _opt(
            "--no-gateway",
            help="Hand rollouts the endpoint and key directly (no accounting, pacing, "
            "recording or cache).",
            panel=_MODEL,
        ),
    ] = None,
    model: Annotated[
        str | None,
        _opt("--model", help="Replace the model field of every chat completion.", panel=_MODEL),
    ] = None,
    token_price: Annotated[
        str | None,
        _opt(
            "--token-price",
            help="PROMPT,COMPLETION: USD per million tokens; adds cost to usage.",
            panel=_MODEL,
        ),
    ] = None,
    no_record_calls: Annotated[
        bool | None,
        _opt(
            "--no-record-calls",
            help="Do not write rollouts/<id>/model_calls.jsonl.",
            panel=_MODEL,
        ),
    ] = None,
    model_retries: Annotated[
        int | None,
        _opt(
            "--model-retries",
            help="Retry a model call on 429, 5xx or a dropped connection up to N times "
            "(default 5), within the rollout's deadline.",
            panel=_MODEL,
        ),
    ] = None,
    max_model_connections: Annotated[
        int | None,
        _opt(
            "--max-model-connections",
            help="Model calls in flight at most (default 256); halved on a burst of 429s, "
            "then grown back.",
            panel=_MODEL,
        ),
    ] = None,
    rpm: Annotated[
        float | None,
        _opt("--rpm", help="Model requests per minute at most.", panel=_MODEL),
    ] = None,
    tpm: Annotated[
        float | None,
        _opt("--tpm", help="Model tokens per minute at most.", panel=_MODEL),
    ] = None,
    model_cache: Annotated[
        str | None,
        _opt(
            "--model-cache",
            help="SQLite file of model responses: re-runs replay them (free, offline).",
            panel=_MODEL,
        ),
    ] = None,
    model_cache_mode: Annotated[
        str | None,
        _opt(
            "--model-cache-mode",
            help="read-write (default), read-only (a miss fails the rollout), or refresh.",
            panel=_MODEL,
        ),
    ] = None,
    no_preflight: Annotated[
        bool | None,
        _opt(
            "--no-preflight",
            help="Skip the one request that checks the endpoint before any rollout.",
            panel=_MODEL,
        ),
    ] = None,
    server: Annotated[
        str | None,
        _opt(
            "--server",
            help="Run every rollout on this rollout server (protocol 0.4), such as "
            "http://127.0.0.1:8000: its workflow and grader, not --workflow's "
            "(env OSMOSIS_RUN_SERVER).",
        ),
    ] = None,
    server_api_key: Annotated[
        str | None,
        _opt(
            "--server-api-key",
            help="Bearer key of --server (env OSMOSIS_RUN_SERVER_API_KEY); never written.",
        ),
    ] = None,
    out: Annotated[
        str | None,
        _opt(
            "--out", "-o", help="Run directory (default runs/<dataset>-<fingerprint>).", panel=_OUT
        ),
    ] = None,
    fresh: Annotated[
        bool | None, _opt("--fresh", help="Start the run directory over.", panel=_OUT)
    ] = None,
    retry_failed: Annotated[
        bool | None,
        _opt(
            "--retry-failed", help="Run failed, timed-out and invalid rollouts again.", panel=_OUT
        ),
    ] = None,
    jsonl: Annotated[
        bool | None,
        _opt("--jsonl", help="Stream each results line to stdout as it finishes.", panel=_OUT),
    ] = None,
    no_messages: Annotated[
        bool | None,
        _opt("--no-messages", help="Leave transcripts out of results lines.", panel=_OUT),
    ] = None,
    group_by: Annotated[str | None, options.group_by(panel=_OUT)] = None,
    pass_threshold: Annotated[
        float | None, options.pass_threshold("default 1.0", panel=_GATES)
    ] = None,
    fail_under: Annotated[
        list[str] | None,
        _opt(
            "--fail-under",
            help="Exit 1 when a metric is below a value: mean=0.8, mean_graded=0.8, "
            "pass_rate=0.9 (a bare number is mean). Repeatable.",
            panel=_GATES,
        ),
    ] = None,
    dry_run: Annotated[
        bool | None,
        _opt("--dry-run", help="Load everything and read every row; run nothing (as validate)."),
    ] = None,
    html: Annotated[
        str | None, options.html("Write the HTML report here at the end.", panel=_GATES)
    ] = None,
    junit: Annotated[
        str | None,
        options.junit("Write a JUnit XML report here (one testcase per rollout).", panel=_GATES),
    ] = None,
    baseline: Annotated[
        str | None,
        _opt(
            "--baseline", help="Compare with this earlier run directory at the end.", panel=_GATES
        ),
    ] = None,
    fail_on_regression: Annotated[
        float | None,
        options.fail_on_regression(
            "With --baseline: exit 1 when the mean reward dropped by more than this "
            "and the confidence interval excludes zero.",
            panel=_GATES,
        ),
    ] = None,
    max_error_rate: Annotated[
        str | None,
        _opt(
            "--max-error-rate",
            help="Error budget: a count (3), fraction (0.05) or percentage (5%) of failed, "
            "timed-out or invalid rollouts; beyond it exit 3 (default 0).",
            panel=_GATES,
        ),
    ] = None,
    verbose: options.Verbose = 0,
    quiet: options.Quiet = False,
    backend: Annotated[
        str | None,
        _opt(
            "--backend",
            help="Where rollouts run: local (this process, the default) or ray (an actor pool).",
            panel=_RAY,
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        _opt(
            "--ray-address",
            help="Ray cluster to join (default $RAY_ADDRESS, else a local cluster).",
            panel=_RAY,
        ),
    ] = None,
    ray_actors: Annotated[
        int | None,
        _opt("--ray-actors", help="Actors in the pool (default: the cluster's CPUs).", panel=_RAY),
    ] = None,
    ray_actor_cpus: Annotated[
        float | None,
        _opt(
            "--ray-actor-cpus",
            help="CPUs each actor reserves: 0 for I/O-bound agents (default), 1 for graders "
            "that run code.",
            panel=_RAY,
        ),
    ] = None,
    ray_batch: Annotated[
        str | None,
        _opt(
            "--ray-batch",
            metavar="B|auto",
            help="Rollouts per actor call. auto (default): each call carries what is waiting "
            "for its actor, up to 16; B: at most B. Results stream back as each rollout "
            "finishes.",
            panel=_RAY,
        ),
    ] = None,
    ray_shared_fs: Annotated[
        bool | None,
        _opt(
            "--ray-shared-fs",
            help="--out is on a file system every node sees at the same path: artifacts are "
            "written in place (checked at start).",
            panel=_RAY,
        ),
    ] = None,
    ray_ready_timeout: Annotated[
        float | None,
        _opt(
            "--ray-ready-timeout",
            help="Seconds each actor gets to start and load the workflow (default 120).",
            panel=_RAY,
        ),
    ] = None,
) -> None:
    """Run a workflow (and grader) over a JSONL dataset and keep graded results.

    Re-running the same command resumes the run: finished rollouts are skipped.
    """
    values = {
        key: value
        for key, value in locals().items()
        if key not in ("config", "verbose", "quiet") and value is not None
    }
    from osmosis_run.cli import logs

    with logs.to_stderr(verbose):
        code = run_eval(values, config, quiet=quiet)
    raise typer.Exit(code)


def run_eval(values: dict[str, Any], config: Path | None, *, quiet: bool = False) -> int:
    """Resolve settings, run, render; return the exit code (``quiet``: no progress)."""
    from osmosis_run.cli import render
    from osmosis_run.errors import OsmosisRunError
    from osmosis_run.reports.finish import check_targets

    try:
        settings = options.resolve(values, config)
        if settings.after.dry_run:
            from osmosis_run.cli.validate import run_validate

            return run_validate(settings)
        check_targets(settings.after)
    except OsmosisRunError as exc:
        render.print_error(exc)
        return exit_codes.USAGE
    _say_if_unredacted(settings)
    _say_if_server_runs_its_own(settings)
    with _results_channel(jsonl=settings.output.jsonl) as results:
        return _run(settings, results, quiet=quiet)


def _run(settings: EvalSettings, results: BinaryIO | None, *, quiet: bool = False) -> int:
    """Prepare and run; an infrastructure error that escapes the run is still one line."""
    from osmosis_run.backends import executor_for
    from osmosis_run.cli import render
    from osmosis_run.errors import OsmosisRunError
    from osmosis_run.gateway.setup import gateway_for
    from osmosis_run.run.plan import prepare
    from osmosis_run.run.scheduler import Scheduler

    gateway = None
    try:
        reporter = render.make_reporter(jsonl=settings.output.jsonl, out=results, quiet=quiet)
        plan = prepare(settings)
        gateway = gateway_for(settings, plan.run_dir)
        runner = Scheduler.open(plan, executor_for(plan), reporter=reporter, gateway=gateway)
        reporter.on_stdout_closed = runner.stop
        reporter.gateway = gateway
    except OsmosisRunError as exc:
        if gateway is not None:
            gateway.close()
        render.print_error(exc)
        return exit_codes.USAGE
    try:
        return _run_opened(settings, runner, reporter)
    finally:
        if gateway is not None:
            gateway.close()


def _run_opened(settings: EvalSettings, runner: Scheduler, reporter: Any) -> int:
    """Run an opened scheduler; render its ending."""
    from osmosis_run.cli import render
    from osmosis_run.errors import InfrastructureError, OsmosisRunError

    failure: InfrastructureError | None = None
    unready: OsmosisRunError | None = None
    with _Interrupts(runner.store.dir) as interrupts:
        try:
            outcome = _drive(interrupts, runner, reporter)
        except* InfrastructureError as group:  # even nested in a group, never show the group
            failure = _first(group)
        except* OsmosisRunError as group:  # the executor could not get ready: nothing ran
            unready = group.exceptions[0]  # type: ignore[assignment]
        if unready is not None:
            render.print_error(unready)
            return exit_codes.USAGE
        if failure is not None:
            render.print_error(failure)
            render.print_resume_hint(runner.store.dir, failed=True)
            return exit_codes.INFRASTRUCTURE
        return _finish(settings, outcome)


def _drive(interrupts: _Interrupts, runner: Scheduler, reporter: Any) -> RunOutcome:
    """Run the scheduler to its end on a loop of its own; say what blocking calls it left."""
    from osmosis_run.run.scheduler import run_to_completion
    from osmosis_run.run.threads import WorkerThreads, default_size

    threads = WorkerThreads(default_size(runner.plan.concurrency))
    try:
        with _fewer_collections():
            return run_to_completion(interrupts.run(runner, reporter), threads)
    finally:
        _say_if_threads_left(threads.running)


def _say_if_threads_left(running: int) -> None:
    """Name the blocking calls (``asyncio.to_thread``) the run ended without waiting for."""
    if not running:
        return
    from osmosis_run.cli import render

    calls = "1 blocking call was" if running == 1 else f"{running} blocking calls were"
    render.err.print(
        f"osmosis-run: {calls} still running in worker threads (asyncio.to_thread) after "
        "their rollouts were cancelled; not waiting for them",
        markup=False,
    )


def _first(error: BaseException) -> InfrastructureError:
    """The first InfrastructureError in a (nested) exception group."""
    from osmosis_run.errors import InfrastructureError

    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, InfrastructureError)
    return error


def _say_if_unredacted(settings: EvalSettings) -> None:
    """A key too short to redact is used as given; say so once."""
    from osmosis_run._redact import MIN_SECRET_LENGTH, Redactor
    from osmosis_run.cli import render

    if Redactor((settings.execution.api_key_value(),)).too_short:
        render.print_unredacted_key(MIN_SECRET_LENGTH)


def _say_if_server_runs_its_own(settings: EvalSettings) -> None:
    """With --server, the workflow options given (a config file's, say) are not used: say so."""
    from osmosis_run.cli import render

    s = settings.run
    given = {
        "--workflow": s.workflow,
        "--grader": s.grader,
        "--workflow-config": s.workflow_config,
        "--grader-config": s.grader_config,
    }
    unused = [name for name, value in given.items() if value]
    if settings.execution.server and unused:
        render.err.print(
            f"osmosis-run: --server runs the server's own workflow and grader; "
            f"{', '.join(unused)} not used",
            markup=False,
        )


@contextlib.contextmanager
def _results_channel(*, jsonl: bool) -> Iterator[BinaryIO | None]:
    """Where --jsonl lines go; with --jsonl, stdout is osmosis-run's alone while it runs.

    Everything else written to stdout (a workflow's print, a subprocess it starts) goes to
    stderr: file descriptor 1 points there, and results go to a private copy of the real
    stdout (close-on-exec, so no subprocess gets it). Under a test runner's captured streams
    (no descriptors) only ``sys.stdout`` is swapped. Without --jsonl: None, stdout untouched.
    """
    if not jsonl:
        yield None
        return
    if sys.stdout is None:  # started with stdout closed: the lines have nowhere to go
        with open(os.devnull, "wb") as nowhere:
            yield nowhere
        return
    sys.stdout.flush()
    try:
        real = sys.stdout.fileno() == 1
    except (OSError, ValueError):  # a test's capture: no descriptor
        real = False
    if not real:
        saved = sys.stdout
        sys.stdout = sys.stderr
        try:
            yield saved.buffer
        finally:
            sys.stdout = saved
        return
    results = os.fdopen(os.dup(1), "wb")  # os.dup: not inherited by subprocesses
    _point_stdout_at_stderr()
    try:
        yield results
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()  # what user code printed, to stderr still
        with contextlib.suppress(OSError):
            results.flush()
        os.dup2(results.fileno(), 1)
        with contextlib.suppress(OSError):
            results.close()


def _point_stdout_at_stderr() -> None:
    try:
        os.dup2(2, 1)
    except OSError:  # no stderr at all: user output goes nowhere rather than into results
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Collect cyclic garbage less often during a run.

    A run allocates a few dozen short-lived objects per rollout, nearly all freed by reference
    counting; the default threshold (700) makes the collector walk every live task and module
    object thousands of times a run. Freezing what startup loaded and raising the first
    threshold cut that work without letting memory grow with the dataset.
    """
    import gc

    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


class _Interrupts:
    """Ctrl-C and SIGTERM from the moment a run is open until its command has finished.

    While the rollouts run, the first signal stops the run cleanly (what finished is kept, and
    the run resumes) and the second exits 130 at once. Once the rollouts have ended, with only
    the summary, the gates and the reports left, a signal exits 130 at once: what the run
    recorded is on disk by then. Plain ``signal`` handlers rather than the loop's: they run even
    while a workflow's blocking code holds the event loop, so the second Ctrl-C always ends the
    process.
    """

    def __init__(self, run_dir: Path) -> None:
        self._run_dir = run_dir
        self._signals = 0
        self._stop: Callable[[], object] | None = None
        self._ended = False  # the rollouts have ended (run() has returned or raised)
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Interrupts:
        self._previous = {
            sig: signal.signal(sig, self._on_signal) for sig in exit_codes.STOP_SIGNALS
        }
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    async def run(self, runner: Scheduler, reporter: Any) -> RunOutcome:
        """``runner.run()``, with the first signal meanwhile stopping it."""
        loop = asyncio.get_running_loop()

        def first_stop() -> None:
            reporter.stopping()
            runner.stop()

        self._stop = functools.partial(loop.call_soon_threadsafe, first_stop)
        try:
            return await runner.run()
        finally:
            self._stop = None
            self._ended = True
            reporter.close()

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self._signals += 1
        stop = self._stop
        if stop is not None and self._signals == 1:
            stop()
            return
        if self._signals == 1 and self._ended:  # say so: the line is all there is
            with contextlib.suppress(OSError):
                os.write(
                    2,
                    f"osmosis-run: interrupted after the rollouts ended; what they recorded "
                    f"is kept in {self._run_dir}\n".encode(),
                )
        os._exit(exit_codes.INTERRUPTED)


def _finish(settings: EvalSettings, outcome: RunOutcome) -> int:
    from osmosis_run.cli import render
    from osmosis_run.cli.report import print_written
    from osmosis_run.errors import InfrastructureError, OsmosisRunError
    from osmosis_run.reports.finish import finish_run

    render.print_summary(outcome)
    if outcome.abandoned:
        which = (
            "1 rollout ignored its cancellation and was"
            if outcome.abandoned == 1
            else f"{outcome.abandoned} rollouts ignored their cancellation and were"
        )
        render.err.print(
            f"osmosis-run: {which} "
            "abandoned (recorded as timeouts, or left unfinished by a stop); not waiting for them",
            markup=False,
        )
    if outcome.failure is not None:  # the run could not go on: no gates, no reports
        render.print_error(outcome.failure)
        if not isinstance(outcome.failure, InfrastructureError):
            return exit_codes.USAGE  # the input changed under the run (a streamed dataset)
        render.print_resume_hint(outcome.run_dir, failed=True)
        return exit_codes.INFRASTRUCTURE
    if outcome.interrupted:
        render.print_resume_hint(outcome.run_dir)
        return exit_codes.INTERRUPTED
    try:
        finish = finish_run(
            settings.after,
            outcome.summary,
            outcome.run_dir,
            on_comparison=render.print_comparison,
            on_written=print_written,
        )
    except OsmosisRunError as exc:
        render.print_error(exc)
        return exit_codes.USAGE
    render.print_verdicts(finish.verdicts)
    return _EXIT_OF_ENDING[finish.ending]
