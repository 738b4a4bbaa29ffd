"""Where each setting comes from, and the one message a bad value gets (eval's and serve's).

Precedence, highest first (tested pair by pair):

    1. the command line
    2. the environment: ``OSMOSIS_RUN_<OPTION>`` (e.g. ``OSMOSIS_RUN_CONCURRENCY=8``), plus
       ``OSMOSIS_CHAT_COMPLETIONS_URL`` and ``OSMOSIS_API_KEY`` for the model endpoint
    3. the config file (``--config FILE.toml``), including an Osmosis ``[evaluation]`` table
    4. the defaults of the model

Each source is a ``Layer``: its values, and how its user wrote each key. ``resolve`` puts a
command's layers in that order and ``validated`` merges and validates them into its model
(``osmosis_run.server.settings`` calls ``resolve`` with serve's layers). A bad value is one
``ConfigError`` line, the same for every command, that names the option, where its value came
from and what it should be::

    --samples (command line): Input should be greater than or equal to 1 (got 0)
    --samples (OSMOSIS_RUN_SAMPLES): Input should be a valid integer, ... (got 'many')
    --samples (evaluation.n in configs/eval.toml): Input should be ... (got 0)

Paths in a config file are relative to the file's folder, and that folder is importable for the
file's ``module:attr`` paths: it becomes ``import_paths`` unless the file sets ``import_paths``
itself (``run.toml`` does, so a saved run imports what the original run imported).

An Osmosis workspace eval config (``configs/eval/NAME.toml``) works as a config file: its
``[experiment]``, ``[env]``, ``[secrets]`` and ``[advanced]`` are read by ``workspace_config``
(the entrypoint located, names checked) and applied when the run is prepared (``workspace``).
The API keys are never read from a file.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from osmosis_run.errors import ConfigError
from osmosis_run.run.settings.models import GROUP_OF, EvalSettings
from osmosis_run.run.workspace_config import locate_experiment, read_section

__all__ = [
    "ENV_PREFIX",
    "PATH_KEYS",
    "TABLES",
    "WORKSPACE_SECTIONS",
    "Layer",
    "command_line",
    "config_file_layer",
    "environment_layer",
    "load_config_file",
    "option_name",
    "read_toml",
    "resolve",
    "resolve_settings",
    "validated",
]

ENV_PREFIX = "OSMOSIS_RUN_"
COMMAND_LINE = "command line"
# Config-file and environment keys that differ from field names, or take special parsing.
_EVALUATION_KEYS = {
    "n": "samples",
    "limit": "limit",
    "batch_size": "concurrency",
    "pass_threshold": "pass_threshold",
    "agent_workflow_timeout_s": "agent_timeout",
    "grader_timeout_s": "grader_timeout",
}
# A config file's tables of config overrides -> the settings key that holds them.
TABLES = {
    "workflow_config": "workflow_config_overrides",
    "grader_config": "grader_config_overrides",
}
# The settings that are paths: relative to a config file's folder, absolute in run.toml.
PATH_KEYS = (
    "dataset",
    "out",
    "runs_dir",
    "html",
    "junit",
    "baseline",
    "model_cache",
    "entrypoint",
)
_NOT_FROM_FILE = ("api_key", "server_api_key", *TABLES.values())
# An Osmosis workspace eval config's sections besides [evaluation] (osmosis_run.run.workspace).
WORKSPACE_SECTIONS = ("experiment", "env", "secrets", "advanced")
# The settings an [experiment] table gives besides itself, and the keys they come from.
_FROM_EXPERIMENT = {
    "entrypoint": "experiment.entrypoint",
    "workspace_model": "experiment.model_path",
}

Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Layer:
    """One source of settings: its values, and where each came from (for messages).

    Attributes:
        values: settings keys (the flat names) -> values as the source gave them.
        where: settings key -> how its user wrote it: ``command line``, a variable's name,
            ``KEY in FILE``.
    """

    values: dict[str, Any]
    where: dict[str, str] = field(default_factory=dict)


def command_line(values: Mapping[str, Any]) -> Layer:
    """The command line's layer: every option given (None means not given)."""
    given = {key: value for key, value in values.items() if value is not None}
    return Layer(given, dict.fromkeys(given, COMMAND_LINE))


