"""Helpers of the settings tests (test_settings_*.py): write a config file, and resolve from
exactly the given sources (the real environment never leaks in)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from osmosis_run.run.settings import GROUP_OF, EvalSettings, resolve_settings


def write_config(folder: Path, text: str, name: str = "eval.toml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def resolve(
    tmp_path: Path,
    *,
    cli: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    file: str | None = None,
) -> EvalSettings:
    """Resolve from exactly the given sources (the real environment never leaks in)."""
    config = write_config(tmp_path, file) if file is not None else None
    return resolve_settings(cli or {}, config_file=config, environ=env or {})


def option_of(settings: EvalSettings, option: str) -> Any:
    """An option by its flat name, from the group that holds it."""
    return getattr(getattr(settings, GROUP_OF[option]), option)
