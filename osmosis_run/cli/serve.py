"""``osmosis-run serve``: options -> ServeSettings + the workflow -> the rollout server -> uvicorn.

Everything that can fail is checked before the server listens (the workflow imports, the
config, the model gateway's preflight, the port, the run directory), each as one line and exit
code 2. SIGINT and SIGTERM stop it gracefully: admissions get 503, polls in flight are answered,
rollouts in flight drain (then are cancelled), the run directory gets its summary, the model
gateway (``--chat-completions-url``) closes, and the command exits 0.

With ``--workers N`` the served rollouts run in N worker processes (eval's ``--backend
processes``: crash isolation, hard deadlines, ``--max-worker-memory``, ``--worker-recycle``);
serve has no ``--backend`` of its own, since processes are the one other place it runs them. The
workers load the workflow by the paths serve loaded it from, and are ready before the first
line: one that cannot is one line and exit code 2 too. A lost worker is one line on stderr.

An Osmosis workspace's eval config (``--config``) is opened as eval opens it (its [env], its
[secrets], its entrypoint's classes). An entrypoint's module-level osmosis_ai ``HarborBackend``
(a container per rollout) runs the served rollouts itself, as in eval (``BackendExecutor``):
its checks run before the server listens, its containers and scratch folders are gone when it
stops, and ``--grader`` and ``--workers`` are refused.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from osmosis_run.cli import command, exit_codes, options
from osmosis_run.cli.streams import err

if TYPE_CHECKING:
    from osmosis_run.backends.osmosis_ai import BackendExecutor
    from osmosis_run.gateway.host import Gateway
    from osmosis_run.run.settings import EvalSettings
    from osmosis_run.sdk.backend import LocalBackend
    from osmosis_run.server.service import Workers
    from osmosis_run.server.settings import ServeSettings

_SERVE = "Server"
_MODEL = "Model gateway (with --chat-completions-url)"
_WORKERS = "Worker processes (with --workers)"
_PREFIX = "osmosis-run serve: "
_COMPONENTS = ("workflow", "grader", "workflow_config", "grader_config", "secrets_file")
SERVE_HELP = (
    "Exit codes: 0 served and stopped on SIGINT or SIGTERM; 2 the workflow, a config or the "
    "run directory cannot be used, the model gateway's preflight failed, or the port cannot be "
    "listened on (nothing was served)."
)


def _opt(*names: str, help: str, panel: str = _SERVE, **kw: Any) -> Any:  # noqa: A002
    return options.opt(*names, help=help, panel=panel, **kw)


def register(app: typer.Typer) -> None:
    """Add the serve command to ``app``."""
    command.add(app, "serve", serve_command, epilog=SERVE_HELP)


def serve_command(
    config: options.Config = None,
    workflow: options.Workflow = None,
    grader: options.GraderClass = None,
    workflow_config: options.WorkflowConfig = None,
    grader_config: options.GraderConfig = None,
    secrets_file: options.SecretsFile = None,
    host: Annotated[
        str | None, _opt("--host", help="Address to listen on (default 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None,
        _opt("--port", help="Port to listen on (default $_OSMOSIS_ROLLOUT_PORT, else 8000)."),
    ] = None,
    api_key: Annotated[
        str | None,
        _opt(
            "--api-key",
            help="Key clients must send as 'Authorization: Bearer KEY' "
            "(env OSMOSIS_ROLLOUT_API_KEY); never written.",
        ),
    ] = None,
    result_wait: Annotated[
        float | None,
        _opt("--result-wait", help="Seconds a result poll waits for a status change (default 30)."),
    ] = None,
    lease: Annotated[
        float | None,
        _opt(
            "--lease",
            help="Seconds a rollout lives without a poll; then it fails with lease_expired "
            "(default 120).",
        ),
    ] = None,
    retention: Annotated[
        float | None,
        _opt("--retention", help="Seconds a final result stays pollable (default 900)."),
    ] = None,
    concurrency: Annotated[
        str | None,
        _opt(
            "--concurrency",
            "-c",
            help="Rollouts executing at once (default: the workflow config's limit, a "
            "HarborBackend's own, else 4); unlimited for no limit.",
        ),
    ] = None,
    out: Annotated[
        str | None,
        _opt("--out", "-o", help="Run directory (default runs/serve-<UTC time>-<pid>)."),
    ] = None,
    keep_alive: Annotated[
        int | None,
        _opt(
            "--keep-alive",
            help="Seconds a connection with no request under way stays open (default 10; "
            "behind a load balancer, more than its idle timeout: 2160 on the Osmosis platform).",
        ),
    ] = None,
    chat_completions_url: Annotated[
        str | None,
        _opt(
            "--chat-completions-url",
            help="Run the model gateway to this endpoint for the served rollouts (env "
            "OSMOSIS_CHAT_COMPLETIONS_URL): their calls counted, paced, recorded and cached; "
            "without it, rollouts use the URL their caller sent.",
            panel=_MODEL,
        ),
    ] = None,
    model_api_key: Annotated[
        str | None,
        _opt(
            "--model-api-key",
            help="API key for the endpoint (env OSMOSIS_API_KEY); never written.",
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
            "--no-record-calls", help="Do not write rollouts/<id>/model_calls.jsonl.", panel=_MODEL
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
        float | None, _opt("--rpm", help="Model requests per minute at most.", panel=_MODEL)
    ] = None,
    tpm: Annotated[
        float | None, _opt("--tpm", help="Model tokens per minute at most.", panel=_MODEL)
    ] = None,
    model_cache: Annotated[
        str | None,
        _opt(
            "--model-cache",
            help="SQLite file of model responses: repeated calls replay them (free, offline).",
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
            help="Skip the one request that checks the endpoint before serving.",
            panel=_MODEL,
        ),
    ] = None,
    gateway_host: Annotated[
        str | None,
        _opt(
            "--gateway-host",
            help="Address the gateway listens on and gives rollouts (default 127.0.0.1: the "
            "served rollouts run on this machine).",
            panel=_MODEL,
        ),
    ] = None,
    workers: Annotated[
        str | None,
        _opt(
            "--workers",
            metavar="N",
            help="Run the rollouts in N worker processes (default: none, in the server's "
            "process): a crash loses only its worker's rollouts, deadlines hold for code that "
            "never yields.",
            panel=_WORKERS,
        ),
    ] = None,
    max_worker_memory: Annotated[str | None, options.max_worker_memory(panel=_WORKERS)] = None,
    worker_recycle: Annotated[str | None, options.worker_recycle(panel=_WORKERS)] = None,
) -> None:
    """Serve a workflow (and grader) over the rollout protocol, recording every rollout.

    Wire-compatible with osmosis-ai 0.3.8's rollout server (protocol 0.4): a trainer POSTs
    /rollout, long-polls /rollout/{id}/result with its lease, and cancels with /rollout/cancel.
    """
    serving = {key: value for key, value in locals().items() if key != "config"}
    components = {key: serving.pop(key) for key in _COMPONENTS}
    given = {key: value for key, value in components.items() if value is not None}
    raise typer.Exit(run_serve(given, serving, config))


def run_serve(components: dict[str, Any], serving: dict[str, Any], config: Path | None) -> int:
    """Check everything, listen, serve until a signal; return the exit code."""
    from osmosis_run.cli.messages import print_error
    from osmosis_run.errors import OsmosisRunError

    try:
        settings, backend, served, secrets = _prepare(components, serving, config)
        server_module = _import_server()
        run_dir = Path(settings.out) if settings.out else server_module.default_run_dir()
        executor = _executor(settings, backend, served, run_dir)
        gateway = _gateway(settings, run_dir)
    except (OsmosisRunError, _Unusable) as exc:
        print_error(exc)
        return exit_codes.USAGE
    try:
        return _run(server_module, settings, backend, served, run_dir, gateway, executor, secrets)
    finally:
        if gateway is not None:
            gateway.close()  # after the server stopped: its rollouts have drained


def _run(
    server_module: Any,
    settings: ServeSettings,
    backend: LocalBackend,
    served: EvalSettings,
    run_dir: Path,
    gateway: Gateway | None,
    executor: BackendExecutor | None,
    secrets: tuple[str, ...],
) -> int:
    """Listen, build the app (the run directory opened), serve; return the exit code.

    ``served`` holds what the served classes were loaded from (the workers load it too) and
    the run's pass threshold; ``secrets`` are the workspace's [secrets] values.
    """
    from osmosis_run.cli.messages import print_error
    from osmosis_run.errors import OsmosisRunError

    try:
        listener = _listen(settings.host, settings.port)
    except _Unusable as exc:
        print_error(exc)
        return exit_codes.USAGE
    upstream_key = settings.model_api_key_value()
    try:
        app = server_module.create_rollout_server(
            backend=backend,
            configure_logging=False,
            result_wait_timeout_sec=settings.result_wait,
            polling_lease_timeout_sec=settings.lease,
            result_retention_sec=settings.retention,
            api_key=settings.api_key_value(),
            out=run_dir,
            concurrency=settings.limit(),
            pass_threshold=served.after.pass_threshold,  # the run's, as eval's
            gateway=gateway,
            secrets=(*secrets, *((upstream_key,) if upstream_key else ())),
            workers=_workers(settings, served),
            executor=executor,
        )
    except (OsmosisRunError, ValueError) as exc:
        listener.close()
        print_error(exc)
        return exit_codes.USAGE
    return _serve(app, listener, settings)


def _gateway(settings: ServeSettings, run_dir: Path) -> Gateway | None:
    """The model gateway of the served rollouts (preflight done), or None without an endpoint.

    Raises:
        ConfigError: the preflight failed, the cache or the address cannot be used.
    """
    if settings.chat_completions_url is None:
        return None
    from osmosis_run.gateway.setup import start_gateway

    return start_gateway(
        settings.gateway,
        upstream=settings.chat_completions_url,
        api_key=settings.model_api_key_value(),
        run_dir=run_dir,
    )


def _executor(
    settings: ServeSettings, backend: LocalBackend, served: EvalSettings, run_dir: Path
) -> BackendExecutor | None:
    """The executor of a module-level osmosis_ai ``ExecutionBackend`` (a ``HarborBackend``),
    which runs whole rollouts itself; None: the server runs the classes.

    Raises:
        ConfigError: ``--workers`` or ``--grader`` beside such a backend.
    """
    from osmosis_run.backends.osmosis_ai import backend_executor, refuse_option

    path, workflow = served.run.workflow, backend.workflow_cls
    if settings.workers is not None:
        refuse_option(workflow, path, "--workers")
    return backend_executor(workflow, backend.grader_cls, path=path, run_dir=run_dir)


def _workers(settings: ServeSettings, served: EvalSettings) -> Workers | None:
    """The worker processes of ``--workers N`` (None: the rollouts run in this process)."""
    if settings.workers is None:
        return None
    from osmosis_run.backends.processes import load_spec
    from osmosis_run.server.service import Workers

    return Workers(
        load=load_spec(served.run),
        count=settings.workers,
        max_memory=settings.max_worker_memory,
        recycle=settings.worker_recycle,
        notify=_say_lost,
    )


def _say_lost(line: str) -> None:
    """A lost worker's line (``osmosis-run: worker process 4242 died (SIGSEGV); ...``), in
    serve's words as its other lines."""
    err.print(_PREFIX + line.removeprefix("osmosis-run: "), markup=False)


