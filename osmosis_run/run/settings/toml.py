"""The resolved settings written back as a config file: a run's ``run.toml``.

``osmosis-run eval --config run.toml`` reproduces the run: every option but the per-invocation
switches and the keys, paths absolute, tables written as a config file writes them.
"""

from __future__ import annotations

import os
from pathlib import Path

import tomli_w

from osmosis_run.run.settings.models import EvalSettings
from osmosis_run.run.settings.sources import PATH_KEYS, TABLES, WORKSPACE_SECTIONS

__all__ = ["settings_to_toml"]

# Per-invocation switches that a saved configuration must not carry.
_NOT_SAVED = {"api_key", "server_api_key", "fresh", "retry_failed", "dry_run", "jsonl"}


def settings_to_toml(settings: EvalSettings, *, run_dir: Path) -> str:
    """The resolved settings as a config file that reproduces the run (never the API key)."""
    data = {k: v for k, v in settings.flat().items() if v is not None and k not in _NOT_SAVED}
    for key in PATH_KEYS:
        if key in data and data[key] != "-":
            data[key] = os.path.abspath(data[key])
    data["out"] = os.path.abspath(run_dir)
    data["import_paths"] = [os.path.abspath(folder) for folder in data["import_paths"]]
    data["fail_under"] = [f"{g['metric']}={g['threshold']}" for g in data["fail_under"]]
    for section in WORKSPACE_SECTIONS:  # written as the workspace config writes them
        value = data.pop(section, None)
        if value:
            data[section] = {"required": value} if section == "secrets" else value
    for table, overrides_key in TABLES.items():
        overrides = data.pop(overrides_key)
        path = data.pop(table, None)
        if overrides:
            data[table] = {"from": path, **overrides} if path else overrides
        elif path:
            data[table] = path
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    header = "# The resolved configuration of this run: osmosis-run eval --config run.toml\n"
    return header + tomli_w.dumps({**scalars, **tables})