def resolve(
    model: type[Model],
    cli: Mapping[str, Any],
    *,
    config_file: Path | None,
    environ: Mapping[str, str] | None,
    file_layer: Callable[[Path], Layer],
    environment_layer: Callable[[Mapping[str, str]], Layer],
) -> Model:
    """A command's settings: defaults < config file < environment < command line.

    ``file_layer`` and ``environment_layer`` read the command's own keys and variables
    (``environ`` None: ``os.environ``); the command line is ``cli`` (None: not given).

    Raises:
        ConfigError: a source or a value is invalid; the message names the option and its
            source.
    """
    layers: list[Layer] = []
    if config_file is not None:
        layers.append(file_layer(config_file))
    layers.append(environment_layer(os.environ if environ is None else environ))
    layers.append(command_line(cli))
    return validated(model, layers)


def validated(model: type[Model], layers: Iterable[Layer]) -> Model:
    """Merge ``layers`` (each later one wins) over the model's defaults and validate them.

    Raises:
        ConfigError: a value is invalid; one line naming the option, its source and the fix.
    """
    merged: dict[str, Any] = {}
    where: dict[str, str] = {}
    for layer in layers:
        merged.update(layer.values)
        where.update(layer.where)
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_message(model, exc.errors()[0], where)) from None


def option_name(key: str) -> str:
    """A setting's command-line spelling: ``ray_batch`` -> ``--ray-batch``."""
    return "--" + key.replace("_", "-")


def _message(model: type[BaseModel], error: ErrorDetails, where: Mapping[str, str]) -> str:
    """``--KEY (SOURCE): WHAT IT SHOULD BE (got VALUE)``, a secret's value never shown."""
    key = _setting_of(model, error["loc"])
    # A validator's own ValueError: its words, without pydantic's "Value error, " before them.
    ctx = error.get("ctx") or {}
    text = str(ctx["error"]) if error["type"] == "value_error" and "error" in ctx else error["msg"]
    info = _field_of(model, key)
    shown = "[REDACTED]" if info is not None and info.repr is False else repr(error.get("input"))
    return f"{option_name(key)} ({where.get(key, 'defaults')}): {text} (got {shown})"


