"""Where each option comes from (command line > environment > config file > defaults, pair by
pair), how config files are read, and the one line a bad value gets, eval's and serve's alike."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import write_jsonl
from pydantic import BaseModel, Field, ValidationError
from settings_cases import option_of, resolve, write_config
from typer.testing import Result

from osmosis_run.errors import ConfigError
from osmosis_run.examples.calculator import CalculatorConfig
from osmosis_run.run.components import load_components
from osmosis_run.run.settings import (
    EvalSettings,
    Gate,
    Layer,
    command_line,
    load_config_file,
    resolve_settings,
    validated,
)

Cli = Callable[..., Result]


# --- precedence, pair by pair ------------------------------------------------------------------

# option: (command-line value, environment value, config file line, default), each a different
# value, with the parsed values the first three give.
SOURCES: dict[str, tuple[Any, str, str, Any, tuple[Any, Any, Any]]] = {
    "samples": (3, "4", "samples = 5", 1, (3, 4, 5)),
    "concurrency": ("8", "6", "concurrency = 2", None, (8, 6, 2)),
    "pass_threshold": (0.9, "0.8", "pass_threshold = 0.7", 1.0, (0.9, 0.8, 0.7)),
    "max_error_rate": ("3", "5%", "max_error_rate = 0.25", 0, (3, 0.05, 0.25)),
}


def env_name(option: str) -> str:
    return f"OSMOSIS_RUN_{option.upper()}"


@pytest.mark.parametrize("option", SOURCES)
def test_command_line_beats_environment(tmp_path: Path, option: str) -> None:
    cli_value, env_value, _, _, (want, _, _) = SOURCES[option]
    settings = resolve(tmp_path, cli={option: cli_value}, env={env_name(option): env_value})
    assert option_of(settings, option) == want


@pytest.mark.parametrize("option", SOURCES)
def test_command_line_beats_config_file(tmp_path: Path, option: str) -> None:
    cli_value, _, line, _, (want, _, _) = SOURCES[option]
    settings = resolve(tmp_path, cli={option: cli_value}, file=line)
    assert option_of(settings, option) == want


@pytest.mark.parametrize("option", SOURCES)
def test_environment_beats_config_file(tmp_path: Path, option: str) -> None:
    _, env_value, line, _, (_, want, _) = SOURCES[option]
    settings = resolve(tmp_path, env={env_name(option): env_value}, file=line)
    assert option_of(settings, option) == want


@pytest.mark.parametrize("option", SOURCES)
def test_config_file_beats_default(tmp_path: Path, option: str) -> None:
    _, _, line, _, (_, _, want) = SOURCES[option]
    assert option_of(resolve(tmp_path, file=line), option) == want


@pytest.mark.parametrize("option", SOURCES)
def test_default_alone(tmp_path: Path, option: str) -> None:
    default = SOURCES[option][3]
    assert option_of(resolve(tmp_path), option) == default
    assert option_of(EvalSettings(), option) == default


@pytest.mark.parametrize("option", SOURCES)
def test_all_sources_at_once_the_command_line_wins(tmp_path: Path, option: str) -> None:
    cli_value, env_value, line, _, (want, _, _) = SOURCES[option]
    settings = resolve(
        tmp_path, cli={option: cli_value}, env={env_name(option): env_value}, file=line
    )
    assert option_of(settings, option) == want


def test_a_none_on_the_command_line_means_not_given(tmp_path: Path) -> None:
    settings = resolve(tmp_path, cli={"samples": None}, file="samples = 5")
    assert settings.run.samples == 5


def test_an_invalid_value_names_the_option_and_its_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, cli={"samples": 0})
    assert str(caught.value) == (
        "--samples (command line): Input should be greater than or equal to 1 (got 0)"
    )
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, env={"OSMOSIS_RUN_SAMPLES": "many"})
    assert str(caught.value) == (
        "--samples (OSMOSIS_RUN_SAMPLES): Input should be a valid integer, unable to parse "
        "string as an integer (got 'many')"
    )
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, file="retries = -1")
    assert str(caught.value) == (
        f"--retries (retries in {tmp_path / 'eval.toml'}): Input should be greater than or "
        "equal to 0 (got -1)"
    )


# --- the environment ---------------------------------------------------------------------------


def test_an_unknown_osmosis_run_variable_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, env={"OSMOSIS_RUN_FOO": "1"})
    assert str(caught.value) == "environment variable OSMOSIS_RUN_FOO is not an osmosis-run option"


def test_internal_fields_cannot_come_from_the_environment(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, env={"OSMOSIS_RUN_WORKFLOW_CONFIG_OVERRIDES": "{}"})
    assert str(caught.value) == (
        "environment variable OSMOSIS_RUN_WORKFLOW_CONFIG_OVERRIDES is not an osmosis-run option"
    )


def test_other_variables_are_ignored(tmp_path: Path) -> None:
    assert resolve(tmp_path, env={"OSMOSIS_RUNNER": "x", "HOME": "/"}) == EvalSettings()


def test_environment_values_are_parsed(tmp_path: Path) -> None:
    settings = resolve(
        tmp_path,
        env={
            "OSMOSIS_RUN_SHUFFLE": "true",
            "OSMOSIS_RUN_IDS": "a, b,,c",
            "OSMOSIS_RUN_FAIL_UNDER": "pass_rate=0.9",
            "OSMOSIS_RUN_AGENT_TIMEOUT": "2.5",
        },
    )
    assert settings.run.shuffle is True
    assert settings.run.ids == ["a", "b", "c"]
    assert settings.after.fail_under == [Gate(metric="pass_rate", threshold=0.9)]
    assert settings.execution.agent_timeout == 2.5


def test_the_model_endpoint_variables(tmp_path: Path) -> None:
    settings = resolve(
        tmp_path,
        env={"OSMOSIS_CHAT_COMPLETIONS_URL": "http://model/v1", "OSMOSIS_API_KEY": "sk-1"},
    )
    assert settings.execution.chat_completions_url == "http://model/v1"
    assert settings.execution.api_key is not None
    assert settings.execution.api_key.get_secret_value() == "sk-1"
    settings = resolve(
        tmp_path,
        env={
            "OSMOSIS_CHAT_COMPLETIONS_URL": "http://a/v1",
            "OSMOSIS_RUN_CHAT_COMPLETIONS_URL": "x",
        },
    )
    assert settings.execution.chat_completions_url == "x"
    cli = {"chat_completions_url": "http://cli/v1", "api_key": "sk-cli"}
    settings = resolve(tmp_path, cli=cli, env={"OSMOSIS_API_KEY": "sk-env"})
    assert settings.execution.chat_completions_url == "http://cli/v1"
    assert settings.execution.api_key is not None
    assert settings.execution.api_key.get_secret_value() == "sk-cli"


# --- config files ------------------------------------------------------------------------------


def test_an_unknown_key_names_the_key_and_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, 'workflow = "m:W"\nconcurency = 4\n')
    with pytest.raises(ConfigError) as caught:
        resolve_settings({}, config_file=path, environ={})
    assert str(caught.value) == (
        f'{path}: unknown key "concurency"; see `osmosis-run eval --help` for the options'
    )


@pytest.mark.parametrize("key", ["api_key", "workflow_config_overrides", "grader_config_overrides"])
def test_keys_a_config_file_may_not_set(tmp_path: Path, key: str) -> None:
    path = write_config(tmp_path, f'{key} = "x"\n')
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    assert str(caught.value) == (
        f'{path}: unknown key "{key}"; see `osmosis-run eval --help` for the options'
    )


def test_a_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_file(tmp_path / "nope.toml")
    assert str(caught.value) == (
        f"cannot read config file {tmp_path / 'nope.toml'}: No such file or directory"
    )


def test_a_config_file_that_is_not_toml(tmp_path: Path) -> None:
    path = write_config(tmp_path, "samples = \n")
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    assert str(caught.value) == f"{path}: not valid TOML: Invalid value (at line 1, column 11)"


def test_the_evaluation_table_is_understood(tmp_path: Path) -> None:
    settings = resolve(
        tmp_path,
        file=(
            'workflow = "m:W"\n'
            "[evaluation]\n"
            "n = 4\n"
            "limit = 20\n"
            "batch_size = 16\n"
            "pass_threshold = 0.5\n"
            "agent_workflow_timeout_s = 30\n"
            "grader_timeout_s = 5.5\n"
        ),
    )
    assert (settings.run.samples, settings.run.limit, settings.execution.concurrency) == (4, 20, 16)
    assert (
        settings.after.pass_threshold,
        settings.execution.agent_timeout,
        settings.execution.grader_timeout,
    ) == (
        0.5,
        30,
        5.5,
    )


@pytest.mark.parametrize("limit", [0, -1])
def test_an_evaluation_limit_of_zero_or_less_means_every_row(tmp_path: Path, limit: int) -> None:
    assert resolve(tmp_path, file=f"[evaluation]\nlimit = {limit}\n").run.limit is None


def test_the_command_line_beats_the_evaluation_table(tmp_path: Path) -> None:
    settings = resolve(tmp_path, cli={"samples": 2}, file="[evaluation]\nn = 4\n")
    assert settings.run.samples == 2


def test_an_unknown_evaluation_key_is_rejected(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[evaluation]\nn = 2\nepochs = 3\n")
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    assert str(caught.value) == (
        f'{path}: unknown key "evaluation.epochs"; known: n, limit, batch_size, '
        "pass_threshold, agent_workflow_timeout_s, grader_timeout_s"
    )


def test_evaluation_must_be_a_table(tmp_path: Path) -> None:
    path = write_config(tmp_path, "evaluation = 3\n")
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    assert str(caught.value) == f'{path}: "evaluation" must be a table'


def test_a_workflow_config_table_names_an_instance_and_overrides_it(tmp_path: Path) -> None:
    settings = resolve(
        tmp_path,
        file=(
            'workflow = "osmosis_run.examples.calculator:CalculatorAgent"\n'
            "[workflow_config]\n"
            'from = "osmosis_run.examples.calculator:config"\n'
            "precision = 2\n"
            "[grader_config]\n"
            'name = "g"\n'
        ),
    )
    assert settings.run.workflow_config == "osmosis_run.examples.calculator:config"
    assert settings.run.workflow_config_overrides == {"precision": 2}
    assert settings.run.grader_config is None
    assert settings.run.grader_config_overrides == {"name": "g"}
    config = load_components(settings.model_copy(update={"grader_config_overrides": {}}))
    assert isinstance(config.workflow_config, CalculatorConfig)
    assert config.workflow_config.precision == 2
    assert config.workflow_config.name == "calculator"


def test_a_workflow_config_string_is_a_plain_path(tmp_path: Path) -> None:
    settings = resolve(tmp_path, file='workflow_config = "m:config"\n')
    assert (settings.run.workflow_config, settings.run.workflow_config_overrides) == (
        "m:config",
        {},
    )


def test_the_command_line_instance_keeps_the_file_overrides(tmp_path: Path) -> None:
    settings = resolve(
        tmp_path,
        cli={"workflow_config": "other:config"},
        file='[workflow_config]\nfrom = "m:config"\nprecision = 2\n',
    )
    assert settings.run.workflow_config == "other:config"
    assert settings.run.workflow_config_overrides == {"precision": 2}


CALC = 'workflow = "osmosis_run.examples.calculator:CalculatorAgent"\n'


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'from = "osmosis_run.examples.calculator:config"\nprecison = 2\n',
            '[workflow_config] has no field "precison" (fields of CalculatorConfig: '
            "concurrency, description, name, precision)",
        ),
        (
            'from = "osmosis_run.examples.calculator:config"\nprecision = "two"\n',
            "[workflow_config] precision: Input should be a valid integer, unable to parse "
            "string as an integer (got 'two')",
        ),
        (
            'from = "osmosis_run.examples.calculator:config"\nprecision = 99\n',
            "[workflow_config] precision: Input should be less than or equal to 15 (got 99)",
        ),
        (
            "precision = 2\n",
            '[workflow_config] overrides need an instance to override: add `from = "module:attr"`'
            " to the table, or --workflow-config",
        ),
    ],
)
def test_bad_overrides_name_the_field(tmp_path: Path, table: str, message: str) -> None:
    settings = resolve(tmp_path, file=f"{CALC}[workflow_config]\n{table}")
    with pytest.raises(ConfigError) as caught:
        load_components(settings)
    assert str(caught.value) == message


def test_paths_are_relative_to_the_config_file(tmp_path: Path) -> None:
    folder = tmp_path / "some" / "dir"
    folder.mkdir(parents=True)
    path = write_config(
        folder,
        'dataset = "data/x.jsonl"\nout = "runs/one"\nruns_dir = "runs"\nhtml = "r.html"\n'
        'junit = "j.xml"\nbaseline = "/abs/base"\n',
    )
    settings = resolve_settings({}, config_file=path, environ={})
    assert settings.run.dataset == str(folder / "data" / "x.jsonl")
    assert settings.output.out == str(folder / "runs" / "one")
    assert settings.output.runs_dir == str(folder / "runs")
    assert (settings.after.html, settings.after.junit) == (
        str(folder / "r.html"),
        str(folder / "j.xml"),
    )
    assert settings.after.baseline == "/abs/base"
    assert settings.run.import_paths == [str(folder)]


def test_paths_of_a_relative_config_file_stay_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    write_config(tmp_path / "conf", 'dataset = "x.jsonl"\n')
    settings = resolve_settings({}, config_file=Path("conf/eval.toml"), environ={})
    assert settings.run.dataset == os.path.join("conf", "x.jsonl")
    assert settings.run.import_paths == [str(tmp_path / "conf")]


def test_stdin_stays_stdin(tmp_path: Path) -> None:
    assert resolve(tmp_path, file='dataset = "-"\n').run.dataset == "-"


def test_command_line_paths_are_not_moved(tmp_path: Path) -> None:
    settings = resolve(tmp_path, cli={"dataset": "x.jsonl"}, file='dataset = "y.jsonl"\n')
    assert settings.run.dataset == "x.jsonl"


def test_import_paths_set_in_the_file_replace_its_folder(tmp_path: Path) -> None:
    settings = resolve(tmp_path, file='import_paths = ["src", ".", "/opt/flows"]\n')
    assert settings.run.import_paths == [str(tmp_path / "src"), str(tmp_path), "/opt/flows"]
    assert resolve(tmp_path, file="import_paths = []\n").run.import_paths == []
    assert resolve(tmp_path).run.import_paths == []


# --- option forms from every source ------------------------------------------------------------


def test_concurrency_that_is_not_a_number(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, cli={"concurrency": "lots"})
    assert str(caught.value) == (
        "--concurrency (command line): must be a whole number of rollouts (1 or more), or 0 or "
        "\"unlimited\" for no limit (got 'lots')"
    )


def test_negative_concurrency(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, cli={"concurrency": "-2"})
    assert str(caught.value) == (
        "--concurrency (command line): must be a whole number of rollouts (1 or more), or 0 or "
        "\"unlimited\" for no limit (got '-2')"
    )


@pytest.mark.parametrize("value", ["topic", "metadata.", "meta.topic"])
def test_group_by_must_name_a_metadata_key(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, cli={"group_by": value})
    assert str(caught.value) == (
        f'--group-by (command line): must look like "metadata.KEY" (got {value!r})'
    )


@pytest.mark.parametrize(
    ("cli", "env", "message"),
    [
        ({"rows": "a-b"}, {}, '--rows "a-b": expected indices and ranges like "3,7,10-20"'),
        ({"rows": "5-2"}, {}, '--rows "5-2": "5-2" is not a valid range'),
        ({}, {"OSMOSIS_RUN_ROWS": "x"}, '--rows "x": expected indices and ranges like "3,7,10-20"'),
        ({"shard": "3/3"}, {}, '--shard "3/3": need 0 <= I < N, for example 0/4'),
        ({}, {"OSMOSIS_RUN_SHARD": "one"}, '--shard "one": expected I/N, for example 0/4'),
    ],
)
def test_a_bad_rows_or_shard_spec_fails_at_resolve_time(
    tmp_path: Path, cli: dict[str, Any], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, cli=cli, env=env)
    assert str(caught.value) == message


def test_fail_under_from_each_source(tmp_path: Path) -> None:
    pass_rate, mean = Gate(metric="pass_rate", threshold=0.9), Gate(metric="mean", threshold=0.5)
    cli = resolve(tmp_path, cli={"fail_under": ["pass_rate=0.9", "0.5"]})
    assert cli.after.fail_under == [pass_rate, mean]
    listed = resolve(tmp_path, file='fail_under = ["pass_rate=0.9", "mean=0.5"]\n')
    assert listed.after.fail_under == [pass_rate, mean]
    table = resolve(tmp_path, file="[fail_under]\npass_rate = 0.9\nmean = 0.5\n")
    assert table.after.fail_under == [pass_rate, mean]
    assert resolve(tmp_path, file='fail_under = "0.5"\n').after.fail_under == [mean]


def test_unlimited_concurrency_from_a_file(tmp_path: Path) -> None:
    assert (
        resolve(tmp_path, file='concurrency = "unlimited"\n').execution.concurrency == "unlimited"
    )
    assert resolve(tmp_path, file="concurrency = 0\n").execution.concurrency == "unlimited"


def test_an_unknown_key_is_refused_by_its_flat_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, cli={"samples": "0"})
    assert str(caught.value) == (
        "--samples (command line): Input should be greater than or equal to 1 (got '0')"
    )
    with pytest.raises(ValidationError):
        EvalSettings.model_validate({"sample": 2})


# --- the one message -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "env", "where", "got"),
    [
        ("[evaluation]\nn = 0\n", {}, "evaluation.n in {config}", "0"),
        ("samples = 0\n", {}, "samples in {config}", "0"),
        ("", {"OSMOSIS_RUN_SAMPLES": "0"}, "OSMOSIS_RUN_SAMPLES", "'0'"),
    ],
)
def test_a_bad_value_names_where_it_was_written(
    tmp_path: Path, file: str, env: dict[str, str], where: str, got: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, env=env, file=file)
    assert str(caught.value) == (
        f"--samples ({where.format(config=tmp_path / 'eval.toml')}): Input should be greater "
        f"than or equal to 1 (got {got})"
    )


def test_the_endpoint_variables_are_named_as_written(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, env={"OSMOSIS_RUN_SERVER": "localhost:1"})
    assert str(caught.value) == (
        "--server (OSMOSIS_RUN_SERVER): must be an http:// or https:// URL, such as "
        "http://127.0.0.1:8000 (got 'localhost:1')"
    )


class _Keyed(BaseModel):
    port: int = Field(8000, le=65535)
    key: str | None = Field(None, repr=False, min_length=8)


def test_validated_merges_later_layers_over_earlier_ones_and_never_shows_a_secret() -> None:
    layers = [Layer({"port": 1, "key": "k" * 8}, {"port": "a.toml"}), command_line({"port": 2})]
    assert validated(_Keyed, layers) == _Keyed(port=2, key="k" * 8)
    with pytest.raises(ConfigError) as caught:
        validated(_Keyed, [Layer({"key": "short"}, {"key": "KEY_VAR"})])
    assert str(caught.value) == (
        "--key (KEY_VAR): String should have at least 8 characters (got [REDACTED])"
    )
    with pytest.raises(ConfigError) as caught:
        validated(_Keyed, [command_line({"port": 70000, "key": None})])
    assert str(caught.value) == (
        "--port (command line): Input should be less than or equal to 65535 (got 70000)"
    )


MUST = 'must be a whole number of rollouts (1 or more), or 0 or "unlimited" for no limit'


@pytest.mark.parametrize(
    ("eval_args", "serve_args", "config", "where"),
    [
        (["--concurrency", "-3"], ["--concurrency", "-3"], None, "command line"),
        (["--config", "bad.toml"], ["--config", "bad.toml"], "concurrency = -3\n", "concurrency in bad.toml"),
    ],
)  # fmt: skip
def test_eval_and_serve_word_a_bad_value_alike(
    cli: Cli,
    tmp_path: Path,
    eval_args: list[str],
    serve_args: list[str],
    config: str | None,
    where: str,
) -> None:
    """The same bad concurrency, to `osmosis-run eval` and to `osmosis-run serve`: one line."""
    if config is not None:
        (tmp_path / "bad.toml").write_text(config)
    write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a"}])
    ran = cli("eval", "d.jsonl", "-w", "eval_flows:Echo", *eval_args)
    served = cli("serve", "-w", "server_flows:Upper", "--out", "r", *serve_args)
    got = "'-3'" if where == "command line" else "-3"
    line = f"error: --concurrency ({where}): {MUST} (got {got})\n"
    assert (ran.exit_code, ran.stderr) == (2, line)
    assert (served.exit_code, served.stderr) == (2, line)
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "r").exists()


def test_serves_own_table_is_named_as_written(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(
        'workflow = "server_flows:Upper"\n[serve]\nconcurrency = -3\nport = "http"\n'
    )
    served = cli("serve", "--config", "bad.toml", "--out", "r")
    assert served.exit_code == 2
    assert served.stderr == (
        "error: --port (serve.port in bad.toml): Input should be a valid integer, unable to "
        "parse string as an integer (got 'http')\n"
    )
    (tmp_path / "bad.toml").write_text(
        'workflow = "server_flows:Upper"\n[serve]\nconcurrency = -3\n'
    )
    served = cli("serve", "--config", "bad.toml", "--out", "r")
    assert (served.exit_code, served.stderr) == (
        2,
        f"error: --concurrency (serve.concurrency in bad.toml): {MUST} (got -3)\n",
    )
