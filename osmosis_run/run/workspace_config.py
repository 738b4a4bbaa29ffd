"""The sections of an Osmosis workspace eval config (``configs/eval/NAME.toml``), read as settings.

osmosis-ai's ``osmosis eval`` configs have ``[experiment]``, ``[evaluation]``, ``[env]``,
``[secrets]`` and ``[advanced]``; ``settings.load_config_file`` hands each of these but
``[evaluation]`` to ``read_section``, which checks it by osmosis-ai's rules and gives back
settings keys:

    [experiment]   rollout + entrypoint locate rollouts/<rollout>/<entrypoint> (its module-level
                   LocalBackend or classes are the run's); model_path, dataset, branch and
                   commit_sha are recorded
    [env]          NAME = "value", set in the environment for the run
    [secrets]      required = ["NAME", ...]: read from the environment or --secrets-file
    [advanced]     recorded

Nothing here imports user code or reads a secret: ``osmosis_run.run.workspace`` does that when
the run is prepared.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from osmosis_run.errors import ConfigError

__all__ = ["ENV_NAME", "SECRET_NAME", "locate_experiment", "read_section"]

# osmosis-ai's rules (platform/cli/shared_config.py).
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
SECRET_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_RESERVED_PREFIX = "_OSMOSIS_"
_EXPERIMENT_KEYS = ("rollout", "entrypoint", "model_path", "dataset", "branch", "commit_sha")


def read_section(path: Path, name: str, value: Any) -> dict[str, Any]:
    """Settings keys of the section ``name`` of the config file ``path``.

    Raises:
        ConfigError: the section is not a table, or breaks osmosis-ai's rules for it.
    """
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: [{name}] must be a table")
    if name == "experiment":
        return {"experiment": _experiment(path, value)}
    if name == "env":
        return {"env": _env(path, value)}
    if name == "secrets":
        return {"secrets": _secrets(path, value)}
    return {"advanced": dict(value)}


def _experiment(path: Path, table: dict[str, Any]) -> dict[str, Any]:
    for key in table:
        if key not in _EXPERIMENT_KEYS:
            raise ConfigError(
                f'{path}: unknown key "experiment.{key}"; known: {", ".join(_EXPERIMENT_KEYS)}'
            )
    for key in ("rollout", "entrypoint"):
        if key not in table:
            raise ConfigError(
                f'{path}: [experiment] needs "{key}" (the code is rollouts/<rollout>/<entrypoint>)'
            )
    for key, item in table.items():
        if not isinstance(item, str):
            raise ConfigError(
                f"{path}: experiment.{key} must be a string (got {type(item).__name__})"
            )
    return dict(table)


def _env(path: Path, table: dict[str, Any]) -> dict[str, str]:
    for key, item in table.items():
        if not ENV_NAME.match(key):
            raise ConfigError(
                f'{path}: [env] name "{key}" must match ^[A-Z_][A-Z0-9_]*$ (e.g. LOG_LEVEL)'
            )
        if key.startswith(_RESERVED_PREFIX):
            raise ConfigError(
                f'{path}: [env] name "{key}": names starting with {_RESERVED_PREFIX} are '
                "reserved by the Osmosis platform; choose another"
            )
        if not isinstance(item, str):
            raise ConfigError(
                f"{path}: env.{key} must be a string (got {type(item).__name__}); quote it: "
                f'{key} = "{item}"'
            )
    return dict(table)


def _secrets(path: Path, table: dict[str, Any]) -> list[str]:
    extra = sorted(set(table) - {"required"})
    if extra:
        raise ConfigError(
            f'{path}: [secrets] only has "required"; unknown key(s): {", ".join(extra)}'
        )
    if "required" not in table:
        raise ConfigError(f'{path}: [secrets] needs "required", e.g. required = ["OPENAI_API_KEY"]')
    names = table["required"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(
            f'{path}: secrets.required must be a list of names, e.g. required = ["OPENAI_API_KEY"]'
        )
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{path}: secrets.required names {', '.join(duplicates)} twice")
    for name in names:
        if not SECRET_NAME.match(name):
            raise ConfigError(
                f'{path}: secret name "{name}" must match ^[A-Z][A-Z0-9_]*$ (e.g. MY_SECRET)'
            )
    return list(names)


def locate_experiment(path: Path, experiment: dict[str, Any]) -> tuple[Path, Path]:
    """The rollout's folder and its entrypoint file, found from the config file's place.

    The workspace is the nearest folder above the config file that holds ``rollouts/`` (a
    workspace config lives in ``configs/eval/``).

    Raises:
        ConfigError: the rollout is not one folder name, no workspace holds it, or the
            entrypoint is missing or outside the rollout's folder.
    """
    rollout, entrypoint = experiment["rollout"], experiment["entrypoint"]
    if rollout in ("", ".", "..") or "/" in rollout or "\\" in rollout:
        raise ConfigError(
            f'{path}: experiment.rollout "{rollout}" must be one folder name under rollouts/'
        )
    config_dir = path.resolve().parent
    workspace = next(
        (folder for folder in (config_dir, *config_dir.parents) if (folder / "rollouts").is_dir()),
        None,
    )
    if workspace is None:
        raise ConfigError(
            f"{path}: no rollouts/ folder above this config; an Osmosis workspace holds "
            "rollouts/<rollout>/ and configs/eval/"
        )
    rollout_dir = (workspace / "rollouts" / rollout).resolve()
    if not rollout_dir.is_dir():
        raise ConfigError(
            f'{path}: experiment.rollout "{rollout}": no folder {rollout_dir}; check the name'
        )
    file = (rollout_dir / entrypoint).resolve()
    if not file.is_relative_to(rollout_dir):
        raise ConfigError(
            f'{path}: experiment.entrypoint "{entrypoint}" must stay inside {rollout_dir}'
        )
    if not file.is_file() or file.suffix != ".py":
        raise ConfigError(
            f'{path}: experiment.entrypoint "{entrypoint}": no Python file {file}; check the name'
        )
    return rollout_dir, file
