"""The ``osmosis-run`` command line: one module per command; the only user of typer and rich.

Commands import the library lazily, inside the command, so that ``osmosis-run --help`` starts
fast.
"""

from __future__ import annotations

import typer

from osmosis_run.cli.exit_codes import EXIT_CODES_HELP

app = typer.Typer(
    name="osmosis-run",
    help=(
        "Run Osmosis agent workflows and reward graders over JSONL datasets, in-process, "
        "and keep graded results plus an artifact tree for every rollout."
    ),
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """Run Osmosis agent workflows and reward graders over JSONL datasets."""


# Registering a command imports only its module's options, not the library behind it.
from osmosis_run.cli import compare as _compare  # noqa: E402
from osmosis_run.cli import eval as _eval  # noqa: E402
from osmosis_run.cli import init as _init  # noqa: E402
from osmosis_run.cli import report as _report  # noqa: E402
from osmosis_run.cli import validate as _validate  # noqa: E402

for _command in (_eval, _validate, _report, _compare, _init):
    _command.register(app)


def main() -> None:
    """Entry point of the ``osmosis-run`` console script."""
    app()
