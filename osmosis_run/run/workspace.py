"""Open an Osmosis workspace eval config for a run: its [env], its [secrets], its entrypoint.

``settings.load_config_file`` has read the sections (``workspace_config``); this is what they
do when a run (or ``validate``) is prepared:

- ``[env]`` is set in this process's environment for the run (user code reads it as it would
  in the platform's rollout container).
- ``[secrets]`` ``required`` names are read from ``--secrets-file`` (a dotenv file, read by
  python-dotenv) first, then the environment; a missing one stops the run before it starts.
  Their values are set in the environment, redacted from everything the run writes, and never
  kept in the settings, ``run.toml`` or any other file.
- ``[experiment]``'s entrypoint (``rollouts/<rollout>/<entrypoint>``) is imported, and its
  module-level ``LocalBackend`` (osmosis-run's or osmosis-ai's), or else its ``AgentWorkflow``
  and ``Grader`` classes and config instances, become the run's ``--workflow``, ``--grader``,
  ``--workflow-config`` and ``--grader-config`` (those given on the command line win). Any
  other module-level osmosis_ai ``ExecutionBackend`` (a ``HarborBackend``) becomes the
  ``--workflow`` itself: it runs whole rollouts (backends/osmosis_ai.py).
"""

from __future__ import annotations

import inspect
import io
import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from osmosis_run.errors import ConfigError, UserModuleImportError
from osmosis_run.run.components import add_import_paths
from osmosis_run.run.settings import EvalSettings
from osmosis_run.sdk import _osmosis_ai
from osmosis_run.sdk.backend import LocalBackend
from osmosis_run.sdk.loading import load_module
from osmosis_run.sdk.types import AgentWorkflowConfig, GraderConfig
from osmosis_run.sdk.workflow import AgentWorkflow, Grader

if TYPE_CHECKING:
    from dotenv.parser import Binding

__all__ = ["open_workspace", "read_dotenv"]

_OPTIONS = ("workflow", "workflow_config", "grader", "grader_config")


def open_workspace(
    settings: EvalSettings, *, environ: MutableMapping[str, str] | None = None
) -> tuple[EvalSettings, tuple[str, ...]]:
    """Apply a workspace config's [env] and [secrets] and locate its classes.

    Settings without them come back as they are, and nothing is touched.

    Returns:
        The settings with the entrypoint's classes and configs filled in, and the secrets'
        values (for the run to redact).

    Raises:
        ConfigError: a secret is missing, the secrets file is unreadable or malformed, a name
            is in both [env] and [secrets], or the entrypoint gives no single workflow.
        LoadError: the entrypoint cannot be imported.
    """
    env = os.environ if environ is None else environ
    s = settings.run
    overlap = sorted(set(s.env) & set(s.secrets))
    if overlap:
        raise ConfigError(
            f"{', '.join(overlap)} in both [env] and [secrets]: each variable comes from one "
            "place; keep secrets in [secrets] only"
        )
    env.update(s.env)
    secrets = _read_secrets(s.secrets, settings.execution.secrets_file, env)
    env.update(secrets)
    if s.entrypoint:
        settings = settings.model_copy(update=_from_entrypoint(settings))
    return settings, tuple(secrets.values())


def _read_secrets(
    names: list[str], secrets_file: str | None, env: MutableMapping[str, str]
) -> dict[str, str]:
    """Each required secret's value: the secrets file's (even empty), else the environment's.

    A name the file gives is taken from it, ``NAME=`` (empty) included, as osmosis-ai takes
    it; an empty variable in the environment counts as unset, as it does for osmosis-ai.
    """
    from_file = read_dotenv(Path(secrets_file)) if secrets_file else {}
    found: dict[str, str] = {}
    missing: list[str] = []
    for name in names:
        if name in from_file:
            found[name] = from_file[name]
        elif env.get(name):
            found[name] = env[name]
        else:
            missing.append(name)
    if missing:
        where = f"in {secrets_file} or the environment" if secrets_file else "in the environment"
        raise ConfigError(
            f"[secrets] requires {', '.join(missing)}, not set {where}: export "
            f"{'them' if len(missing) > 1 else 'it'}, or give --secrets-file FILE "
            "(a dotenv file of NAME=value lines)"
        )
    return found


