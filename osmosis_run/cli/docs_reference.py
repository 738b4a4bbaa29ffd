"""The command-line reference of the documentation site, generated from the Typer app itself.

mkdocs runs this file as a hook (``hooks:`` in mkdocs.yml). A line of a page that reads

    ::: osmosis-run-cli eval

becomes the reference of ``osmosis-run eval`` (``::: osmosis-run-cli`` alone: the app's own
options and its commands): the usage line, then the arguments and options panel by panel, each
as ``--help`` prints it, with its default, environment variable and config-file key. Everything
comes from the click command Typer builds (``typer.main.get_command``) and from the settings
sources the commands read (``osmosis_run.run.settings``, ``osmosis_run.server.settings``), so a
page can neither miss an option nor go stale; ``tests/test_docs_reference.py`` checks the built
site.

Why not mkdocs-click: typer 0.29 builds commands on its own vendored click, whose classes
mkdocs-click's ``isinstance`` checks do not know (its table style lists no options), and its
plain style prints click's help text without Typer's panels, the settings' defaults or the
variables.
"""

from __future__ import annotations

import functools
import html
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer.main

from osmosis_run.errors import ConfigError

__all__ = [
    "DIRECTIVE",
    "SETTINGS_DIRECTIVE",
    "Source",
    "command_markdown",
    "on_page_markdown",
    "render",
    "settings_markdown",
]

DIRECTIVE = "::: osmosis-run-cli"
PROG = "osmosis-run"
SETTINGS_DIRECTIVE = "::: osmosis-run-settings"
_DIRECTIVE_LINE = re.compile(rf"^{re.escape(DIRECTIVE)}(?:[ \t]+(\S+))?[ \t]*$", re.MULTILINE)
_SETTINGS_LINE = re.compile(rf"^{re.escape(SETTINGS_DIRECTIVE)}[ \t]+(\S+)[ \t]*$", re.MULTILINE)
# The commands that resolve EvalSettings (command line > environment > config file > defaults).
_EVAL_SOURCES = ("eval", "validate", "grade", "serve")
# What `--help` shows as a Typer extra after the text: "[default: 10; x>=0]", "[required]".
_EXTRAS = re.compile(r"\s*\[([^\[\]]*)\]\s*$")


def on_page_markdown(markdown: str, **_: Any) -> str:
    """The mkdocs hook: every directive line of a page becomes its generated reference."""
    return render(markdown)


def render(markdown: str) -> str:
    """``markdown`` with each ``::: osmosis-run-cli [COMMAND]`` line replaced by its reference.

    Raises:
        KeyError: a directive names a command the app does not have.
    """
    markdown = _DIRECTIVE_LINE.sub(lambda m: command_markdown(m.group(1)), markdown)
    return _SETTINGS_LINE.sub(lambda m: settings_markdown(m.group(1)), markdown)


def command_markdown(name: str | None) -> str:
    """The reference of ``osmosis-run NAME`` (None: of the app itself) as Markdown.

    Raises:
        KeyError: the app has no command ``name``.
    """
    root = _root()
    root_ctx = root.context_class(root, info_name=PROG, **root.context_settings)
    if name is None:
        return "\n".join(_app_lines(root, root_ctx))
    command = root.commands[name]
    ctx = command.context_class(
        command, info_name=name, parent=root_ctx, **command.context_settings
    )
    return "\n".join(_command_lines(command, ctx, Source.of(name)))


