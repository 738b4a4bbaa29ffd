"""``osmosis-run view``: a local web app over run directories, live while an eval writes them."""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from osmosis_run.cli import command, exit_codes, options

VIEW_HELP = (
    "Exit codes: 0 stopped; 2 a PATH is not there, the address cannot be listened on, or "
    "--host is not loopback and there is no --token; 130 interrupted (Ctrl-C)."
)
DEFAULT_PORT = 8765
_PREFIX = "osmosis-run view: "


def register(app: typer.Typer) -> None:
    """Add the view command to ``app``."""
    command.add(app, "view", view_command, epilog=VIEW_HELP)


def view_command(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Run directories, or folders of them (default: runs/).",
            metavar="PATH",
            show_default=False,
        ),
    ] = None,
    host: Annotated[
        str,
        options.opt(
            "--host",
            help="Address to listen on (default 127.0.0.1); any other needs --token.",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int,
        options.opt("--port", help=f"Port to listen on (default {DEFAULT_PORT}; 0: a free one)."),
    ] = DEFAULT_PORT,
    token: Annotated[
        str | None,
        options.opt(
            "--token",
            help="Every request must carry this token (the printed URL does); "
            "required off loopback.",
        ),
    ] = None,
    no_open: Annotated[
        bool, options.opt("--no-open", help="Do not open a browser (none opens off a terminal).")
    ] = False,
) -> None:
    """Watch runs live in the browser: runs list, charts, rollouts, search, compare.

    Serves the run directories (default runs/) until Ctrl-C; a run an eval is writing updates
    by itself.
    """
    raise typer.Exit(run_view(paths or [Path("runs")], host, port, token, open_browser=not no_open))


def run_view(
    paths: list[Path], host: str, port: int, token: str | None, *, open_browser: bool
) -> int:
    """Check the options, listen, serve until a signal; return the exit code."""
    from osmosis_run.cli.listening import ListenError, listen
    from osmosis_run.cli.streams import err

    problem = _check(paths, host, token)
    if problem is not None:
        err.print(f"error: {problem}", markup=False)
        return exit_codes.USAGE
    try:
        from osmosis_run.view.app import View, create_view_app
        from osmosis_run.view.runs import Runs
    except ModuleNotFoundError as exc:
        err.print(
            f"error: osmosis-run view needs the server extra ({exc.name} is missing): "
            "pip install 'osmosis-run[server]'",
            markup=False,
        )
        return exit_codes.USAGE
    try:
        listener = listen(host, port)
    except ListenError as exc:
        err.print(f"error: {exc}", markup=False)
        return exit_codes.USAGE
    view = View(Runs.of(paths))
    app = create_view_app(view, token=token)
    return _serve(app, view, listener, token, open_browser=open_browser)


def _check(paths: list[Path], host: str, token: str | None) -> str | None:
    """What is wrong with the options (one line), or None."""
    for path in paths:
        if not path.exists():
            return f"{path} does not exist; give run directories or folders of them"
        if not path.is_dir():
            return f"{path} is a file; give run directories or folders of them"
    if token is not None and not token.strip():
        return "--token is empty; give a token, such as the output of `openssl rand -hex 16`"
    if not _is_loopback(host) and token is None:
        return (
            f"--host {host} serves the runs to other machines, and every run's transcripts "
            "with them: give --token TOKEN (every request must carry it), or keep the default "
            "--host 127.0.0.1"
        )
    return None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _serve(app: Any, view: Any, listener: Any, token: str | None, *, open_browser: bool) -> int:
    import threading
    from urllib.parse import quote

    from osmosis_run.cli.listening import url_of, uvicorn_server
    from osmosis_run.cli.process import Interrupts, run_loop
    from osmosis_run.cli.streams import err

    server = uvicorn_server(app, keep_alive=5)
    host, port = listener.getsockname()[:2]
    url = url_of("127.0.0.1" if host in ("0.0.0.0", "::") else host, port) + "/"
    if token is not None:
        url += f"?token={quote(token, safe='')}"
    runs = view.find()

    def stop() -> None:
        server.should_exit = True

    async def main() -> None:
        with Interrupts() as interrupts, interrupts.stopping(stop):
            threading.Thread(target=view.warm, name="osmosis-view-index", daemon=True).start()
            err.print(
                f"{_PREFIX}{url}  ({len(runs)} run{'s' if len(runs) != 1 else ''}; Ctrl-C to stop)",
                markup=False,
            )
            sys.stdout.write(url + "\n")
            sys.stdout.flush()
            if open_browser and sys.stdout.isatty():
                _open(url)
            await server.serve(sockets=[listener])

    run_loop(main(), concurrency=None, who="osmosis-run view")
    return exit_codes.INTERRUPTED if server.should_exit else exit_codes.OK


def _open(url: str) -> None:
    import contextlib
    import webbrowser

    with contextlib.suppress(Exception):  # no browser here: the URL is printed
        webbrowser.open(url)