def read_dotenv(path: Path) -> dict[str, str]:
    """The values of a dotenv file, read by python-dotenv as ``dotenv_values`` reads them.

    Quotes, escapes in double quotes, values over several lines in quotes (a PEM key),
    ``export``, ``#`` comments and a UTF-8 BOM are python-dotenv's; ``NAME=`` is an empty
    value. ``${VAR}`` is kept as written (``interpolate=False``): osmosis-ai 0.3.8 reads its
    own ``--secrets-file`` without expanding variables, so the same file gives the same values
    to both tools.

    Raises:
        ConfigError: the file cannot be read or is not UTF-8, a line is not ``NAME=value``
            (python-dotenv cannot parse it), or a name has no ``=``; the message gives the
            line number, never the line: it may hold a secret.
    """
    from dotenv.parser import parse_stream  # imported here: start-up time

    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(
            f"cannot read secrets file {path}: not UTF-8 text; save it as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read secrets file {path}: {exc.strerror or exc}") from None
    values: dict[str, str] = {}
    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            raise ConfigError(f"{path}:{_line(binding)}: expected NAME=value (a dotenv line)")
        if binding.key is None:
            continue  # a comment, or blank lines at the end
        if binding.value is None:
            raise ConfigError(
                f'{path}:{_line(binding)}: a name without "=": write NAME=value '
                "(NAME= for an empty value)"
            )
        values[binding.key] = binding.value
    return values


def _line(binding: Binding) -> int:
    """The line a binding starts on (python-dotenv's own counts the blank lines before it)."""
    original = binding.original
    blank = original.string[: len(original.string) - len(original.string.lstrip())]
    return original.line + blank.count("\n")


def _from_entrypoint(settings: EvalSettings) -> dict[str, str]:
    """``module:attr`` paths of what the entrypoint holds, for the options not given."""
    s = settings.run
    entrypoint = Path(s.entrypoint or "")
    add_import_paths(settings)
    name = _module_name(entrypoint, s.experiment.get("entrypoint"))
    module = _import_entrypoint(name, entrypoint)
    given = {key for key in _OPTIONS if getattr(s, key) is not None}
    found = _backend_paths(module, name, entrypoint) or _class_paths(
        module, name, entrypoint, given
    )
    return {key: path for key, path in found.items() if key not in given}


def _module_name(entrypoint: Path, relative: str | None) -> str:
    """``main`` for rollouts/<rollout>/main.py; ``pkg.main`` for rollouts/<rollout>/pkg/main.py."""
    parts = Path(os.path.normpath(relative)).with_suffix("").parts if relative else ()
    parts = parts or (entrypoint.stem,)
    if not all(part.isidentifier() for part in parts):
        raise ConfigError(
            f"experiment.entrypoint {entrypoint}: not an importable module name; "
            "rename it (letters, digits and underscores)"
        )
    return ".".join(parts)


def _import_entrypoint(name: str, entrypoint: Path) -> ModuleType:
    """Import the entrypoint as ``name``; a module of that name from elsewhere is put aside."""
    cached = sys.modules.get(name)
    if cached is not None and Path(getattr(cached, "__file__", "") or "").resolve() != entrypoint:
        del sys.modules[name]  # another workspace's main.py: this one is meant
    try:
        module = load_module(name, path=str(entrypoint))
    except UserModuleImportError as exc:
        problem = _osmosis_ai.harbor_problem()  # harbor 0.25 breaks osmosis_ai's import
        if problem is not None and "harbor" in repr(exc.__cause__) + str(exc):
            raise ConfigError(f"{entrypoint}: {problem}") from exc
        raise
    if Path(getattr(module, "__file__", "") or "").resolve() != entrypoint:
        raise ConfigError(
            f'experiment.entrypoint {entrypoint}: "import {name}" finds '
            f"{getattr(module, '__file__', None)} instead; rename one of them"
        )
    return module