def settings_markdown(command: str) -> str:
    """Every setting of ``eval`` (or ``serve``) that a config file or a variable can give, as
    a Markdown table for a page of ``reference/`` (its options link to ``cli/COMMAND.md``):
    its option, config-file key, variables, default and help text.

    Raises:
        KeyError: the app has no command ``command``.
    """
    root = _root()
    root_ctx = root.context_class(root, info_name=PROG, **root.context_settings)
    cli = root.commands[command]
    ctx = cli.context_class(cli, info_name=command, parent=root_ctx, **cli.context_settings)
    params = {param.name: param for param in cli.get_params(ctx)}
    source = Source.of(command)
    lines = [
        "| Option | Config file | Environment | Default | Meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key in source.settings():
        param = params.get(key)
        if param is None:
            option, text, default = "(none)", "", source.default(key, _NoParam())
        else:
            text = param.get_help_record(ctx)[1]
            extras = _EXTRAS.search(text)
            text = text[: extras.start()] if extras else text
            option = f"[`{_long(param)}`](cli/{command}.md#{_anchor(param)})"
            default = source.default(key, param)
        files = ", ".join(f"`{k}`" for k in source.config_keys(key)) or "(never)"
        names = ", ".join(f"`{n}`" for n in source.variables(key, param or _NoParam())) or ""
        shown_default = f"`{default}`" if default is not None else ""
        lines.append(f"| {option} | {files} | {names} | {_cell(shown_default)} | {_cell(text)} |")
    return "\n".join(lines) + "\n"


def _long(param: Any) -> str:
    return str(max(param.opts, key=len))


@functools.cache
def _root() -> Any:
    from osmosis_run.cli import app

    return typer.main.get_command(app)


def _app_lines(root: Any, ctx: Any) -> Iterator[str]:
    yield from _usage(root, ctx)
    yield "## Commands"
    yield ""
    yield "| Command | What it does |"
    yield "| --- | --- |"
    for name, command in root.commands.items():
        summary = _cell(command.get_short_help_str(limit=200))
        yield f"| [`{PROG} {name}`]({name}.md) | {summary} |"
    yield ""
    yield from _params(root, ctx, Source.of(None))
    yield from _epilog(root)


def _command_lines(command: Any, ctx: Any, source: Source) -> Iterator[str]:
    yield from _usage(command, ctx)
    if command.help:
        yield from _clean(command.help)
        yield ""
    yield from _params(command, ctx, source)
    yield from _epilog(command)


def _usage(command: Any, ctx: Any) -> Iterator[str]:
    pieces = " ".join(command.collect_usage_pieces(ctx))
    yield "```text"
    yield f"{ctx.command_path} {pieces}".rstrip()
    yield "```"
    yield ""


def _clean(text: str) -> list[str]:
    """A help text's lines without the link back to the docs (this page is where it points)."""
    return [line for line in text.strip().splitlines() if not line.startswith("Docs: ")]


def _epilog(command: Any) -> Iterator[str]:
    lines = _clean(command.epilog or "")
    if lines:
        lines[0] = lines[0].removeprefix("Exit codes: ")
        yield "## Exit codes"
        yield ""
        yield from (_escape(line) for line in lines)
        yield ""
        yield "Every code, and what to do about it: [Exit codes](../exit-codes.md)."
        yield ""


def _params(command: Any, ctx: Any, source: Source) -> Iterator[str]:
    """One table per help panel, in the order the panels first appear (arguments first)."""
    panels: dict[str, list[Any]] = {}
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False) or param.get_help_record(ctx) is None:
            continue
        default = "Arguments" if param.param_type_name == "argument" else "Options"
        panels.setdefault(getattr(param, "rich_help_panel", None) or default, []).append(param)
    ordered = sorted(panels.items(), key=lambda item: item[0] != "Arguments")
    for panel, params in ordered:
        yield f"## {panel}"
        yield ""
        yield "| Name | Description |"
        yield "| --- | --- |"
        for param in params:
            yield _row(param, ctx, source)
        yield ""


def _row(param: Any, ctx: Any, source: Source) -> str:
    shown, text = param.get_help_record(ctx)
    if param.param_type_name == "argument":  # named as the usage line names it: [DATASET]
        from osmosis_run.cli.command import argument_metavar

        shown = argument_metavar(param)
    extras = _EXTRAS.search(text)
    notes = [part.strip() for part in extras.group(1).split(";")] if extras else []
    text = text[: extras.start()] if extras else text
    key = param.name or ""
    if not any(note.startswith("default:") for note in notes):
        default = source.default(key, param)
        if default is not None:
            notes.insert(0, f"default: {default}")
    facts = [_fact(note) for note in notes]
    variables = source.variables(key, param)
    if variables:  # the first one set wins
        facts.append("Environment: " + ", else ".join(f"`{name}`" for name in variables))
    facts += [f"Config file: `{entry}`" for entry in source.config_keys(key)]
    anchor = f'<span id="{_anchor(param)}"></span>'
    described = _cell(text) + ("<br>" + "<br>".join(facts) if facts else "")
    return f"| {anchor}<code>{_code(shown)}</code> | {described} |"


def _fact(note: str) -> str:
    name, colon, value = note.partition(":")
    if not colon:
        return _escape(note.capitalize()) if note == "required" else f"Range: `{note}`"
    return f"{name.strip().capitalize()}: `{value.strip()}`"


def _anchor(param: Any) -> str:
    longest = max(param.opts, key=len) if param.opts else param.name
    return "option-" + re.sub(r"[^a-z0-9]+", "-", str(longest).lower()).strip("-")


def _code(text: str) -> str:
    """Text for a ``<code>`` element in a table cell (a bare ``|`` would end the cell)."""
    return html.escape(text).replace("|", "&#124;")


