"""The ``osmosis-run`` command line: one module per command; the only user of typer and rich.

Commands import the library lazily, inside the command, so that ``osmosis-run --help`` starts
fast.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import Annotated, Any

import typer
import typer.core

from osmosis_run.cli.exit_codes import EXIT_CODES_HELP, INTERRUPTED, STOP_SIGNALS, USAGE
from osmosis_run.cli.links import with_docs_line


def _click_exceptions() -> Any:
    """The exceptions of the click typer runs on: its vendored copy (newer typer), or click."""
    vendored = getattr(typer.core, "_click", None)
    name = f"{vendored.__name__}.exceptions" if vendored is not None else "click.exceptions"
    return importlib.import_module(name)


_EXC = _click_exceptions()


class _UsageLine(_EXC.ClickException):  # type: ignore[misc,name-defined]
    """A usage error shown in one line, as every other error of osmosis-run is."""

    exit_code = USAGE

    def show(self, file: Any = None) -> None:
        (file or sys.stderr).write(f"error: {self.message}\n")


@contextlib.contextmanager
def _one_line() -> Iterator[None]:
    try:
        yield
    except _EXC.UsageError as exc:
        if isinstance(exc, getattr(_EXC, "NoArgsIsHelpError", ())):
            raise  # `osmosis-run` alone: the help, as asked
        command = exc.ctx.command_path if exc.ctx is not None else "osmosis-run"
        message = exc.format_message().strip()
        hint = f"`{command} --help` lists the options"
        if message.endswith("?"):  # "Did you mean 'eval'?"
            raise _UsageLine(f"{message} ({hint})") from None
        raise _UsageLine(f"{message.rstrip('.')}; {hint}") from None


class _Group(typer.core.TyperGroup):
    """The app's group: bad options and arguments of every command are one-line errors."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _one_line():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _one_line():
            return super().invoke(ctx)


_APP_SETTINGS: dict[str, Any] = {
    "name": "osmosis-run",
    "cls": _Group,
    "help": (
        "Run Osmosis agent workflows and reward graders over datasets (JSONL, CSV or Parquet, "
        "gzipped or not, or JSONL on stdin) and keep graded results plus an artifact tree for "
        "every rollout."
    ),
    "epilog": with_docs_line(EXIT_CODES_HELP, None),
    "no_args_is_help": True,
    # Every command, and every command added later, answers -h as well as --help.
    "context_settings": {"help_option_names": ["-h", "--help"]},
    "pretty_exceptions_show_locals": False,
    "rich_markup_mode": None,
}
app = typer.Typer(**_APP_SETTINGS)


def _print_version(value: bool) -> None:
    if value:
        from osmosis_run import __version__

        sys.stdout.write(f"osmosis-run {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Run Osmosis agent workflows and reward graders over datasets, and keep the results."""


# Registering a command imports only its module's options, not the library behind it.
from osmosis_run.cli import compare as _compare  # noqa: E402
from osmosis_run.cli import eval as _eval  # noqa: E402
from osmosis_run.cli import grade as _grade  # noqa: E402
from osmosis_run.cli import init as _init  # noqa: E402
from osmosis_run.cli import report as _report  # noqa: E402
from osmosis_run.cli import serve as _serve  # noqa: E402
from osmosis_run.cli import show as _show  # noqa: E402
from osmosis_run.cli import validate as _validate  # noqa: E402
from osmosis_run.cli import view as _view  # noqa: E402

for _command in (_eval, _validate, _report, _compare, _init, _grade, _show, _serve, _view):
    _command.register(app)


def app_for(args: list[str]) -> typer.Typer:
    """The app that runs ``osmosis-run ARGS``: only the invoked command's, when one is named.

    Typer builds the click objects of every registered command before it looks at the
    arguments (eval's alone are some 80 M instructions of start-up); an app holding just the
    named command and the root callback parses, helps and fails exactly as the whole app does
    for that command. Anything else (no command, a root option first, an unknown name that
    earns a "Did you mean") is the whole app's.
    """
    if not args or args[0].startswith("-"):
        return app
    for info in app.registered_commands:
        if info.name == args[0]:
            lean = typer.Typer(**_APP_SETTINGS)
            lean.registered_callback = app.registered_callback
            lean.registered_commands = [info]
            return lean
    return app


def main() -> None:
    """Entry point of the ``osmosis-run`` console script.

    Once the command has ended, a Ctrl-C or SIGTERM can no longer turn its exit code into a
    KeyboardInterrupt's (or a death by the signal): while Python's exit waits for threads and
    ``atexit`` functions of the user's code, it ends the process at once with 130; in the
    interpreter's last steps, where Python would restore the default handlers, it is ignored.
    """
    atexit.register(_last_steps)  # registered before any user code's: run after them
    try:
        app_for(sys.argv[1:])()
    finally:
        for sig in STOP_SIGNALS:
            signal.signal(sig, _exit_interrupted)


def _exit_interrupted(_signum: int, _frame: object) -> None:
    os._exit(INTERRUPTED)


def _last_steps() -> None:
    """The last ``atexit`` function: what is left is the interpreter's own teardown.

    Signals are ignored from here (see ``main``). And every object still alive is frozen out of
    the garbage collector: the teardown's final collections would otherwise walk them all for
    cycles worth nothing now (some 30 ms after a 20,000-rollout run, two thirds of the
    teardown). Python does not promise finalizers of objects alive at exit in any case.
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    gc.freeze()
