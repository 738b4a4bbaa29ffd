"""How every command is added to the app: Click's help conventions, and the docs link last.

Newer typer (0.28 on) writes its own metavars: ``{name}`` for a required argument, ``<str>``,
``<int>``, ``<path>`` for option values. Click and Typer users read ``NAME``, ``[DATASET]``,
``TEXT``, ``INTEGER``, ``PATH``: ``Command`` puts those back, whatever typer the app runs on
(older typer writes them already, and is left to do so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

import typer
import typer.core

from osmosis_run.cli.links import with_docs_line

# typer's value types -> click's names for them.
_CLICK_TYPES: dict[Any, str] = {str: "TEXT", int: "INTEGER", float: "FLOAT", bool: "BOOLEAN"}


def add(app: typer.Typer, name: str, function: Callable[..., Any], *, epilog: str) -> None:
    """Register ``function`` as command ``name``; its help ends with ``epilog``, then its link."""
    app.command(name, cls=Command, epilog=with_docs_line(epilog, name))(function)


class Command(typer.core.TyperCommand):
    """A typer command whose usage line and help read as click's: ``init [OPTIONS] NAME``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.param_type_name == "option" and param.metavar is None:
                param.metavar = option_metavar(param)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """``[OPTIONS]``, then each argument as click writes it: ``NAME``, ``[DATASET]``."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                pieces.append(argument_metavar(param))
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """The Arguments section (named as in the usage line), then the Options section."""
        arguments: list[tuple[str, str]] = []
        options: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append((argument_metavar(param), record[1]))
            else:
                options.append(record)
        for title, records in (("Arguments", arguments), ("Options", options)):
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


def argument_metavar(param: Any) -> str:
    """``NAME`` when required, ``[NAME]`` when not, ``...`` after one that takes several."""
    name = (param.metavar or param.name or "").upper()
    if not param.required:
        name = f"[{name}]"
    return f"{name}..." if param.nargs != 1 else name


def option_metavar(param: Any) -> str | None:
    """Click's name of an option's value (``TEXT``, ``INTEGER RANGE``, ``[a|b]``, ``PATH``).

    None for a flag, or where typer leaves the name to click (older typer: click's own types).
    """
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    choices = descriptor.choices
    if choices is not None:
        return "[" + "|".join(str(getattr(choice, "value", choice)) for choice in choices) + "]"
    if descriptor.is_path:
        return "PATH"
    annotation = descriptor.annotation
    if descriptor.is_list:
        (annotation,) = get_args(annotation)
    name = _CLICK_TYPES.get(annotation, "TEXT")
    return f"{name} RANGE" if descriptor.is_ranged else name
