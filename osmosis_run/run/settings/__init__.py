"""The settings of the commands that run rollouts: the models, their sources, run.toml.

``models`` holds ``EvalSettings`` and its groups (what each option is and how its forms parse),
``sources`` where each value comes from (command line > environment > config file > defaults)
and the one message a bad value gets, which serve's settings share
(``osmosis_run.server.settings``), and ``toml`` the resolved settings written as ``run.toml``.
"""

from __future__ import annotations

from osmosis_run.run.settings.models import (
    GROUP_OF,
    GROUPS,
    UNLIMITED,
    AfterRun,
    Concurrency,
    ConcurrencyLimit,
    EvalSettings,
    Execution,
    Gate,
    GatewayOptions,
    Output,
    RunSpec,
    WorkerCount,
    WorkerMemory,
    WorkerRecycle,
    parse_concurrency,
    parse_error_budget,
    parse_gate,
)
from osmosis_run.run.settings.sources import (
    ENV_PREFIX,
    Layer,
    command_line,
    config_file_layer,
    environment_layer,
    load_config_file,
    option_name,
    read_toml,
    resolve,
    resolve_settings,
    validated,
)
from osmosis_run.run.settings.toml import settings_to_toml

__all__ = [
    "ENV_PREFIX",
    "GROUPS",
    "GROUP_OF",
    "UNLIMITED",
    "AfterRun",
    "Concurrency",
    "ConcurrencyLimit",
    "EvalSettings",
    "Execution",
    "Gate",
    "GatewayOptions",
    "Layer",
    "Output",
    "RunSpec",
    "WorkerCount",
    "WorkerMemory",
    "WorkerRecycle",
    "command_line",
    "config_file_layer",
    "environment_layer",
    "load_config_file",
    "option_name",
    "parse_concurrency",
    "parse_error_budget",
    "parse_gate",
    "read_toml",
    "resolve",
    "resolve_settings",
    "settings_to_toml",
    "validated",
]