class _Unusable(Exception):
    """Something the server needs is not there (the extra, the port)."""


def _prepare(
    components: dict[str, Any], serving: dict[str, Any], config: Path | None
) -> tuple[ServeSettings, LocalBackend, EvalSettings, tuple[str, ...]]:
    """The settings, the backend of the served classes, what they were loaded from, and the
    workspace's [secrets] values (to redact)."""
    from osmosis_run.backends.osmosis_ai import backend_for
    from osmosis_run.run.components import load_components
    from osmosis_run.run.workspace import open_workspace
    from osmosis_run.server.settings import resolve_serve_settings

    eval_settings = options.resolve(components, config)
    settings = resolve_serve_settings(serving, config_file=config)
    eval_settings, secrets = open_workspace(eval_settings)  # a workspace config: as eval
    parts = load_components(eval_settings)
    backend = backend_for(parts)  # osmosis_ai classes get osmosis_ai's own objects
    return settings, backend, eval_settings, secrets


def _import_server() -> Any:
    try:
        import uvicorn  # noqa: F401  (checked here: serving needs it)

        from osmosis_run.server import app
    except ModuleNotFoundError as exc:
        from osmosis_run.server import EXTRA_HINT

        raise _Unusable(f"{EXTRA_HINT} ({exc.name} is missing)") from None
    return app


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is served (a taken port is exit 2)."""
    from osmosis_run.cli.listening import ListenError, listen

    try:
        return listen(host, port)
    except ListenError as exc:
        raise _Unusable(str(exc)) from None


def _say_serving(listener: socket.socket, settings: ServeSettings, run_dir: Path) -> None:
    """The first lines: where it listens and records, then the gateway and the workers."""
    host, port = listener.getsockname()[:2]
    from osmosis_run.cli.listening import url_of

    err.print(f"{_PREFIX}listening on {url_of(host, port)}", markup=False)
    err.print(f"{_PREFIX}recording to {run_dir}", markup=False)
    if settings.chat_completions_url is not None:
        err.print(
            f"{_PREFIX}model gateway to {settings.chat_completions_url}: the served "
            "rollouts' model calls are counted and recorded",
            markup=False,
        )
    if settings.workers is not None:
        err.print(
            f"{_PREFIX}running the rollouts in {settings.workers} worker process(es)",
            markup=False,
        )


def _serve(app: Any, listener: socket.socket, settings: ServeSettings) -> int:
    """Start the workers (if any), run uvicorn on the socket until SIGINT or SIGTERM; then
    stop gracefully."""
    from osmosis_run.cli.messages import print_error
    from osmosis_run.cli.process import Interrupts, run_loop
    from osmosis_run.errors import OsmosisRunError

    service = app.state.rollouts
    from osmosis_run.cli.listening import uvicorn_server

    server = uvicorn_server(app, keep_alive=settings.keep_alive)

    def stop() -> None:
        err.print(
            f"osmosis-run serve: stopping: admissions closed, draining "
            f"{service.active} rollout(s) in flight",
            markup=False,
        )
        service.stop_admitting()
        server.should_exit = True

    def recording_failed(exc: Exception) -> None:
        err.print(
            f"osmosis-run serve: error: {exc}; stopping (exit {exit_codes.INFRASTRUCTURE})",
            markup=False,
        )
        server.should_exit = True

    async def main() -> None:
        service.on_recording_failed = recording_failed
        with Interrupts() as interrupts, interrupts.stopping(stop):
            try:  # here, not in the app's lifespan: a worker that cannot load is one line
                await service.open_executor()
            except OsmosisRunError as exc:
                print_error(exc)
                return
            try:
                _say_serving(listener, settings, service.run_dir)
                await server.serve(sockets=[listener])
            finally:  # the lifespan stopped them, unless it did not run
                await service.close_executor()

    run_loop(main(), concurrency=service.concurrency, who="osmosis-run serve")
    if not server.started:
        listener.close()  # the executor could not open: nothing was served on it
        return exit_codes.USAGE
    summary = service.summary()
    err.print(
        f"osmosis-run serve: stopped; {summary.rollouts} rollout(s) recorded in {service.run_dir}",
        markup=False,
    )
    if service.recording_error is not None:
        return exit_codes.INFRASTRUCTURE
    return exit_codes.OK
