"""``osmosis-run init``: write a small rollout project that runs offline at once.

The files come from ``cli/templates/*.tmpl`` (``string.Template``, ``${name}`` style):

    NAME/MODULE.py         a workflow, a grader and a config instance
    NAME/dataset.jsonl     ten rows
    NAME/eval.toml         the run; its paths are relative to it, and its folder is importable
    NAME/test_MODULE.py    pytest tests of the grader
    NAME/README.md, NAME/.gitignore

MODULE is ``<name>_rollout`` (``my-agent`` -> ``my_agent_rollout``): each project's module and
test file have names of their own, so two projects side by side in one folder are tested by
one ``pytest`` (no "import file mismatch") and run in one process (no module of one project
shadowing the other's), without packages or a conftest.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path
from string import Template
from typing import Annotated

import typer

from osmosis_run.cli import command, exit_codes
from osmosis_run.cli.options import opt
from osmosis_run.errors import ConfigError


def files(module: str) -> dict[str, str]:
    """What init writes for the project module ``module`` -> the template it comes from."""
    return {
        f"{module}.py": "rollout.py.tmpl",
        "dataset.jsonl": "dataset.jsonl.tmpl",
        "eval.toml": "eval.toml.tmpl",
        f"test_{module}.py": "test_rollout.py.tmpl",
        "README.md": "README.md.tmpl",
        ".gitignore": "gitignore.tmpl",
    }


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")


def register(app: typer.Typer) -> None:
    """Add the init command to ``app``."""
    command.add(app, "init", init_command, epilog=exit_codes.INIT_HELP)


def init_command(
    name: Annotated[
        str,
        typer.Argument(
            help="Project name: letters, digits, _ and -, starting with a letter; it names "
            "the folder (./NAME) and the classes in rollout.py.",
            show_default=False,
        ),
    ],
    directory: Annotated[
        Path | None, opt("--dir", help="Folder to write the project into (default ./NAME).")
    ] = None,
    force: Annotated[
        bool,
        opt(
            "--force",
            help="Write into a folder that is not empty, replacing files of the same names.",
        ),
    ] = False,
) -> None:
    """Create a rollout project that runs at once: workflow, grader, dataset, config, tests.

    Then: osmosis-run eval --config NAME/eval.toml (offline, from any folder).
    """
    from osmosis_run.cli import messages, streams

    target = directory if directory is not None else Path(name)
    try:
        written = scaffold(name, target, force=force)
    except ConfigError as exc:
        messages.print_error(exc)
        raise typer.Exit(exit_codes.USAGE) from None
    for path in written:
        streams.err.print(f"created {path}", markup=False)
    streams.err.print(
        f"next: osmosis-run eval --config {target / 'eval.toml'}  "
        f"(and: pytest {target / f'test_{module_name(name)}.py'})",
        markup=False,
    )


def scaffold(name: str, target: Path, *, force: bool = False) -> list[Path]:
    """Write the project files into ``target`` and return their paths.

    Raises:
        ConfigError: the name is not valid, or ``target`` is in the way.
    """
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f'"{name}" is not a valid project name: use letters, digits, "_" and "-", '
            "starting with a letter, at most 40 characters (for example my_agent); "
            "to choose where the project goes, use --dir"
        )
    _check_target(target, force=force)
    target.mkdir(parents=True, exist_ok=True)
    module = module_name(name)
    values = {
        "name": name,
        "cls": class_prefix(name),
        "module": module,
        "where": target.as_posix(),
    }
    written = []
    for filename, template in files(module).items():
        path = target / filename
        _write(path, render_template(template, values))
        written.append(path)
    return written


def class_prefix(name: str) -> str:
    """``"my-agent"`` and ``"my_agent"`` -> ``"MyAgent"``."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[-_]+", name) if part)


def module_name(name: str) -> str:
    """The project's module: ``"my-agent"`` -> ``"my_agent_rollout"`` (a name of its own)."""
    return re.sub(r"[-_]+", "_", name).lower() + "_rollout"


def render_template(template: str, values: dict[str, str]) -> str:
    """The text of one template with ``values`` filled in."""
    text = (resources.files("osmosis_run.cli") / "templates" / template).read_text("utf-8")
    return Template(text).substitute(values)


def _check_target(target: Path, *, force: bool) -> None:
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{target} exists and is not a folder; choose another NAME or --dir")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise ConfigError(
            f"{target} exists and is not empty; choose another NAME or --dir, or pass --force "
            "to write the project files into it"
        )


def _write(path: Path, text: str) -> None:
    """Write a whole file under a temporary name, then rename it into place."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
