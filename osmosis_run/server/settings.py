"""The options of ``osmosis-run serve`` as one model, and where each value comes from.

Precedence, highest first, as eval's (``osmosis_run.run.settings.sources.resolve`` merges these
layers and words a bad value as it does for eval): the command line; the environment
(``_OSMOSIS_ROLLOUT_PORT`` for the port, ``OSMOSIS_ROLLOUT_API_KEY`` for the key clients must
send, as the SDK's scaffold reads them; ``OSMOSIS_CHAT_COMPLETIONS_URL`` and ``OSMOSIS_API_KEY``
for the model endpoint, as eval reads them); the ``[serve]`` table of the config file (the same
TOML as eval: its workflow, grader and configs are the served ones); the defaults below. The
keys are never read from a file. ``out`` and ``model_cache`` in the file are relative to the
file's folder.

The model gateway (``--chat-completions-url`` and eval's gateway options, with eval's names and
meanings, validated by eval's own ``GatewayOptions``): with an endpoint, the server runs the
gateway for the rollouts it serves; a gateway option without one is a usage error
(``check_gateway``).

Worker processes (``--workers N``, ``--max-worker-memory``, ``--worker-recycle``: eval's
``--backend processes`` options, with eval's types and messages, and eval's variables
``OSMOSIS_RUN_WORKERS``, ``OSMOSIS_RUN_MAX_WORKER_MEMORY``, ``OSMOSIS_RUN_WORKER_RECYCLE``): with
``workers``, the served rollouts run in that many worker processes; without it, in the server's
own process. A limit of the workers without workers is a usage error (``check_workers``), from
any source, as eval's without ``--backend processes``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from osmosis_run.errors import ConfigError
from osmosis_run.run.settings import (
    ENV_PREFIX,
    UNLIMITED,
    ConcurrencyLimit,
    GatewayOptions,
    Layer,
    WorkerCount,
    WorkerMemory,
    WorkerRecycle,
    option_name,
    read_toml,
    resolve,
)

__all__ = [
    "API_KEY_ENV",
    "GATEWAY_KEYS",
    "MODEL_API_KEY_ENV",
    "MODEL_URL_ENV",
    "PORT_ENV",
    "ServeSettings",
    "check_gateway",
    "check_workers",
    "resolve_serve_settings",
]

PORT_ENV = "_OSMOSIS_ROLLOUT_PORT"
API_KEY_ENV = "OSMOSIS_ROLLOUT_API_KEY"
MODEL_URL_ENV = "OSMOSIS_CHAT_COMPLETIONS_URL"  # eval's
MODEL_API_KEY_ENV = "OSMOSIS_API_KEY"  # eval's
# eval's gateway options that serve takes (no --no-gateway: without an endpoint there is none;
# no workspace model: serve reads no Osmosis workspace config).
GATEWAY_KEYS = tuple(
    key for key in GatewayOptions.model_fields if key not in ("no_gateway", "workspace_model")
)
# The limits of worker processes, which need --workers.
_WORKER_LIMITS = ("max_worker_memory", "worker_recycle")
_SECRET_SOURCES = {
    "api_key": f"--api-key or {API_KEY_ENV}",
    "model_api_key": f"--model-api-key or {MODEL_API_KEY_ENV}",
}
_SECRETS = tuple(_SECRET_SOURCES)
DEFAULT_PORT = 8000
_TABLE = "serve"
# How long a connection with no request under way stays open. Idle connections hold descriptors
# and memory, so the default is short, as uvicorn's (5 s): a trainer's own client closes its
# idle connections after 5 s (httpx, which osmosis-ai's RolloutClient uses), so 10 s leaves the
# client to close first (no request races a closing connection), and a long poll is not idle (no
# clock runs while the app has a request). Behind a load balancer, set it above the balancer's
# idle timeout: osmosis-ai 0.3.8's scaffold uses 2160 s, for the Osmosis platform's balancer
# (2100 s), which otherwise reuses a connection the server is closing (a 502).
KEEP_ALIVE_S = 10


class ServeSettings(BaseModel):
    """Everything ``osmosis-run serve`` needs besides the workflow and grader.

    Attributes:
        host: the address to listen on.
        port: the port (0: any free port).
        api_key: the Bearer key clients must send (None: no auth).
        result_wait: seconds a poll waits for a status change.
        lease: seconds a rollout lives without a poll.
        retention: seconds a final result stays pollable.
        concurrency: rollouts executing at once (``"unlimited"``, or None: the workflow
            config's limit, else 4).
        out: the run directory (None: ``runs/serve-<UTC time>-<pid>``).
        keep_alive: seconds a connection with no request under way stays open.
        workers: worker processes that run the served rollouts (None: the server's process).
        max_worker_memory: bytes of resident memory a worker may hold (None: no limit).
        worker_recycle: rollouts after which a worker is replaced (None: never).
        chat_completions_url: the model endpoint the gateway forwards to (None: no gateway;
            rollouts keep the URL their caller sent).
        model_api_key: the endpoint's key (the upstream provider's; never written).
        gateway: the gateway's options (eval's ``GatewayOptions``); flat keys (``rpm``...)
            are put in it, as ``EvalSettings`` does.
    """

    # model_api_key: pydantic < 2.10 reserves the "model_" prefix otherwise (as GatewayOptions).
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    host: str = "127.0.0.1"
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)
    api_key: SecretStr | None = Field(None, repr=False)
    result_wait: float = Field(30.0, gt=0)
    lease: float = Field(120.0, gt=0)
    retention: float = Field(900.0, ge=0)
    concurrency: ConcurrencyLimit = None
    out: str | None = None
    keep_alive: int = Field(KEEP_ALIVE_S, ge=1)  # whole seconds, as uvicorn takes it
    workers: WorkerCount = None
    max_worker_memory: WorkerMemory = None
    worker_recycle: WorkerRecycle = None
    chat_completions_url: str | None = None
    model_api_key: SecretStr | None = Field(None, repr=False)
    gateway: GatewayOptions = Field(default_factory=GatewayOptions)

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """Put the gateway's flat keys (``rpm``, ``model_cache``...) into ``gateway``."""
        if not isinstance(data, Mapping) or not any(key in GATEWAY_KEYS for key in data):
            return data
        nested = {key: value for key, value in data.items() if key not in GATEWAY_KEYS}
        given = nested.get("gateway")
        if isinstance(given, GatewayOptions):
            given = {key: getattr(given, key) for key in given.model_fields_set}
        flat = {key: value for key, value in data.items() if key in GATEWAY_KEYS}
        nested["gateway"] = {**(given if isinstance(given, Mapping) else {}), **flat}
        return nested

    @field_validator("chat_completions_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return value.strip()

    @field_validator("result_wait", "lease", "retention")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value

    @field_validator("api_key", "model_api_key")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("must not be blank")
        return value

    def limit(self) -> int | None:
        """``concurrency`` for the server: None to use the backend's, 0 for no limit."""
        if self.concurrency == UNLIMITED:
            return 0
        return self.concurrency if isinstance(self.concurrency, int) else None

    def api_key_value(self) -> str | None:
        """The key itself (None when not given)."""
        return self.api_key.get_secret_value() if self.api_key is not None else None

    def model_api_key_value(self) -> str | None:
        """The model endpoint's key itself (None when not given)."""
        key = self.model_api_key
        return key.get_secret_value() if key is not None else None


# What a [serve] table may set: every option but the keys, the gateway's by their flat names.
_FILE_KEYS = (
    *(key for key in ServeSettings.model_fields if key not in (*_SECRETS, "gateway")),
    *GATEWAY_KEYS,
)


def _file_layer(path: Path) -> Layer:
    """The ``[serve]`` table of a config file (the rest is eval's, read by its loader).

    Raises:
        ConfigError: the file cannot be read, or its table has an unknown key or the API key.
    """
    table = read_toml(path).get(_TABLE, {})
    if not isinstance(table, dict):
        raise ConfigError(f'{path}: "{_TABLE}" must be a table')
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key in _SECRETS:
            raise ConfigError(
                f"{path}: serve.{key} is never read from a file; use {_SECRET_SOURCES[key]}"
            )
        if key not in _FILE_KEYS:
            raise ConfigError(f'{path}: unknown key "serve.{key}"; known: {", ".join(_FILE_KEYS)}')
        values[key] = value
    for key in ("out", "model_cache"):
        if isinstance(values.get(key), str):
            values[key] = os.path.normpath(path.parent / values[key])
    return Layer(values, {key: f"{_TABLE}.{key} in {path}" for key in values})


def _environment_layer(environ: Mapping[str, str]) -> Layer:
    values: dict[str, Any] = {}
    where: dict[str, str] = {}
    for key, name in (
        ("port", PORT_ENV),
        ("api_key", API_KEY_ENV),
        ("chat_completions_url", MODEL_URL_ENV),
        ("model_api_key", MODEL_API_KEY_ENV),
        *((key, ENV_PREFIX + key.upper()) for key in ("workers", *_WORKER_LIMITS)),
    ):
        if environ.get(name):
            values[key], where[key] = environ[name], name
    return Layer(values, where)


def resolve_serve_settings(
    cli: Mapping[str, Any],
    *,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServeSettings:
    """Merge defaults < ``[serve]`` table < environment < command line.

    Raises:
        ConfigError: a value is invalid (the message names the option and its source), a
            gateway option is given without an endpoint (``check_gateway``), or a limit of the
            workers without workers (``check_workers``).
    """
    settings = resolve(
        ServeSettings,
        cli,
        config_file=config_file,
        environ=environ,
        file_layer=_file_layer,
        environment_layer=_environment_layer,
    )
    check_gateway(settings, key_given="model_api_key" in cli and cli["model_api_key"] is not None)
    check_workers(settings)
    return settings


def check_gateway(settings: ServeSettings, *, key_given: bool = False) -> None:
    """Gateway options without an endpoint are a usage error rather than ignored (as eval's
    ``check_gateway_options``).

    ``key_given``: ``--model-api-key`` was on the command line (``OSMOSIS_API_KEY`` in the
    environment alone is eval's too, and not an error).

    Raises:
        ConfigError: a gateway option (or ``--model-api-key``) without
            ``--chat-completions-url``.
    """
    if settings.chat_completions_url is not None:
        return
    given = ["--model-api-key"] if key_given else []
    fields = settings.gateway.model_fields_set
    given += [option_name(key) for key in GATEWAY_KEYS if key in fields]
    if given:
        verb = "needs" if len(given) == 1 else "need"
        raise ConfigError(
            f"{' and '.join(given)} {verb} the model gateway, but there is no model endpoint "
            "(--chat-completions-url)"
        )


def check_workers(settings: ServeSettings) -> None:
    """``--max-worker-memory`` or ``--worker-recycle`` without ``--workers`` is a usage error
    rather than ignored (as eval's without ``--backend processes``).

    Raises:
        ConfigError: a limit of the workers without workers.
    """
    if settings.workers is not None:
        return
    given = [option_name(key) for key in _WORKER_LIMITS if getattr(settings, key) is not None]
    if given:
        verb = "is an option" if len(given) == 1 else "are options"
        raise ConfigError(f"{' and '.join(given)} {verb} of worker processes; add --workers N")
