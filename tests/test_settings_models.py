"""The settings models: every option's group, flat names everywhere, and how the special
option forms parse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from settings_cases import option_of, resolve

from osmosis_run.errors import ConfigError
from osmosis_run.run.settings import (
    GROUP_OF,
    AfterRun,
    EvalSettings,
    Execution,
    Gate,
    Output,
    RunSpec,
    parse_concurrency,
    parse_error_budget,
    parse_gate,
)

# --- option forms ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("unlimited", "unlimited"),
        ("Unlimited", "unlimited"),
        ("none", "unlimited"),
        ("inf", "unlimited"),
        ("0", "unlimited"),
        (0, "unlimited"),
        ("12", 12),
        (5, 5),
        (None, None),
    ],
)
def test_concurrency_forms(value: str | int | None, want: int | str | None) -> None:
    assert parse_concurrency(value) == want


@pytest.mark.parametrize("value", [0, "0", "unlimited", "UNLIMITED", "inf"])
def test_unlimited_has_one_spelling_in_the_settings(value: str | int) -> None:
    assert EvalSettings.model_validate({"concurrency": value}).execution.concurrency == "unlimited"


@pytest.mark.parametrize(
    ("key", "spec", "want"),
    [
        ("rows", "3,7,10-20", ((3, 3), (7, 7), (10, 20))),
        ("rows", " 1 - 2 ", ((1, 2),)),
        ("rows", "", None),
        ("shard", "1/3", (1, 3)),
        ("shard", "", None),
    ],
)
def test_rows_and_shard_are_parsed_by_the_settings(key: str, spec: str, want: Any) -> None:
    assert option_of(EvalSettings.model_validate({key: spec}), key) == want


def test_the_api_key_is_a_secret(tmp_path: Path) -> None:
    settings = resolve(tmp_path, cli={"api_key": "sk-very-secret-1"})
    assert settings.execution.api_key is not None
    assert settings.execution.api_key.get_secret_value() == "sk-very-secret-1"
    assert "sk-very-secret-1" not in repr(settings)
    assert "sk-very-secret-1" not in str(settings.model_dump())
    assert "sk-very-secret-1" not in settings.model_dump_json()


@pytest.mark.parametrize(
    ("spec", "gate"),
    [
        ("pass_rate=0.9", Gate(metric="pass_rate", threshold=0.9)),
        ("mean=0.75", Gate(metric="mean", threshold=0.75)),
        ("mean_graded=1", Gate(metric="mean_graded", threshold=1.0)),
        (" pass_rate = 0.5 ", Gate(metric="pass_rate", threshold=0.5)),
        ("0.8", Gate(metric="mean", threshold=0.8)),
    ],
)
def test_fail_under_forms(spec: str, gate: Gate) -> None:
    assert parse_gate(spec) == gate


@pytest.mark.parametrize("spec", ["passrate=0.9", "pass_rate=high", "", "mean=nan", "mean=inf"])
def test_malformed_fail_under(spec: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_gate(spec)
    assert str(caught.value) == (
        f'--fail-under "{spec}": expected METRIC=VALUE with METRIC one of mean, mean_graded, '
        "pass_rate (for example pass_rate=0.9)"
    )


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("3", 3),
        ("0", 0),
        ("0.05", 0.05),
        ("5%", 0.05),
        ("100%", 1.0),
        ("1e-2", 0.01),
        (" 2 ", 2),
        (3, 3),
        (0.25, 0.25),
    ],
)
def test_max_error_rate_forms(value: str | float, want: float) -> None:
    budget = parse_error_budget(value)
    assert budget == pytest.approx(want)
    assert type(budget) is type(want)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "lots",
            '--max-error-rate "lots": expected a count (3), a fraction (0.05) or a percentage',
        ),
        ("-1", '--max-error-rate "-1": a count must be 0 or more'),
        (
            "1.5",
            '--max-error-rate "1.5": a fraction must be between 0 and 1 (or 0% and 100%); '
            "for a count of rollouts, write a whole number",
        ),
        (
            "150%",
            '--max-error-rate "150%": a fraction must be between 0 and 1 (or 0% and 100%); '
            "for a count of rollouts, write a whole number",
        ),
        (
            "nan",
            '--max-error-rate "nan": a fraction must be between 0 and 1 (or 0% and 100%); '
            "for a count of rollouts, write a whole number",
        ),
    ],
)
def test_malformed_max_error_rate(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_error_budget(value)
    assert str(caught.value) == message


@pytest.mark.parametrize("value", ["metadata.topic", "metadata.a.b"])
def test_group_by_takes_a_metadata_key(value: str) -> None:
    assert EvalSettings(group_by=value).after.group_by == value


# --- the groups ----------------------------------------------------------------------------

# Every option's flat name, as users write it (CLI option, OSMOSIS_RUN_* variable, config key).
FLAT_NAMES = {
    "run": [
        "dataset", "workflow", "grader", "workflow_config", "grader_config",
        "workflow_config_overrides", "grader_config_overrides", "import_paths", "samples",
        "limit", "offset", "rows", "ids", "shuffle", "seed", "shard",
        "entrypoint", "experiment", "advanced", "env", "secrets",
    ],
    "execution": [
        "concurrency", "agent_timeout", "grader_timeout", "retries", "chat_completions_url",
        "api_key", "server", "server_api_key", "secrets_file",
        "backend", "workers", "max_worker_memory", "worker_recycle",
        "ray_address", "ray_actors", "ray_actor_cpus", "ray_batch", "ray_shared_fs",
        "ray_ready_timeout", "time_limit", "max_cost", "max_tokens",
    ],
    "output": ["out", "runs_dir", "fresh", "retry_failed", "jsonl", "no_messages"],
    "after": [
        "pass_threshold", "fail_under", "max_error_rate", "group_by", "html", "junit",
        "baseline", "fail_on_regression", "dry_run",
    ],
    "gateway": [
        "no_gateway", "model", "workspace_model", "token_price", "no_record_calls", "model_retries",
        "max_model_connections", "rpm", "tpm", "model_cache", "model_cache_mode", "no_preflight",
        "gateway_host",
    ],
}  # fmt: skip


def test_every_flat_name_has_one_group() -> None:
    assert {name: group for group, names in FLAT_NAMES.items() for name in names} == GROUP_OF


def test_flat_keys_are_put_into_their_groups() -> None:
    flat = EvalSettings.model_validate(
        {"dataset": "d.jsonl", "shard": "0/2", "concurrency": 3, "out": "o", "html": "r.html"}
    )
    grouped = EvalSettings(
        run=RunSpec(dataset="d.jsonl", shard=(0, 2)),
        execution=Execution(concurrency=3),
        output=Output(out="o"),
        after=AfterRun(html="r.html"),
    )
    assert flat == grouped
    assert (flat.run.shard, flat.execution.concurrency, flat.output.out) == ((0, 2), 3, "o")
    assert EvalSettings(samples=2, run=RunSpec(seed=7)).run == RunSpec(samples=2, seed=7)


def test_model_copy_takes_flat_keys() -> None:
    settings = EvalSettings(samples=2, fresh=False)
    copied = settings.model_copy(update={"fresh": True, "samples": 3})
    assert (copied.output.fresh, copied.run.samples) == (True, 3)
    assert (settings.output.fresh, settings.run.samples) == (False, 2)


def test_the_gateway_model_is_model_else_the_workspaces_and_none_without_a_gateway() -> None:
    endpoint = {"chat_completions_url": "http://127.0.0.1:9/v1"}
    assert EvalSettings(workspace_model="w").gateway_model() is None  # no endpoint: recorded
    assert EvalSettings(**endpoint, workspace_model="w").gateway_model() == "w"
    assert EvalSettings(**endpoint, model="m", workspace_model="w").gateway_model() == "m"
    assert EvalSettings(**endpoint, workspace_model="w", no_gateway=True).gateway_model() is None


def test_remote_is_whether_a_server_runs_the_rollouts() -> None:
    assert EvalSettings().execution.remote is False
    assert EvalSettings(server=" ").execution.remote is False  # blank: not given
    assert EvalSettings(server="http://127.0.0.1:8000/").execution.remote is True
