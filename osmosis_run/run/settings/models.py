"""The options of ``osmosis-run eval`` as one model: ``EvalSettings`` and its groups.

``EvalSettings`` groups the options by what they are about: ``run`` (what the run is, the
inputs of its fingerprint), ``execution`` (how its rollouts execute), ``output`` (where it
writes and how it resumes), ``after`` (how it is judged and reported) and ``gateway`` (the model
gateway). Users never see the groups: every option keeps its flat name on the command line, in
``OSMOSIS_RUN_*`` variables, in config files and ``run.toml``, and in
``EvalSettings.model_validate({"samples": 2})``.

Every option form is parsed as the model is validated (from any source, and in
``EvalSettings.model_validate``), so a bad value is refused before anything loads: ``rows``
("3,7,10-20") becomes inclusive ranges, ``shard`` ("I/N") a pair, ``fail_under`` gates,
``max_error_rate`` a count or a fraction, ``ids`` and ``import_paths`` lists. ``concurrency``
(``ConcurrencyLimit``, serve's too) is a positive integer, ``"unlimited"`` (the one spelling of
no limit: ``0``, ``"unlimited"``, ``"none"`` and ``"inf"`` all become it) or None (not given:
the workflow config's limit, else the default). The API key is a ``SecretStr``: never in a
repr, a dump or ``run.toml``; the engine reads it with ``get_secret_value()``. ``server``
(``--server URL``) has a rollout server run every rollout (``Execution.remote``); its key
``server_api_key`` is a secret too. The ``ray_*`` options are the Ray backend's own
(``osmosis_run.backends.ray`` reads them from ``Execution``).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from osmosis_run.errors import ConfigError
from osmosis_run.results.gates import Gate
from osmosis_run.run.selection import parse_rows_spec, parse_shard

__all__ = [
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
    "Output",
    "RunSpec",
    "WorkerCount",
    "WorkerMemory",
    "WorkerRecycle",
    "parse_concurrency",
    "parse_error_budget",
    "parse_gate",
]

UNLIMITED: Literal["unlimited"] = "unlimited"
# Rollouts in flight: a positive count, UNLIMITED, or None (not given).
Concurrency = int | Literal["unlimited"] | None
_CONCURRENCY_FORMS = (
    'must be a whole number of rollouts (1 or more), or 0 or "unlimited" for no limit'
)


def _concurrency_limit(value: Any) -> Any:
    """A count, ``UNLIMITED`` (0 and the words of no limit), or None; anything else refused."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # TOML's `concurrency = 0.0`
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(_CONCURRENCY_FORMS)  # noqa: TRY004  (pydantic wants a ValueError)
    try:
        limit = parse_concurrency(value)
    except ConfigError:
        raise ValueError(_CONCURRENCY_FORMS) from None
    if isinstance(limit, int) and limit < 0:
        raise ValueError(_CONCURRENCY_FORMS)
    return limit


# The concurrency option of eval and serve, from any source: one parse, one message.
ConcurrencyLimit = Annotated[int | Literal["unlimited"] | None, BeforeValidator(_concurrency_limit)]


def _size(value: Any) -> Any:
    """A size as written (``2GiB``, ``512MiB``, ``1.5GB``, ``800M``), or a whole number of bytes."""
    return parse_size(value) if isinstance(value, str) else value


# The worker-process options of eval (--backend processes) and serve (--workers): how many
# workers (None: eval's default, the CPU count; serve's, none), the resident memory a worker may
# hold (bytes), after how many rollouts a worker is replaced. One parse, one message.
WorkerCount = Annotated[int, Field(ge=1)] | None
WorkerMemory = Annotated[Annotated[int, Field(gt=0)] | None, BeforeValidator(_size)]
WorkerRecycle = Annotated[int, Field(ge=1)] | None


def _duration(value: Any) -> Any:
    """A duration as written (``90s``, ``45m``, ``2h``, ``1h30m``), or a number of seconds."""
    return parse_duration(value) if isinstance(value, str) else value


