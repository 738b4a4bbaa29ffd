"""``osmosis-run serve``: options -> ServeSettings + the workflow -> the rollout server -> uvicorn.

Everything that can fail is checked before the server listens (the workflow imports, the
config, the run directory, the port), each as one line and exit code 2. SIGINT and SIGTERM stop
it gracefully: admissions get 503, polls in flight are answered, rollouts in flight drain (then
are cancelled), the run directory gets its summary, and the command exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from osmosis_run.cli import exit_codes, options

if TYPE_CHECKING:
    import uvicorn

    from osmosis_run.sdk.backend import LocalBackend
    from osmosis_run.server.settings import ServeSettings

_SERVE = "Server"
SERVE_HELP = (
    "Exit codes: 0 served and stopped on SIGINT or SIGTERM; 2 the workflow, a config or the "
    "run directory cannot be used, or the port cannot be listened on (nothing was served)."
)


def _opt(*names: str, help: str, **kw: Any) -> Any:  # noqa: A002
    return options.opt(*names, help=help, panel=_SERVE, **kw)


def register(app: typer.Typer) -> None:
    """Add the serve command to ``app``."""
    app.command("serve", epilog=SERVE_HELP)(serve_command)


def serve_command(
    config: options.Config = None,
    workflow: options.Workflow = None,
    grader: options.GraderClass = None,
    workflow_config: options.WorkflowConfig = None,
    grader_config: options.GraderConfig = None,
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
            help="Rollouts executing at once (default: the workflow config's limit, else 4); "
            "unlimited for no limit.",
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
) -> None:
    """Serve a workflow (and grader) over the rollout protocol, recording every rollout.

    Wire-compatible with osmosis-ai 0.3.8's rollout server (protocol 0.4): a trainer POSTs
    /rollout, long-polls /rollout/{id}/result with its lease, and cancels with /rollout/cancel.
    """
    components = {
        key: value
        for key, value in {
            "workflow": workflow,
            "grader": grader,
            "workflow_config": workflow_config,
            "grader_config": grader_config,
        }.items()
        if value is not None
    }
    serving = {
        "host": host,
        "port": port,
        "api_key": api_key,
        "result_wait": result_wait,
        "lease": lease,
        "retention": retention,
        "concurrency": concurrency,
        "out": out,
        "keep_alive": keep_alive,
    }
    raise typer.Exit(run_serve(components, serving, config))


def run_serve(components: dict[str, Any], serving: dict[str, Any], config: Path | None) -> int:
    """Check everything, listen, serve until a signal; return the exit code."""
    from osmosis_run.cli import render
    from osmosis_run.errors import OsmosisRunError

    try:
        settings, backend = _prepare(components, serving, config)
        server_module = _import_server()
    except (OsmosisRunError, _Unusable) as exc:
        render.print_error(exc)
        return exit_codes.USAGE
    try:
        listener = _listen(settings.host, settings.port)
    except _Unusable as exc:
        render.print_error(exc)
        return exit_codes.USAGE
    try:
        app = server_module.create_rollout_server(
            backend=backend,
            configure_logging=False,
            result_wait_timeout_sec=settings.result_wait,
            polling_lease_timeout_sec=settings.lease,
            result_retention_sec=settings.retention,
            api_key=settings.api_key_value(),
            out=settings.out,
            concurrency=settings.limit(),
        )
    except (OsmosisRunError, ValueError) as exc:
        listener.close()
        render.print_error(exc)
        return exit_codes.USAGE
    return _serve(app, listener, settings)


class _Unusable(Exception):
    """Something the server needs is not there (the extra, the port)."""


def _prepare(
    components: dict[str, Any], serving: dict[str, Any], config: Path | None
) -> tuple[ServeSettings, LocalBackend]:
    from osmosis_run.backends.osmosis_ai import backend_for
    from osmosis_run.run.components import load_components
    from osmosis_run.server.settings import resolve_serve_settings

    eval_settings = options.resolve(components, config)
    settings = resolve_serve_settings(serving, config_file=config)
    parts = load_components(eval_settings)
    backend = backend_for(parts)  # osmosis_ai classes get osmosis_ai's own objects
    return settings, backend


def _import_server() -> Any:
    try:
        import uvicorn  # noqa: F401  (checked here: serving needs it)

        from osmosis_run.server import app
    except ModuleNotFoundError as exc:
        from osmosis_run.server import EXTRA_HINT

        raise _Unusable(f"{EXTRA_HINT} ({exc.name} is missing)") from None
    return app


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is served (a taken port is exit 2).

    Made with ``IPPROTO_TCP`` named: asyncio turns Nagle's algorithm off only on sockets that
    say so, and a long-poll answered in two writes would otherwise wait for a delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        listener.bind((host, port))
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason = "the address is already in use; stop what listens there or choose --port"
        raise _Unusable(f"cannot listen on {_url(host, port)}: {reason}") from None
    listener.set_inheritable(False)
    return listener


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _uvicorn_server(app: Any, settings: ServeSettings) -> uvicorn.Server:
    """uvicorn on osmosis-run's HTTP/1.1 protocol, without its own signal handling (ours stops
    admissions first)."""
    import uvicorn

    from osmosis_run.server.http1 import HttpProtocol

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        def install_signal_handlers(self) -> None:
            pass

    config = uvicorn.Config(
        app,
        # Lighter than h11 in Python, one write per response; it also holds the request timeout,
        # the body limit and the connection limit (its Limits' defaults, in the README).
        http=HttpProtocol,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=settings.keep_alive,
        lifespan="on",
    )
    return Server(config)


def _serve(app: Any, listener: socket.socket, settings: ServeSettings) -> int:
    """Run uvicorn on the socket until SIGINT or SIGTERM; then stop gracefully."""
    from osmosis_run.cli import render

    service = app.state.rollouts
    host, port = listener.getsockname()[:2]
    render.err.print(f"osmosis-run serve: listening on {_url(host, port)}", markup=False)
    render.err.print(f"osmosis-run serve: recording to {service.run_dir}", markup=False)

    from osmosis_run.run.scheduler import run_to_completion
    from osmosis_run.run.threads import WorkerThreads, default_size

    server = _uvicorn_server(app, settings)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stops = 0

        def stop() -> None:
            render.err.print(
                f"osmosis-run serve: stopping: admissions closed, draining "
                f"{service.active} rollout(s) in flight",
                markup=False,
            )
            service.stop_admitting()
            server.should_exit = True

        def on_signal(_signum: int, _frame: object) -> None:
            nonlocal stops
            stops += 1
            if stops > 1:
                os._exit(exit_codes.INTERRUPTED)
            loop.call_soon_threadsafe(stop)

        def recording_failed(exc: Exception) -> None:
            render.err.print(
                f"osmosis-run serve: error: {exc}; stopping (exit {exit_codes.INFRASTRUCTURE})",
                markup=False,
            )
            server.should_exit = True

        service.on_recording_failed = recording_failed
        previous = {sig: signal.signal(sig, on_signal) for sig in exit_codes.STOP_SIGNALS}
        try:
            await server.serve(sockets=[listener])
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    import gc

    # As eval does: freeze what startup loaded, collect cyclic garbage less often. A served
    # rollout allocates a few dozen short-lived objects, nearly all freed by reference counting.
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    # Not asyncio.run: it would wait at the end for every blocking call a cancelled rollout left
    # in asyncio.to_thread (run/threads.py).
    threads = WorkerThreads(default_size(service.concurrency))
    run_to_completion(main(), threads)
    if threads.running:
        render.err.print(
            f"osmosis-run serve: {threads.running} blocking call(s) still running in worker "
            "threads (asyncio.to_thread); not waiting for them",
            markup=False,
        )
    if not server.started:
        return exit_codes.USAGE
    summary = service.summary()
    render.err.print(
        f"osmosis-run serve: stopped; {summary.rollouts} rollout(s) recorded in {service.run_dir}",
        markup=False,
    )
    if service.recording_error is not None:
        return exit_codes.INFRASTRUCTURE
    return exit_codes.OK