def _groups_of(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The model's fields that are groups of settings (``EvalSettings.run``...)."""
    groups: dict[str, type[BaseModel]] = {}
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            groups[name] = kind
    return groups


def _setting_of(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """The flat name of the setting an error is about (the key inside its group)."""
    if not loc:
        return "?"
    if len(loc) > 1 and str(loc[0]) in _groups_of(model):
        return str(loc[1])
    return str(loc[0])


def _field_of(model: type[BaseModel], key: str) -> FieldInfo | None:
    if key in model.model_fields:
        return model.model_fields[key]
    for group in _groups_of(model).values():
        if key in group.model_fields:
            return group.model_fields[key]
    return None


# --- eval's sources ---------------------------------------------------------------------------


def read_toml(path: Path) -> dict[str, Any]:
    """A config file's TOML document (every command reads config files through this).

    Raises:
        ConfigError: the file is missing, not UTF-8 text, or not TOML.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line}); save it as UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a config file into settings keys, paths made absolute.

    Raises:
        ConfigError: the file is missing, not UTF-8 text, not TOML, or has an unknown key.
    """
    return config_file_layer(path).values


def config_file_layer(path: Path) -> Layer:
    """A config file's layer: its settings keys (paths made absolute) and the keys they came
    from.

    Raises:
        ConfigError: the file is missing, not UTF-8 text, not TOML, or has an unknown key.
    """
    data = read_toml(path)
    values: dict[str, Any] = {}
    names: dict[str, str] = {}
    _refuse_unknown_sections(path, data)
    for key, value in data.items():
        if key in WORKSPACE_SECTIONS:
            section = read_section(path, key, value)
            values.update(section)
            names.update(dict.fromkeys(section, key))
        else:
            _take_file_key(values, names, path, key, value)
    if "experiment" in data and "entrypoint" not in data:  # run.toml has it located already
        _take_experiment(values, path)
        names.update(_FROM_EXPERIMENT)
    base = path.parent
    for key in PATH_KEYS:
        if isinstance(values.get(key), str) and values[key] != "-":
            values[key] = os.path.normpath(base / values[key])
    folders = values.get("import_paths", ["."])
    if isinstance(folders, list):
        values["import_paths"] = [
            os.path.abspath(base / f) if isinstance(f, str) else f for f in folders
        ]
    where = {key: f"{names.get(key, key)} in {path}" for key in values}
    return Layer(values, where)


def _take_experiment(values: dict[str, Any], path: Path) -> None:
    """Locate an Osmosis [experiment]'s entrypoint; its folder is importable, first."""
    rollout_dir, entrypoint = locate_experiment(path, values["experiment"])
    values["entrypoint"] = str(entrypoint)
    # The rollout's folder first: `main:MyWorkflow`, and the packages beside it, import.
    values["import_paths"] = [str(rollout_dir), *values.get("import_paths", ["."])]
    if "model_path" in values["experiment"]:  # the gateway's model, when there is a gateway
        values.setdefault("workspace_model", values["experiment"]["model_path"])


def _refuse_unknown_sections(path: Path, data: dict[str, Any]) -> None:
    """Name every unknown table at once, as osmosis-ai does ("Unrecognized section")."""
    unknown = [
        key
        for key, value in data.items()
        if isinstance(value, dict)
        and key not in ("evaluation", "serve", *WORKSPACE_SECTIONS, *TABLES)
        and key not in GROUP_OF
    ]
    if unknown:
        sections = ", ".join(f"[{key}]" for key in unknown)
        raise ConfigError(
            f"{path}: unknown section{'s' if len(unknown) > 1 else ''} {sections}; known: "
            "[experiment], [evaluation], [env], [secrets], [advanced], [workflow_config], "
            "[grader_config], [serve]"
        )


def _take_file_key(
    values: dict[str, Any], names: dict[str, str], path: Path, key: str, value: Any
) -> None:
    if key == "serve":
        return  # osmosis-run serve's own table (osmosis_run.server.settings reads it)
    if key == "evaluation":
        _take_evaluation(values, names, path, value)
    elif key in TABLES:
        if isinstance(value, dict):
            # A table overrides fields; its `from` (a Python keyword, so never a field name)
            # names the instance to start from.
            overrides = dict(value)
            if "from" in overrides:
                values[key] = overrides.pop("from")
            values[TABLES[key]] = overrides
            names[TABLES[key]] = key
        else:
            values[key] = value
    elif key in GROUP_OF and key not in _NOT_FROM_FILE:
        values[key] = value
    else:
        raise ConfigError(
            f'{path}: unknown key "{key}"; see `osmosis-run eval --help` for the options'
        )


def _take_evaluation(values: dict[str, Any], names: dict[str, str], path: Path, table: Any) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f'{path}: "evaluation" must be a table')
    for key, value in table.items():
        if key not in _EVALUATION_KEYS:
            raise ConfigError(
                f'{path}: unknown key "evaluation.{key}"; known: {", ".join(_EVALUATION_KEYS)}'
            )
        if key == "limit" and isinstance(value, int) and value <= 0:
            continue  # Osmosis: a limit <= 0 means all rows
        values[_EVALUATION_KEYS[key]] = value
        names[_EVALUATION_KEYS[key]] = f"evaluation.{key}"


def environment_layer(environ: Mapping[str, str]) -> Layer:
    """Settings from ``OSMOSIS_RUN_*`` variables (and the model endpoint variables).

    Raises:
        ConfigError: an ``OSMOSIS_RUN_*`` variable names no option.
    """
    values: dict[str, Any] = {}
    where: dict[str, str] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        key = name.removeprefix(ENV_PREFIX).lower()
        if key not in GROUP_OF or key.endswith("_overrides") or key in WORKSPACE_SECTIONS:
            raise ConfigError(f"environment variable {name} is not an osmosis-run option")
        values[key], where[key] = value, name
    # The model endpoint's own variables, below their OSMOSIS_RUN_* names (a blank key is none).
    url, secret = environ.get("OSMOSIS_CHAT_COMPLETIONS_URL"), environ.get("OSMOSIS_API_KEY")
    if url is not None and "chat_completions_url" not in values:
        values["chat_completions_url"] = url
        where["chat_completions_url"] = "OSMOSIS_CHAT_COMPLETIONS_URL"
    if secret and "api_key" not in values:
        values["api_key"], where["api_key"] = secret, "OSMOSIS_API_KEY"
    return Layer(values, where)


def resolve_settings(
    cli: Mapping[str, Any],
    *,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> EvalSettings:
    """Merge defaults < config file < environment < command line into ``EvalSettings``.

    Raises:
        ConfigError: a value is invalid; the message names the option and its source.
    """
    return resolve(
        EvalSettings,
        cli,
        config_file=config_file,
        environ=environ,
        file_layer=config_file_layer,
        environment_layer=environment_layer,
    )
