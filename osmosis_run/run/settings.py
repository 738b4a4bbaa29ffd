"""The options of ``osmosis-run eval`` as one model, and where each value comes from.

``EvalSettings`` groups the options by what they are about: ``run`` (what the run is, the
inputs of its fingerprint), ``execution`` (how its rollouts execute), ``output`` (where it
writes and how it resumes) and ``after`` (how it is judged and reported). Users never see the
groups: every option keeps its flat name on the command line, in ``OSMOSIS_RUN_*`` variables,
in config files and ``run.toml``, and in ``EvalSettings.model_validate({"samples": 2})``.

Precedence, highest first (tested pair by pair):

    1. the command line
    2. the environment: ``OSMOSIS_RUN_<OPTION>`` (e.g. ``OSMOSIS_RUN_CONCURRENCY=8``), plus
       ``OSMOSIS_CHAT_COMPLETIONS_URL`` and ``OSMOSIS_API_KEY`` for the model endpoint
    3. the config file (``--config FILE.toml``), including an Osmosis ``[evaluation]`` table
    4. the defaults below

Paths in a config file are relative to the file's folder, and that folder is importable for the
file's ``module:attr`` paths: it becomes ``import_paths`` unless the file sets ``import_paths``
itself (``run.toml`` does, so a saved run imports what the original run imported).

An Osmosis workspace eval config (``configs/eval/NAME.toml``) works as a config file: its
``[experiment]``, ``[env]``, ``[secrets]`` and ``[advanced]`` are read by ``workspace_config``
(the entrypoint located, names checked) and applied when the run is prepared (``workspace``).

Every option form is parsed as the model is validated (from any source, and in
``EvalSettings.model_validate``), so a bad value is a ``ConfigError`` before anything loads:
``rows`` ("3,7,10-20") becomes inclusive ranges, ``shard`` ("I/N") a pair, ``fail_under`` gates,
``max_error_rate`` a count or a fraction, ``ids`` and ``import_paths`` lists. ``concurrency`` is
a positive integer, ``"unlimited"`` (the one spelling of no limit: ``0``, ``"unlimited"``,
``"none"`` and ``"inf"`` all become it) or None (not given: the workflow config's limit, else
the default). The API key is a ``SecretStr``: never in a repr, a dump or ``run.toml``; the
engine reads it with ``get_secret_value()``. ``server`` (``--server URL``) has a rollout server
run every rollout; its key ``server_api_key`` (``--server-api-key``,
``OSMOSIS_RUN_SERVER_API_KEY``) is a secret too, and like the API key never read from a file.
"""

from __future__ import annotations

import math
import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import tomli_w
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from osmosis_run.errors import ConfigError
from osmosis_run.results.gates import Gate
from osmosis_run.run.selection import parse_rows_spec, parse_shard
from osmosis_run.run.workspace_config import locate_experiment, read_section

__all__ = [
    "ENV_PREFIX",
    "GROUP_OF",
    "UNLIMITED",
    "AfterRun",
    "Concurrency",
    "EvalSettings",
    "Execution",
    "GatewayOptions",
    "Output",
    "RunSpec",
    "Gate",
    "load_config_file",
    "parse_concurrency",
    "parse_error_budget",
    "parse_gate",
    "resolve_settings",
    "settings_to_toml",
]