def _backend_paths(module: ModuleType, name: str, entrypoint: Path) -> dict[str, str]:
    """The paths of a module-level LocalBackend's parts, or of another osmosis_ai
    ``ExecutionBackend`` (a ``HarborBackend``) as the workflow (none: empty)."""
    backends = [
        attr
        for attr, obj in vars(module).items()
        if isinstance(obj, LocalBackend)
        or (not inspect.isclass(obj) and _osmosis_ai.is_osmosis_ai(obj, "ExecutionBackend"))
    ]
    if not backends:
        return {}
    if len(backends) > 1:
        raise ConfigError(
            f"{entrypoint}: several module-level backends ({', '.join(backends)}); "
            f"keep one, or pick one: --workflow {name}:{backends[0]}"
            f"{'.workflow_cls' if _is_local(getattr(module, backends[0])) else ''}"
        )
    attr = backends[0]
    backend: Any = getattr(module, attr)
    if not _is_local(backend):
        return {"workflow": f"{name}:{attr}"}  # it runs whole rollouts: loaded as the workflow
    parts = {
        "workflow": "workflow_cls",
        "workflow_config": "workflow_config",
        "grader": "grader_cls",
        "grader_config": "grader_config",
    }
    return {
        key: f"{name}:{attr}.{part}"
        for key, part in parts.items()
        if getattr(backend, part, None) is not None
    }


def _is_local(backend: object) -> bool:
    return isinstance(backend, LocalBackend) or _osmosis_ai.is_osmosis_ai(backend, "LocalBackend")


def _class_paths(
    module: ModuleType, name: str, entrypoint: Path, given: set[str]
) -> dict[str, str]:
    """The paths of the module's workflow and grader classes and config instances not given."""
    found: dict[str, str] = {}
    if "workflow" not in given:
        workflow = _one(module, AgentWorkflow, entrypoint, option="--workflow", classes=True)
        if workflow is None:
            raise ConfigError(
                f"{entrypoint}: no LocalBackend and no AgentWorkflow subclass at module level; "
                "define one there, or give --workflow module:Class"
            )
        found["workflow"] = f"{name}:{workflow}"
    wanted: list[tuple[str, type, bool]] = [
        ("grader", Grader, True),
        ("workflow_config", AgentWorkflowConfig, False),
        ("grader_config", GraderConfig, False),
    ]
    for key, base, classes in wanted:
        if key in given:
            continue
        option = "--" + key.replace("_", "-")
        attr = _one(module, base, entrypoint, option=option, classes=classes)
        if attr is not None:
            found[key] = f"{name}:{attr}"
    return found


def _one(
    module: ModuleType, base: type, entrypoint: Path, *, option: str, classes: bool
) -> str | None:
    """The one module-level subclass (or instance) of ``base`` or osmosis_ai's counterpart."""
    other = _osmosis_ai.counterpart(base)
    bases = (base,) if other is None else (base, other)
    if classes:
        names = [
            attr
            for attr, obj in vars(module).items()
            if inspect.isclass(obj)
            and issubclass(obj, bases)
            and obj not in bases
            and not inspect.isabstract(obj)
        ]
        own = [attr for attr in names if getattr(module, attr).__module__ == module.__name__]
        names = own or names
    else:
        names = [attr for attr, obj in vars(module).items() if isinstance(obj, bases)]
    if len(names) > 1:
        raise ConfigError(
            f"{entrypoint}: several {base.__name__} {'classes' if classes else 'instances'} "
            f"({', '.join(names)}); pick one with {option} {module.__name__}:{names[0]}"
        )
    return names[0] if names else None