def _escape(text: str) -> str:
    """Help text as Markdown: code spans kept, ``<``/``>``/``&`` as text outside them."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = html.escape(parts[i], quote=False)
    return "`".join(parts)


def _cell(text: str) -> str:
    return _escape(" ".join(text.split())).replace("|", "&#124;")


class Source:
    """Where a command's options come from besides the command line, read from the sources
    themselves (defaults from the settings model, variables and config keys by asking the
    environment and config-file readers which setting a variable or key fills)."""

    def __init__(
        self,
        *,
        defaults: Callable[[str], Any] | None = None,
        variables: dict[str, list[str]] | None = None,
        config_keys: dict[str, list[str]] | None = None,
        order: list[str] | None = None,
    ) -> None:
        self._order = order or []
        self._defaults = defaults
        self._variables = variables or {}
        self._config_keys = config_keys or {}

    @classmethod
    def of(cls, command: str | None) -> Source:
        """The sources of ``osmosis-run COMMAND`` (None: the app's own options: none)."""
        if command == "serve":
            return _serve_source()
        if command in _EVAL_SOURCES:
            return _eval_source(with_file=command != "grade", grade=command == "grade")
        return cls()

    def default(self, key: str, param: Any) -> str | None:
        """The default to show, when ``--help`` does not show one and it says something."""
        value = param.default
        if value is None and self._defaults is not None:
            value = self._defaults(key)
        if value is None or value is False or value == () or value == [] or value == {}:
            return None
        if getattr(param, "count", False) and value == 0:
            return None
        return str(value)

    def variables(self, key: str, param: Any) -> list[str]:
        """The environment variables that set the option (its own ``envvar`` too)."""
        own = param.envvar
        names = [own] if isinstance(own, str) else list(own or ())
        return [*names, *self._variables.get(key, [])]

    def settings(self) -> list[str]:
        """Every setting a config file or a variable can give, in the sources' order."""
        given = {*self._config_keys, *self._variables}
        return [key for key in dict.fromkeys([*self._order, *sorted(given)]) if key in given]

    def config_keys(self, key: str) -> list[str]:
        """How a config file spells the option (none: it is never read from a file)."""
        return self._config_keys.get(key, [])


@functools.cache
def _eval_source(*, with_file: bool, grade: bool) -> Source:
    from osmosis_run.run.regrade import INHERITED
    from osmosis_run.run.settings import GROUP_OF, EvalSettings

    defaults = EvalSettings().flat()

    def default(key: str) -> Any:
        if grade and key in INHERITED:
            return "the source run's"
        return defaults.get(key)

    return Source(
        defaults=default,
        variables=_eval_variables(),
        config_keys=_probe_file_keys(GROUP_OF, _eval_file_key) if with_file else {},
        order=list(GROUP_OF),
    )


@functools.cache
def _serve_source() -> Source:
    from osmosis_run.server.settings import GATEWAY_KEYS, ServeSettings

    own = [key for key in ServeSettings.model_fields if key != "gateway"] + list(GATEWAY_KEYS)
    served = ServeSettings()
    flat = {key: getattr(served, key) for key in own if key in ServeSettings.model_fields}
    flat.update({key: getattr(served.gateway, key) for key in GATEWAY_KEYS})
    variables = _serve_variables(own)
    file_keys = _probe_file_keys(own, _serve_file_key)
    # serve reads its workflow, grader and their configs as eval does (top-level keys).
    evaluated = _eval_source(with_file=True, grade=False)
    for key in ("workflow", "grader", "workflow_config", "grader_config"):
        file_keys[key] = evaluated.config_keys(key)
        variables[key] = evaluated.variables(key, _NoParam())
    order = ["workflow", "grader", "workflow_config", "grader_config", *own]
    return Source(defaults=flat.get, variables=variables, config_keys=file_keys, order=order)


class _NoParam:
    """A setting without a command-line option: no ``envvar`` and no default of its own."""

    envvar = None
    default = None


def _eval_variables() -> dict[str, list[str]]:
    """Ask eval's environment reader which setting each candidate variable fills."""
    from osmosis_run.run.settings import ENV_PREFIX, GROUP_OF, environment_layer

    candidates = [ENV_PREFIX + key.upper() for key in GROUP_OF]
    candidates += ["OSMOSIS_CHAT_COMPLETIONS_URL", "OSMOSIS_API_KEY"]
    return _probe_variables(environment_layer, candidates)


def _serve_variables(keys: list[str]) -> dict[str, list[str]]:
    """Ask serve's environment reader (private to its module) which setting each fills."""
    from osmosis_run.run.settings import ENV_PREFIX
    from osmosis_run.server import settings

    candidates = [settings.PORT_ENV, settings.API_KEY_ENV, settings.MODEL_URL_ENV]
    candidates += [settings.MODEL_API_KEY_ENV, *(ENV_PREFIX + key.upper() for key in keys)]
    return _probe_variables(settings._environment_layer, candidates)


def _probe_variables(
    layer: Callable[[dict[str, str]], Any], names: list[str]
) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name in names:
        try:
            where = layer({name: "1"}).where
        except ConfigError:
            continue
        for key, variable in where.items():
            found.setdefault(key, []).append(variable)
    return found


def _eval_file_key(folder: Path, key: str) -> list[str]:
    from osmosis_run.run.settings import config_file_layer

    path = folder / f"{key}.toml"
    path.write_text(f'{key} = "1"\n', encoding="utf-8")
    return [key] if key in config_file_layer(path).values else []


def _serve_file_key(folder: Path, key: str) -> list[str]:
    from osmosis_run.server import settings

    path = folder / f"serve-{key}.toml"
    path.write_text(f'[serve]\n{key} = "1"\n', encoding="utf-8")
    return [f"[serve] {key}"] if key in settings._file_layer(path).values else []


def _probe_file_keys(keys: Any, probe: Callable[[Path, str], list[str]]) -> dict[str, list[str]]:
    """Ask a config-file reader, key by key, whether a file may set it."""
    found: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for key in keys:
            try:
                spelled = probe(Path(folder), key)
            except ConfigError:
                continue
            if spelled:
                found[key] = spelled
    return found