ENV_PREFIX = "OSMOSIS_RUN_"
UNLIMITED: Literal["unlimited"] = "unlimited"
# Rollouts in flight: a positive count, UNLIMITED, or None (not given).
Concurrency = int | Literal["unlimited"] | None
# 0 never gets this far (it becomes UNLIMITED): a count below 0 is what the bound refuses.
_Count = Annotated[int, Field(ge=0)]


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class RunSpec(_Group):
    """What the run is: its inputs and its selection (what the fingerprint is made from)."""

    dataset: str | None = None
    workflow: str | None = None
    grader: str | None = None
    workflow_config: str | None = None
    grader_config: str | None = None
    workflow_config_overrides: dict[str, Any] = Field(default_factory=dict)
    grader_config_overrides: dict[str, Any] = Field(default_factory=dict)
    import_paths: list[str] = Field(default_factory=list)
    samples: int = Field(1, ge=1)
    limit: int | None = Field(None, ge=0, le=sys.maxsize)
    offset: int = Field(0, ge=0, le=sys.maxsize)
    rows: tuple[tuple[int, int], ...] | None = None
    ids: list[str] | None = None
    shuffle: bool = False
    seed: int = 0
    shard: tuple[int, int] | None = None
    # An Osmosis workspace eval config (see osmosis_run.run.workspace): the entrypoint file whose
    # module-level LocalBackend or classes the run uses, [experiment] and [advanced] as given
    # (recorded), [env] (set for the run) and the [secrets] names (values never kept here).
    entrypoint: str | None = None
    experiment: dict[str, Any] = Field(default_factory=dict)
    advanced: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    secrets: list[str] = Field(default_factory=list)

    @field_validator("limit", "offset", mode="before")
    @classmethod
    def _whole_rows(cls, value: Any) -> Any:
        # TOML reads `limit = 1e23` as a float: say that it is too large, not "not a string".
        if isinstance(value, float) and math.isfinite(value) and abs(value) > sys.maxsize:
            raise ValueError(f"must be at most {sys.maxsize}")
        return value

    @field_validator("rows", mode="before")
    @classmethod
    def _rows_spec(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_rows_spec(value) if value.strip() else None
        return value

    @field_validator("shard", mode="before")
    @classmethod
    def _shard_spec(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_shard(value) if value.strip() else None
        return value

    @field_validator("import_paths", mode="before")
    @classmethod
    def _folders(cls, value: Any) -> Any:
        if isinstance(value, str):  # OSMOSIS_RUN_IMPORT_PATHS: like PATH
            return [part for part in value.split(os.pathsep) if part]
        return value

    @field_validator("ids", mode="before")
    @classmethod
    def _id_list(cls, value: Any) -> Any:
        if isinstance(value, str):  # --ids a,b,c
            return [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            return [str(part) for part in value]
        return value

    @field_serializer("rows")
    def _rows_text(self, rows: tuple[tuple[int, int], ...] | None) -> str | None:
        if rows is None:
            return None
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in rows)

    @field_serializer("shard")
    def _shard_text(self, shard: tuple[int, int] | None) -> str | None:
        return None if shard is None else f"{shard[0]}/{shard[1]}"


class Execution(_Group):
    """How the rollouts execute: how many at once, their deadlines and retries, the endpoint."""

    concurrency: _Count | Literal["unlimited"] | None = None
    agent_timeout: float | None = Field(None, gt=0)
    grader_timeout: float | None = Field(None, gt=0)
    retries: int = Field(0, ge=0)
    chat_completions_url: str | None = None
    api_key: SecretStr | None = Field(None, repr=False, exclude=True)
    # Where attempts run (backends/): in this process, or on a Ray actor pool. Not part of the
    # fingerprint: a run started locally resumes on Ray and back.
    backend: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    ray_actors: int | None = Field(None, ge=1)
    ray_actor_cpus: float = Field(0.0, ge=0)
    ray_batch: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    ray_shared_fs: bool = False
    ray_ready_timeout: float = Field(120.0, gt=0)
    server: str | None = None
    server_api_key: SecretStr | None = Field(None, repr=False, exclude=True)
    secrets_file: str | None = None  # a dotenv file with the [secrets] values (--secrets-file)

    def api_key_value(self) -> str | None:
        """The API key itself, for the one place that sends it (None when not given)."""
        return self.api_key.get_secret_value() if self.api_key is not None else None

    def server_api_key_value(self) -> str | None:
        """The rollout server's key (sent as Bearer; None when not given)."""
        key = self.server_api_key
        return key.get_secret_value() if key is not None else None

    @field_validator("server")
    @classmethod
    def _server_url(cls, value: str | None) -> str | None:
        """A rollout server's base URL: http(s)://host[:port][/prefix], without a trailing /."""
        if value is None or not value.strip():
            return None
        url = value.strip().rstrip("/")
        scheme, sep, rest = url.partition("://")
        if not sep or scheme.lower() not in ("http", "https") or not rest or "?" in url:
            raise ValueError("must be an http:// or https:// URL, such as http://127.0.0.1:8000")
        return url

    @field_validator("ray_batch", mode="before")
    @classmethod
    def _batch_or_auto(cls, value: Any) -> Any:
        """``auto`` (in any case) or a whole number, also as text (command line, environment)."""
        if isinstance(value, str):
            text = value.strip().lower()
            if text == "auto":
                return "auto"
            if text.removeprefix("-").isdigit():
                return int(text)
            raise PydanticCustomError(
                "ray_batch", "Input should be a whole number of rollouts (1 or more) or 'auto'"
            )
        return value

    @field_validator("concurrency", mode="before")
    @classmethod
    def _one_unlimited(cls, value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # TOML's `concurrency = 0.0`
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            value = parse_concurrency(value)
        return value


class Output(_Group):
    """Where the run writes, how it resumes, and what its results lines and stdout carry."""

    out: str | None = None
    runs_dir: str = "runs"
    fresh: bool = False
    retry_failed: bool = False
    jsonl: bool = False
    no_messages: bool = False


class AfterRun(_Group):
    """How the run is judged and reported: the pass threshold, gates, budget, report files."""

    pass_threshold: float = 1.0
    fail_under: list[Gate] = Field(default_factory=list)
    max_error_rate: float | int = 0
    group_by: str | None = None
    html: str | None = None
    junit: str | None = None
    baseline: str | None = None
    fail_on_regression: float | None = None
    dry_run: bool = False

    @field_validator("pass_threshold")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("max_error_rate", mode="before")
    @classmethod
    def _error_budget(cls, value: Any) -> Any:
        return parse_error_budget(value) if isinstance(value, str | int | float) else value

    @field_validator("fail_under", mode="before")
    @classmethod
    def _gates(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, dict):  # a config file's table: {pass_rate = 0.9}
            return [parse_gate(f"{k}={v}") for k, v in value.items()]
        if isinstance(value, list):
            return [parse_gate(g) if isinstance(g, str) else g for g in value]
        return value

    @field_validator("group_by")
    @classmethod
    def _metadata_key(cls, value: str | None) -> str | None:
        if (value is not None and not value.startswith("metadata.")) or value == "metadata.":
            raise ValueError('must look like "metadata.KEY"')
        return value


class GatewayOptions(_Group):
    """The model gateway: whether it runs, what it rewrites, how it paces, records and caches."""

    # model_retries, model_cache...: pydantic < 2.10 reserves the "model_" prefix otherwise.
    model_config = ConfigDict(extra="forbid", validate_default=True, protected_namespaces=())

    no_gateway: bool = False
    model: str | None = None
    # An Osmosis workspace's experiment.model_path: the gateway's model when --model is not
    # given; without a gateway (no endpoint, --no-gateway) it is only recorded.
    workspace_model: str | None = None
    token_price: tuple[float, float] | None = None
    no_record_calls: bool = False
    model_retries: int = Field(5, ge=0)
    max_model_connections: int = Field(256, ge=1)
    rpm: float | None = Field(None, gt=0)
    tpm: float | None = Field(None, gt=0)
    model_cache: str | None = None
    model_cache_mode: Literal["read-write", "read-only", "refresh"] = "read-write"
    no_preflight: bool = False

    @field_validator("token_price", mode="before")
    @classmethod
    def _price_pair(cls, value: Any) -> Any:
        if isinstance(value, str):  # --token-price 2.5,10
            parts = [part.strip() for part in value.split(",")]
            try:
                prices = [float(part) for part in parts]
            except ValueError:
                prices = []
            if len(prices) != 2 or not all(math.isfinite(p) and p >= 0 for p in prices):
                raise ValueError(
                    "expected PROMPT,COMPLETION: two prices in USD per million tokens, "
                    "such as 2.5,10"
                )
            return tuple(prices)
        return value

    @field_serializer("token_price")
    def _price_text(self, price: tuple[float, float] | None) -> str | None:
        return None if price is None else f"{price[0]:g},{price[1]:g}"


_GROUPS: dict[str, type[_Group]] = {
    "run": RunSpec,
    "execution": Execution,
    "output": Output,
    "after": AfterRun,
    "gateway": GatewayOptions,
}
# Every option's flat name (CLI, OSMOSIS_RUN_*, config-file key) -> the group that holds it.
GROUP_OF = {key: group for group, model in _GROUPS.items() for key in model.model_fields}


class EvalSettings(BaseModel):
    """Everything one ``osmosis-run eval`` needs, resolved from all sources, in four groups.

    Options keep their flat names everywhere users write them: ``model_validate`` (and the
    constructor, and ``model_copy(update=...)``) take flat keys such as ``{"samples": 2}`` and
    put each into its group.

    Attributes:
        run: what the run is (the fingerprint is made from it).
        execution: how its rollouts execute.
        output: where it writes and how it resumes.
        after: how it is judged and reported once the rollouts are done.
        gateway: the model gateway between the rollouts and the model endpoint.
    """

    model_config = ConfigDict(extra="forbid", validate_default=True)

    run: RunSpec = Field(default_factory=RunSpec)
    execution: Execution = Field(default_factory=Execution)
    output: Output = Field(default_factory=Output)
    after: AfterRun = Field(default_factory=AfterRun)
    gateway: GatewayOptions = Field(default_factory=GatewayOptions)

    def gateway_model(self) -> str | None:
        """The model the gateway puts in every request: --model, else the workspace's; None
        without a gateway."""
        g = self.gateway
        if not self.execution.chat_completions_url or g.no_gateway:
            return None
        return g.model or g.workspace_model

    def __init__(self, **data: Any) -> None:
        """Build from flat keys (``EvalSettings(samples=2)``) or groups, as ``model_validate``."""
        super().__init__(**data)

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """Put flat keys into their groups (an unknown key stays, for ``extra`` to refuse)."""
        if not isinstance(data, Mapping):
            return data
        nested: dict[str, Any] = {}
        flat: dict[str, dict[str, Any]] = {}
        for key, value in data.items():
            group = GROUP_OF.get(key)
            if group is None:
                nested[key] = value
            else:
                flat.setdefault(group, {})[key] = value
        for group, values in flat.items():
            given = nested.get(group)  # a group given whole, and some of its keys flat too
            if isinstance(given, BaseModel):
                given = {k: getattr(given, k) for k in type(given).model_fields}
            nested[group] = {**(given if isinstance(given, Mapping) else {}), **values}
        return nested

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """As ``BaseModel.model_copy``, with flat keys in ``update`` (``{"fresh": True}``)."""
        if update:
            grouped = {k: v for k, v in update.items() if k not in GROUP_OF}
            for group in _GROUPS:
                flat = {k: v for k, v in update.items() if GROUP_OF.get(k) == group}
                if flat:
                    base = grouped.get(group, getattr(self, group))
                    grouped[group] = base.model_copy(update=flat)
            update = grouped
        return super().model_copy(update=update, deep=deep)

    def flat(self) -> dict[str, Any]:
        """Every option by its flat name, as ``model_dump`` gives it (never the API key)."""
        return {k: v for group in _GROUPS for k, v in getattr(self, group).model_dump().items()}


# Config-file and environment keys that differ from field names, or take special parsing.
_EVALUATION_KEYS = {
    "n": "samples",
    "limit": "limit",
    "batch_size": "concurrency",
    "pass_threshold": "pass_threshold",
    "agent_workflow_timeout_s": "agent_timeout",
    "grader_timeout_s": "grader_timeout",
}
_TABLES = {
    "workflow_config": "workflow_config_overrides",
    "grader_config": "grader_config_overrides",
}
_PATH_KEYS = (
    "dataset",
    "out",
    "runs_dir",
    "html",
    "junit",
    "baseline",
    "model_cache",
    "entrypoint",
)
_NOT_FROM_FILE = ("api_key", "server_api_key", *_TABLES.values())
# An Osmosis workspace eval config's sections besides [evaluation] (osmosis_run.run.workspace).
_WORKSPACE_SECTIONS = ("experiment", "env", "secrets", "advanced")


def parse_concurrency(value: str | int | None) -> Concurrency:
    """``"unlimited"``, ``"none"``, ``"inf"`` or ``0`` mean no limit (returned as ``UNLIMITED``).

    Anything else is a count, returned as an int (the settings model refuses one below 0).

    Raises:
        ConfigError: the value is not a number.
    """
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("unlimited", "none", "inf"):
        return UNLIMITED
    try:
        count = int(value)
    except ValueError:
        raise ConfigError(
            f'concurrency "{value}" is not a number; use a positive integer, or 0 or "unlimited"'
        ) from None
    return UNLIMITED if count == 0 else count


def parse_gate(spec: str) -> Gate:
    """Parse ``"pass_rate=0.9"``, ``"mean=0.8"``, ``"mean_graded=0.8"`` or a bare ``"0.8"`` (mean).

    Raises:
        ConfigError: the spec is malformed.
    """
    metric, eq, number = spec.partition("=")
    if not eq:
        metric, number = "mean", spec
    try:
        gate = Gate(metric=metric.strip(), threshold=float(number))
    except (ValueError, ValidationError):
        gate = None
    if gate is None or not math.isfinite(gate.threshold):
        raise ConfigError(
            f'--fail-under "{spec}": expected METRIC=VALUE with METRIC one of mean, '
            "mean_graded, pass_rate (for example pass_rate=0.9)"
        )
    return gate


def parse_error_budget(value: str | float) -> float | int:
    """A count (``"3"``) or a rate (``"0.05"`` or ``"5%"``) of failed or invalid rollouts.

    Raises:
        ConfigError: the value is malformed, negative, or a fraction above 1.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        budget = value
    else:
        budget = _parse_budget(str(value).strip(), value)
    if isinstance(budget, int):
        if budget < 0:
            raise ConfigError(f'--max-error-rate "{value}": a count must be 0 or more')
        return budget
    if not (math.isfinite(budget) and 0 <= budget <= 1):
        raise ConfigError(
            f'--max-error-rate "{value}": a fraction must be between 0 and 1 (or 0% and 100%); '
            "for a count of rollouts, write a whole number"
        )
    return budget


def _parse_budget(text: str, value: object) -> float | int:
    try:
        if text.endswith("%"):
            return float(text[:-1]) / 100
        try:
            return int(text)
        except ValueError:
            return float(text)
    except ValueError:
        raise ConfigError(
            f'--max-error-rate "{value}": expected a count (3), a fraction (0.05) or a percentage'
        ) from None


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a config file into settings keys, paths made absolute.

    Raises:
        ConfigError: the file is missing, not UTF-8 text, not TOML, or has an unknown key.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line}); save it as UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    values: dict[str, Any] = {}
    _refuse_unknown_sections(path, data)
    for key, value in data.items():
        if key in _WORKSPACE_SECTIONS:
            values.update(read_section(path, key, value))
        else:
            _take_file_key(values, path, key, value)
    if "experiment" in data and "entrypoint" not in data:  # run.toml has it located already
        _take_experiment(values, path)
    base = path.parent
    for key in _PATH_KEYS:
        if isinstance(values.get(key), str) and values[key] != "-":
            values[key] = os.path.normpath(base / values[key])
    folders = values.get("import_paths", ["."])
    if isinstance(folders, list):
        values["import_paths"] = [
            os.path.abspath(base / f) if isinstance(f, str) else f for f in folders
        ]
    return values


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
        and key not in ("evaluation", "serve", *_WORKSPACE_SECTIONS, *_TABLES)
        and key not in GROUP_OF
    ]
    if unknown:
        sections = ", ".join(f"[{key}]" for key in unknown)
        raise ConfigError(
            f"{path}: unknown section{'s' if len(unknown) > 1 else ''} {sections}; known: "
            "[experiment], [evaluation], [env], [secrets], [advanced], [workflow_config], "
            "[grader_config], [serve]"
        )


def _take_file_key(values: dict[str, Any], path: Path, key: str, value: Any) -> None:
    if key == "serve":
        return  # osmosis-run serve's own table (osmosis_run.server.settings reads it)
    if key == "evaluation":
        _take_evaluation(values, path, value)
    elif key in _TABLES:
        if isinstance(value, dict):
            # A table overrides fields; its `from` (a Python keyword, so never a field name)
            # names the instance to start from.
            overrides = dict(value)
            if "from" in overrides:
                values[key] = overrides.pop("from")
            values[_TABLES[key]] = overrides
        else:
            values[key] = value
    elif key in GROUP_OF and key not in _NOT_FROM_FILE:
        values[key] = value
    else:
        raise ConfigError(
            f'{path}: unknown key "{key}"; see `osmosis-run eval --help` for the options'
        )


def _take_evaluation(values: dict[str, Any], path: Path, table: Any) -> None:
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


def from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """Settings keys from ``OSMOSIS_RUN_*`` variables (and the model endpoint variables)."""
    values: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        key = name.removeprefix(ENV_PREFIX).lower()
        if key not in GROUP_OF or key.endswith("_overrides") or key in _WORKSPACE_SECTIONS:
            raise ConfigError(f"environment variable {name} is not an osmosis-run option")
        values[key] = value
    if "OSMOSIS_CHAT_COMPLETIONS_URL" in environ:
        values.setdefault("chat_completions_url", environ["OSMOSIS_CHAT_COMPLETIONS_URL"])
    if environ.get("OSMOSIS_API_KEY"):
        values.setdefault("api_key", environ["OSMOSIS_API_KEY"])
    return values


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
    layers: list[tuple[str, dict[str, Any]]] = []
    if config_file is not None:
        layers.append((str(config_file), load_config_file(config_file)))
    env = os.environ if environ is None else environ
    layers.append(("environment", from_environment(env)))
    layers.append(("command line", {k: v for k, v in cli.items() if v is not None}))
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for source, values in layers:
        merged.update(values)
        origin.update(dict.fromkeys(values, source))
    try:
        return EvalSettings.model_validate(merged)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = error["loc"]
        key = str(loc[1] if len(loc) > 1 and loc[0] in _GROUPS else loc[0]) if loc else "?"
        where = origin.get(key, "defaults")
        raise ConfigError(
            f"{_option(key)} ({where}): {error['msg']} (got {error.get('input')!r})"
        ) from None


def _option(key: str) -> str:
    return "--" + key.replace("_", "-")


# Per-invocation switches that a saved configuration must not carry.
_NOT_SAVED = {"api_key", "server_api_key", "fresh", "retry_failed", "dry_run", "jsonl"}


def settings_to_toml(settings: EvalSettings, *, run_dir: Path) -> str:
    """The resolved settings as a config file that reproduces the run (never the API key)."""
    data = {k: v for k, v in settings.flat().items() if v is not None and k not in _NOT_SAVED}
    for key in _PATH_KEYS:
        if key in data and data[key] != "-":
            data[key] = os.path.abspath(data[key])
    data["out"] = os.path.abspath(run_dir)
    data["import_paths"] = [os.path.abspath(folder) for folder in data["import_paths"]]
    data["fail_under"] = [f"{g['metric']}={g['threshold']}" for g in data["fail_under"]]
    for section in _WORKSPACE_SECTIONS:  # written as the workspace config writes them
        value = data.pop(section, None)
        if value:
            data[section] = {"required": value} if section == "secrets" else value
    for table, overrides_key in _TABLES.items():
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
