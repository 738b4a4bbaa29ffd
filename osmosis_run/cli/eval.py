"""``osmosis-run eval``: options -> EvalSettings -> Plan -> Scheduler -> summary -> exit code."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO

import typer

from osmosis_run.cli import command, exit_codes, options

if TYPE_CHECKING:
    from osmosis_run.run.settings import EvalSettings

_SELECT = options.SELECTION
_RUN = "Execution"
_OUT = "Output"
_MODEL = "Model gateway"
_RAY = "Ray (--backend ray)"
_PROCESSES = "Worker processes (--backend processes)"


def _opt(*names: str, help: str, panel: str = _RUN, **kw: Any) -> Any:  # noqa: A002
    return options.opt(*names, help=help, panel=panel, **kw)


def register(app: typer.Typer) -> None:
    """Add the eval command to ``app``."""
    command.add(app, "eval", eval_command, epilog=exit_codes.EXIT_CODES_HELP)


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
    gateway_host: Annotated[
        str | None,
        _opt(
            "--gateway-host",
            help="Address the gateway listens on and gives rollouts (default: loopback, or "
            "this machine's address toward a Ray cluster or --server on another machine).",
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
        float | None, options.pass_threshold("default 1.0", panel=options.GATES)
    ] = None,
    fail_under: options.FailUnder = None,
    dry_run: Annotated[
        bool | None,
        _opt("--dry-run", help="Load everything and read every row; run nothing (as validate)."),
    ] = None,
    html: options.RunHtml = None,
    junit: options.RunJunit = None,
    baseline: options.Baseline = None,
    fail_on_regression: options.FailOnRegression = None,
    max_error_rate: options.MaxErrorRate = None,
    time_limit: options.TimeLimit = None,
    max_cost: Annotated[
        str | None,
        _opt(
            "--max-cost",
            metavar="USD",
            help="Stop cleanly once the model calls cost this much (the gateway's tokens at "
            "--token-price); exit 124.",
            panel=options.BUDGETS,
        ),
    ] = None,
    max_tokens: Annotated[
        str | None,
        _opt(
            "--max-tokens",
            metavar="N",
            help="Stop cleanly once the model calls used this many tokens (the gateway's "
            "count); exit 124.",
            panel=options.BUDGETS,
        ),
    ] = None,
    verbose: options.Verbose = 0,
    quiet: options.Quiet = False,
    backend: Annotated[
        str | None,
        _opt(
            "--backend",
            metavar="local|processes|ray",
            help="Where rollouts run: local (this process, the default), processes (worker "
            "processes on this machine: crash isolation, hard deadlines, every core) or ray "
            "(an actor pool).",
            panel=_RUN,
        ),
    ] = None,
    workers: Annotated[
        str | None,
        _opt(
            "--workers",
            metavar="N",
            help="Worker processes (default: this machine's CPUs).",
            panel=_PROCESSES,
        ),
    ] = None,
    max_worker_memory: Annotated[str | None, options.max_worker_memory(panel=_PROCESSES)] = None,
    worker_recycle: Annotated[str | None, options.worker_recycle(panel=_PROCESSES)] = None,
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
    """Run a workflow (and grader) over a JSONL, CSV or Parquet dataset and keep the results.

    DATASET is a file (.jsonl, .csv, .parquet; .jsonl.gz and .csv.gz gzipped), or - for JSONL
    rows on stdin.

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
    from osmosis_run.backends import check_backend_options
    from osmosis_run.cli.messages import print_error
    from osmosis_run.cli.streams import results_channel
    from osmosis_run.errors import OsmosisRunError
    from osmosis_run.reports.finish import check_targets
    from osmosis_run.run.budgets import check_budgets

    try:
        settings = options.resolve(values, config)
        if settings.after.dry_run:
            from osmosis_run.cli.validate import run_validate

            return run_validate(settings, config=config)
        check_targets(settings.after)
        check_backend_options(settings.execution)
        check_budgets(settings)
    except OsmosisRunError as exc:
        print_error(exc)
        return exit_codes.USAGE
    _say_if_unredacted(settings)
    _say_if_server_runs_its_own(settings)
    with results_channel(jsonl=settings.output.jsonl) as results:
        return _run(settings, results, quiet=quiet)


def _run(settings: EvalSettings, results: BinaryIO | None, *, quiet: bool = False) -> int:
    """Prepare and run; an infrastructure error that escapes the run is still one line."""
    from osmosis_run.backends import cool_down, executor_for, warm_up
    from osmosis_run.cli.messages import print_error
    from osmosis_run.cli.progress import make_reporter
    from osmosis_run.cli.running import run_opened
    from osmosis_run.errors import OsmosisRunError
    from osmosis_run.gateway.setup import gateway_for
    from osmosis_run.run.plan import prepare
    from osmosis_run.run.scheduler import Scheduler

    gateway = None
    try:
        warm_up(settings.execution)  # worker processes start while the run is prepared
        reporter = make_reporter(jsonl=settings.output.jsonl, out=results, quiet=quiet)
        plan = prepare(settings)
        gateway = gateway_for(settings, plan.run_dir)
        endpoint = (gateway.url, gateway.api_key) if gateway is not None else None
        executor = executor_for(plan, endpoint=endpoint, notify=reporter.notice)
        runner = Scheduler.open(plan, executor, reporter=reporter, gateway=gateway)
        reporter.on_stdout_closed = runner.stop
        reporter.gateway = gateway
    except OsmosisRunError as exc:
        cool_down()
        if gateway is not None:
            gateway.close()
        print_error(exc)
        return exit_codes.USAGE
    try:
        return run_opened(settings, runner, reporter)
    finally:
        cool_down()
        if gateway is not None:
            gateway.close()


def _say_if_unredacted(settings: EvalSettings) -> None:
    """A key too short to redact is used as given; say so once."""
    from osmosis_run._redact import MIN_SECRET_LENGTH, Redactor
    from osmosis_run.cli.messages import print_unredacted_key

    if Redactor((settings.execution.api_key_value(),)).too_short:
        print_unredacted_key(MIN_SECRET_LENGTH)


def _say_if_server_runs_its_own(settings: EvalSettings) -> None:
    """With --server, the workflow options given (a config file's, say) are not used: say so."""
    from osmosis_run.cli.streams import err

    s = settings.run
    given = {
        "--workflow": s.workflow,
        "--grader": s.grader,
        "--workflow-config": s.workflow_config,
        "--grader-config": s.grader_config,
    }
    unused = [name for name, value in given.items() if value]
    if settings.execution.remote and unused:
        err.print(
            f"osmosis-run: --server runs the server's own workflow and grader; "
            f"{', '.join(unused)} not used",
            markup=False,
        )