def _usd(value: Any) -> Any:
    """An amount of USD as written: ``5``, ``2.50``, ``$5``."""
    return value.strip().removeprefix("$").strip() if isinstance(value, str) else value


def _tokens(value: Any) -> Any:
    """A count of tokens as written: ``500000``, ``500_000``, ``500k``, ``2M``."""
    if not isinstance(value, str):
        return value
    text = value.strip().replace("_", "").replace(",", "")
    factor = {"k": 1000, "m": 1000**2}.get(text[-1:].lower())
    if factor is None:
        return text
    try:
        number = float(text[:-1]) * factor
    except ValueError:
        return value
    return int(number) if number.is_integer() else value


# A run budget (run/budgets.py): wall time in seconds, USD, tokens. Not in the fingerprint: the
# same command with a larger budget resumes the run.
TimeLimit = Annotated[
    Annotated[float, Field(gt=0, allow_inf_nan=False)] | None, BeforeValidator(_duration)
]
MaxCost = Annotated[
    Annotated[float, Field(gt=0, allow_inf_nan=False)] | None, BeforeValidator(_usd)
]
MaxTokens = Annotated[Annotated[int, Field(ge=1)] | None, BeforeValidator(_tokens)]


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

    @field_validator("rows", "shard", mode="before")
    @classmethod
    def _selection_spec(cls, value: Any, info: ValidationInfo) -> Any:
        """``--rows "3,7,10-20"`` and ``--shard I/N`` as written (blank: not given)."""
        if isinstance(value, str):
            parse = parse_rows_spec if info.field_name == "rows" else parse_shard
            return parse(value) if value.strip() else None
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

    concurrency: ConcurrencyLimit = None
    agent_timeout: float | None = Field(None, gt=0)
    grader_timeout: float | None = Field(None, gt=0)
    retries: int = Field(0, ge=0)
    chat_completions_url: str | None = None
    api_key: SecretStr | None = Field(None, repr=False, exclude=True)
    # Where attempts run (backends/): in this process, in worker processes on this machine, or
    # on a Ray actor pool. Not part of the fingerprint: a run started locally resumes on
    # processes or Ray and back.
    backend: Literal["local", "processes", "ray"] = "local"
    # --backend processes (backends/processes.py): how many workers (None: the CPU count), the
    # memory a worker may hold (bytes), after how many rollouts a worker is replaced.
    workers: WorkerCount = None
    max_worker_memory: WorkerMemory = None
    worker_recycle: WorkerRecycle = None
    ray_address: str | None = None
    ray_actors: int | None = Field(None, ge=1)
    ray_actor_cpus: float = Field(0.0, ge=0)
    ray_batch: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    ray_shared_fs: bool = False
    ray_ready_timeout: float = Field(120.0, gt=0)
    server: str | None = None
    server_api_key: SecretStr | None = Field(None, repr=False, exclude=True)
    # Run budgets (run/budgets.py): reached, the run stops cleanly and exits 124.
    time_limit: TimeLimit = None
    max_cost: MaxCost = None
    max_tokens: MaxTokens = None
    secrets_file: str | None = None  # a dotenv file with the [secrets] values (--secrets-file)

    @property
    def remote(self) -> bool:
        """Whether a rollout server runs the rollouts (``--server``): its own workflow and
        grader, so none is loaded, checked or fingerprinted here."""
        return self.server is not None

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
    # The address the gateway listens on and hands rollouts (None: loopback, or with a Ray
    # cluster or a rollout server on another machine this machine's address toward it).
    gateway_host: str | None = None

    @field_validator("gateway_host")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        host = value.strip().removeprefix("[").removesuffix("]")
        if "/" in host or " " in host:
            raise ValueError(
                "must be a host name or an IP address of this machine, such as 10.0.0.5"
            )
        return host

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


