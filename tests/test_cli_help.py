"""Every command and option of the app has help text (tests/test_docs_reference.py holds the
reference pages to naming each of them)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer.main

from osmosis_run.cli import app

# typer may bring its own copy of click, so the tree is walked by duck typing, not isinstance.
Command = Any
Param = Any


def walk(command: Command, path: str = "osmosis-run") -> Iterator[tuple[str, Command]]:
    """Every command of the tree under ``command``, with its full name."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from walk(sub, f"{path} {name}")


def commands() -> list[tuple[str, Command]]:
    return list(walk(typer.main.get_command(app)))


def param_name(param: Param) -> str:
    return str(param.opts[0] if param.opts else param.name)


def long_names(param: Param) -> list[str]:
    if param.param_type_name != "option":
        return []
    return [name for name in param.opts if name.startswith("--") and name != "--help"]


def mentioned(name: str, text: str) -> bool:
    """``name`` occurs as a whole word ("--limit" is not mentioned by "--limits")."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def test_the_tree_has_the_commands() -> None:
    names = {path for path, _ in commands()}
    assert {"osmosis-run eval", "osmosis-run validate", "osmosis-run init"} <= names


def test_every_command_and_option_has_help() -> None:
    missing = []
    for path, command in commands():
        if not (command.help or command.short_help or "").strip():
            missing.append(path)
        for param in command.params:
            # typer gives arguments a help text too (click's own arguments have none).
            if not (getattr(param, "help", None) or "").strip():
                missing.append(f"{path} {param_name(param)}")
    assert missing == [], f"these have no help text: {', '.join(missing)}"


# The middle of each message is click's own wording, which varies between typer versions.
USAGE_ERRORS = [
    (
        ["eval", "d.jsonl", "--limit", "1e23"],
        r"error: Invalid value for '--limit': .*integer.*; `osmosis-run eval --help` lists the "
        r"options",
    ),
    (
        ["eval", "d.jsonl", "--bogus"],
        r"error: No such option: --bogus.*; `osmosis-run eval --help` lists the options",
    ),
    (
        ["evl"],
        r"error: No such command 'evl'\. Did you mean 'eval'\? \(`osmosis-run --help` lists "
        r"the options\)",
    ),
]


def test_usage_errors_are_one_line_and_exit_2(cli: Any) -> None:
    for args, pattern in USAGE_ERRORS:
        result = cli(*args)
        assert (result.exit_code, result.stdout) == (2, ""), args
        assert re.fullmatch(pattern + "\n", result.stderr), result.stderr


def test_the_bare_command_still_shows_its_help(cli: Any) -> None:
    result = cli()
    assert result.exit_code == 2
    assert (result.stdout + result.stderr).startswith("Usage: osmosis-run [OPTIONS] COMMAND")
