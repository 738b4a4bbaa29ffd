"""Load what a run is made of: the user's classes, their configs, the row selection.

``osmosis-run eval`` (``prepare``) and ``osmosis-run validate`` both load through here, so a
setup that validates is exactly the setup that runs.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from osmosis_run.errors import ConfigError, DatasetError
from osmosis_run.run.dataset import check_file, is_stream
from osmosis_run.run.selection import Selection
from osmosis_run.run.settings import EvalSettings
from osmosis_run.sdk.loading import load_class, load_instance
from osmosis_run.sdk.types import AgentWorkflowConfig, BaseConfig, GraderConfig
from osmosis_run.sdk.workflow import AgentWorkflow, Grader

__all__ = [
    "Components",
    "add_import_path",
    "add_import_paths",
    "check_inputs",
    "load_components",
    "load_config",
    "selection_of",
]


@dataclass(frozen=True, slots=True)
class Components:
    """The user's classes and config instances, loaded and checked."""

    workflow: type[AgentWorkflow[Any]]
    grader: type[Grader] | None
    workflow_config: AgentWorkflowConfig | None
    grader_config: GraderConfig | None


def check_inputs(settings: EvalSettings) -> str:
    """Check that a dataset and a workflow (or a ``--server``) are given, and the dataset reads.

    Returns:
        The dataset: a path (a file, or a stream such as a FIFO), or ``-`` for stdin.

    Raises:
        ConfigError: no dataset, or neither a workflow nor a server.
        DatasetError: the dataset does not exist, is a directory, or cannot be read.
    """
    if not settings.run.dataset:
        if settings.run.experiment:  # experiment.dataset names a platform dataset
            raise ConfigError(
                "no dataset: give --dataset-file FILE (or DATASET); experiment.dataset names "
                "a platform dataset, which osmosis-run does not fetch"
            )
        raise ConfigError("no dataset: give DATASET (a JSONL file, or - for stdin)")
    if not settings.run.workflow and not settings.execution.remote:
        raise ConfigError("no workflow: give --workflow module:Class")
    if settings.run.dataset != "-":
        _check_readable(settings.run.dataset)
    return settings.run.dataset


def _check_readable(dataset: str) -> None:
    """Refuse a dataset that is missing, a directory, or not readable.

    A stream (a FIFO) is not opened here: opening it would wait for its writer.
    """
    try:
        mode = os.stat(dataset).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise DatasetError(f"dataset {dataset} does not exist; check the path") from None
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {dataset}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise DatasetError(f"dataset {dataset} is a directory; give a JSONL file")
    if is_stream(dataset):
        if not os.access(dataset, os.R_OK):
            raise DatasetError(f"cannot read dataset {dataset}: Permission denied")
        return
    if not stat.S_ISREG(mode):
        raise DatasetError(f"dataset {dataset} is not a file; give a JSONL file")
    check_file(dataset)


def load_components(settings: EvalSettings) -> Components:
    """Import the workflow, the grader and their configs, with a config file's overrides.

    Raises:
        LoadError: a ``module:attr`` path does not give the object asked for.
        ConfigError: no workflow, or a ``[workflow_config]`` / ``[grader_config]`` override is
            unknown or ill-typed.
    """
    s = settings.run
    if not s.workflow:
        raise ConfigError("no workflow: give --workflow module:Class")
    add_import_paths(settings)
    return Components(
        workflow=load_class(s.workflow, AgentWorkflow, role="--workflow"),
        grader=load_class(s.grader, Grader, role="--grader") if s.grader else None,
        workflow_config=load_config(
            s.workflow_config,
            s.workflow_config_overrides,
            AgentWorkflowConfig,
            "workflow_config",
        ),
        grader_config=load_config(
            s.grader_config, s.grader_config_overrides, GraderConfig, "grader_config"
        ),
    )


def add_import_paths(settings: EvalSettings) -> None:
    """Make the settings' ``import_paths`` importable (a config file's folder, first)."""
    for folder in reversed(settings.run.import_paths):
        if folder not in sys.path:
            sys.path.insert(0, folder)


def load_config(
    ref: str | None, overrides: dict[str, Any], base: type[BaseConfig], key: str
) -> Any:
    """Load a config instance and apply a config file's ``[workflow_config]`` overrides.

    Raises:
        LoadError: ``ref`` does not name an instance of ``base``.
        ConfigError: an override names no field of the instance, or has the wrong type.
    """
    option = f"--{key.replace('_', '-')}"
    if not ref:
        if overrides:
            raise ConfigError(
                f'[{key}] overrides need an instance to override: add `from = "module:attr"` '
                f"to the table, or {option}"
            )
        return None
    instance = load_instance(ref, base, role=option)
    if not overrides:
        return instance
    known = set(type(instance).model_fields) | set(instance.model_extra or {})
    for name in overrides:
        if name not in known:
            raise ConfigError(
                f'[{key}] has no field "{name}" (fields of {type(instance).__name__}: '
                f"{', '.join(sorted(known))})"
            )
    try:
        return type(instance).model_validate({**instance.model_dump(), **overrides})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise ConfigError(f"[{key}] {where}: {error['msg']} (got {error['input']!r})") from None


def selection_of(settings: EvalSettings) -> Selection:
    """The row selection of the settings (``--rows`` and ``--shard`` are parsed already)."""
    s = settings.run
    return Selection(
        offset=s.offset,
        limit=s.limit,
        rows=s.rows,
        ids=frozenset(s.ids) if s.ids is not None else None,
        shard=s.shard,
        shuffle=s.shuffle,
        seed=s.seed,
    )


def add_import_path(folder: Path) -> None:
    """Make ``folder`` importable for ``module:attr`` paths (the cwd, a config's folder)."""
    text = os.fspath(folder.resolve())
    if text not in sys.path:
        sys.path.insert(0, text)