GROUPS: dict[str, type[_Group]] = {
    "run": RunSpec,
    "execution": Execution,
    "output": Output,
    "after": AfterRun,
    "gateway": GatewayOptions,
}
# Every option's flat name (CLI, OSMOSIS_RUN_*, config-file key) -> the group that holds it.
GROUP_OF = {key: group for group, model in GROUPS.items() for key in model.model_fields}


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

    @property
    def uses_gateway(self) -> bool:
        """Whether the run puts the model gateway between its rollouts and the model endpoint:
        it has an endpoint, and not ``--no-gateway``."""
        return bool(self.execution.chat_completions_url) and not self.gateway.no_gateway

    def gateway_model(self) -> str | None:
        """The model the gateway puts in every request: --model, else the workspace's; None
        without a gateway."""
        g = self.gateway
        if not self.uses_gateway:
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
            for group in GROUPS:
                flat = {k: v for k, v in update.items() if GROUP_OF.get(k) == group}
                if flat:
                    base = grouped.get(group, getattr(self, group))
                    grouped[group] = base.model_copy(update=flat)
            update = grouped
        return super().model_copy(update=update, deep=deep)

    def flat(self) -> dict[str, Any]:
        """Every option by its flat name, as ``model_dump`` gives it (never the API key)."""
        return {k: v for group in GROUPS for k, v in getattr(self, group).model_dump().items()}


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


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_size(text: str) -> int:
    """Bytes of a size written as ``2GiB``, ``512MiB``, ``1.5GB``, ``800M`` or ``1048576``.

    Raises:
        PydanticCustomError: not a positive size with a known unit.
    """
    number = text.strip().replace("_", "")
    unit = ""
    while number and number[-1].isalpha():
        unit = number[-1] + unit
        number = number[:-1]
    try:
        value = float(number.strip())
        factor = _UNITS[unit.lower()]
    except (ValueError, KeyError):
        raise PydanticCustomError(
            "size", "Input should be a size such as 2GiB, 512MiB or 1.5GB"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise PydanticCustomError("size", "Input should be a size greater than 0, such as 2GiB")
    return math.ceil(value * factor)


_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|min|s|m|h|d)?", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds of a duration written as ``90s``, ``45m``, ``2h``, ``1h30m``, ``1.5h`` or ``90``.

    Raises:
        PydanticCustomError: not a positive duration with known units.
    """
    rest = text.strip().replace(" ", "")
    seconds = 0.0
    position = 0
    while position < len(rest):
        match = _DURATION.match(rest, position)
        if match is None:
            break
        unit = (match.group(2) or "s").lower()
        seconds += float(match.group(1)) * _SECONDS[unit]
        position = match.end()
        if match.group(2) is None and position < len(rest):
            break  # a bare number is seconds, and only alone
    if not rest or position < len(rest):
        raise PydanticCustomError(
            "duration", "Input should be a duration such as 90s, 45m, 2h or 1h30m"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise PydanticCustomError("duration", "Input should be a duration greater than 0")
    return seconds


def format_duration(seconds: float) -> str:
    """A duration as people write it: ``90s``, ``45m``, ``2h``, ``1h30m``, ``0.5s``."""
    if seconds < 60 * 60 and (seconds < 120 or seconds % 60):
        return f"{seconds:g}s" if seconds % 1 else f"{int(seconds)}s"
    whole = round(seconds)
    hours, minutes, rest = whole // 3600, whole % 3600 // 60, whole % 60
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{rest}s" if rest else "",
    ]
    return "".join(parts)


def format_size(size: int) -> str:
    """A size as people write it: ``2 GiB``, ``512 MiB``, ``1.5 GB``, ``2.3 GiB``."""
    binary = ("TiB", "GiB", "MiB", "KiB")
    for units in (binary, ("TB", "GB", "MB", "kB")):
        for unit in units:  # exact to a tenth: as it was written
            factor = _UNITS[unit.lower()]
            if size >= factor and (size * 10) % factor == 0:
                return f"{size / factor:g} {unit}"
    for unit in binary:
        factor = _UNITS[unit.lower()]
        if size >= factor:
            return f"{size / factor:.1f} {unit}"
    return f"{size} bytes"
