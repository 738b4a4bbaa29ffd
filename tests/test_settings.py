"""Where each option comes from (command line > environment > config file > defaults, pair by
pair), how config files are read, how the special option forms parse, and run.toml round trips."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import results
from pydantic import ValidationError
from typer.testing import Result

from osmosis_run.errors import ConfigError
from osmosis_run.examples.calculator import CalculatorConfig
from osmosis_run.run.components import load_components, selection_of
from osmosis_run.run.dataset import sha256_file
from osmosis_run.run.fingerprint import build_fingerprint, source_hash
from osmosis_run.run.settings import (
    GROUP_OF,
    AfterRun,
    EvalSettings,
    Execution,
    Gate,
    Output,
    RunSpec,
    load_config_file,
    parse_concurrency,
    parse_error_budget,
    parse_gate,
    resolve_settings,
    settings_to_toml,
)

Cli = Callable[..., Result]
REPO = Path(__file__).resolve().parent.parent
CALCULATOR = REPO / "configs" / "calculator.toml"


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


def option_of(settings: EvalSettings, option: str) -> Any:
    """An option by its flat name, from the group that holds it."""
    return getattr(getattr(settings, GROUP_OF[option]), option)


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
        "--samples (environment): Input should be a valid integer, unable to parse string "
        "as an integer (got 'many')"
    )
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, file="retries = -1")
    assert str(caught.value) == (
        f"--retries ({tmp_path / 'eval.toml'}): Input should be greater than or equal to 0 (got -1)"
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


def test_unlimited_concurrency_from_a_file(tmp_path: Path) -> None:
    assert (
        resolve(tmp_path, file='concurrency = "unlimited"\n').execution.concurrency == "unlimited"
    )
    assert resolve(tmp_path, file="concurrency = 0\n").execution.concurrency == "unlimited"


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


def test_the_api_key_is_a_secret(tmp_path: Path) -> None:
    settings = resolve(tmp_path, cli={"api_key": "sk-very-secret-1"})
    assert settings.execution.api_key is not None
    assert settings.execution.api_key.get_secret_value() == "sk-very-secret-1"
    assert "sk-very-secret-1" not in repr(settings)
    assert "sk-very-secret-1" not in str(settings.model_dump())
    assert "sk-very-secret-1" not in settings.model_dump_json()
    assert "sk-very-secret-1" not in settings_to_toml(settings, run_dir=tmp_path)


def test_concurrency_that_is_not_a_number(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, cli={"concurrency": "lots"})
    assert str(caught.value) == (
        'concurrency "lots" is not a number; use a positive integer, or 0 or "unlimited"'
    )


def test_negative_concurrency(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, cli={"concurrency": "-2"})
    assert str(caught.value) == (
        "--concurrency (command line): Input should be greater than or equal to 0 (got -2)"
    )


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


def test_fail_under_from_each_source(tmp_path: Path) -> None:
    pass_rate, mean = Gate(metric="pass_rate", threshold=0.9), Gate(metric="mean", threshold=0.5)
    cli = resolve(tmp_path, cli={"fail_under": ["pass_rate=0.9", "0.5"]})
    assert cli.after.fail_under == [pass_rate, mean]
    listed = resolve(tmp_path, file='fail_under = ["pass_rate=0.9", "mean=0.5"]\n')
    assert listed.after.fail_under == [pass_rate, mean]
    table = resolve(tmp_path, file="[fail_under]\npass_rate = 0.9\nmean = 0.5\n")
    assert table.after.fail_under == [pass_rate, mean]
    assert resolve(tmp_path, file='fail_under = "0.5"\n').after.fail_under == [mean]


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


@pytest.mark.parametrize("value", ["topic", "metadata.", "meta.topic"])
def test_group_by_must_name_a_metadata_key(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, cli={"group_by": value})
    assert str(caught.value) == (
        f'--group-by (command line): Value error, must look like "metadata.KEY" (got {value!r})'
    )


# --- run.toml ----------------------------------------------------------------------------------


def absolute(settings: EvalSettings) -> EvalSettings:
    """The settings with every path made absolute, as run.toml writes them."""
    paths = {
        key: os.path.abspath(value)
        for key in ("dataset", "out", "runs_dir", "html", "junit", "baseline")
        if isinstance(value := option_of(settings, key), str) and value != "-"
    }
    folders = [os.path.abspath(folder) for folder in settings.run.import_paths]
    return settings.model_copy(update={**paths, "import_paths": folders})


def test_settings_to_toml_round_trips_every_saved_option(tmp_path: Path) -> None:
    settings = EvalSettings(
        dataset=str(tmp_path / "d.jsonl"),
        workflow="m:W",
        grader="m:G",
        workflow_config="m:wc",
        workflow_config_overrides={"temperature": 0.5, "concurrency": {"max_concurrent": 2}},
        grader_config_overrides={"name": "g"},
        import_paths=[str(tmp_path)],
        out=str(tmp_path / "run"),
        samples=4,
        limit=10,
        offset=2,
        rows="1-40",
        ids=["a", "b"],
        shuffle=True,
        seed=7,
        shard="1/3",
        concurrency=0,
        agent_timeout=3.5,
        grader_timeout=1.0,
        retries=2,
        chat_completions_url="http://model/v1",
        api_key="sk-secret",
        pass_threshold=0.5,
        fail_under=[Gate(metric="pass_rate", threshold=0.3), Gate(metric="mean", threshold=0.1)],
        max_error_rate=0.05,
        no_messages=True,
        group_by="metadata.topic",
        fresh=True,
        retry_failed=True,
        jsonl=True,
        dry_run=True,
    )
    text = settings_to_toml(settings, run_dir=tmp_path / "run")
    assert "sk-secret" not in text
    path = write_config(tmp_path, text, name="run.toml")
    again = resolve_settings({}, config_file=path, environ={})
    per_invocation = {
        "api_key": None,
        "fresh": False,
        "retry_failed": False,
        "jsonl": False,
        "dry_run": False,
    }
    assert again == absolute(settings).model_copy(update=per_invocation)


def test_a_count_budget_stays_a_count(tmp_path: Path) -> None:
    text = settings_to_toml(EvalSettings(max_error_rate=3), run_dir=tmp_path)
    again = resolve_settings({}, config_file=write_config(tmp_path, text), environ={})
    assert again.after.max_error_rate == 3
    assert type(again.after.max_error_rate) is int


def test_a_real_run_toml_gives_the_same_settings_and_resumes(cli: Cli, tmp_path: Path) -> None:
    """`eval --config configs/calculator.toml --out run`, then `eval --config run/run.toml`."""
    first = cli("eval", "--config", str(CALCULATOR), "--out", "run")
    assert first.exit_code == 0, first.stderr
    run_toml = tmp_path / "run" / "run.toml"
    before = (tmp_path / "run" / "results.jsonl").read_bytes()
    original = resolve_settings({"out": "run"}, config_file=CALCULATOR, environ={})
    assert resolve_settings({}, config_file=run_toml, environ={}) == absolute(original)

    again = cli("eval", "--config", str(run_toml))
    assert again.exit_code == 0, again.stderr
    assert again.stderr.startswith(
        "osmosis-run: 300 rollouts, 300 already done (6 of them failed and are kept as they "
        f"are; --retry-failed runs them again) -> {run_toml.parent}\n"
    )
    assert (tmp_path / "run" / "results.jsonl").read_bytes() == before
    assert len(results(tmp_path / "run")) == 300


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
        "backend", "ray_address", "ray_actors", "ray_actor_cpus", "ray_batch", "ray_shared_fs",
        "ray_ready_timeout",
    ],
    "output": ["out", "runs_dir", "fresh", "retry_failed", "jsonl", "no_messages"],
    "after": [
        "pass_threshold", "fail_under", "max_error_rate", "group_by", "html", "junit",
        "baseline", "fail_on_regression", "dry_run",
    ],
    "gateway": [
        "no_gateway", "model", "workspace_model", "token_price", "no_record_calls", "model_retries",
        "max_model_connections", "rpm", "tpm", "model_cache", "model_cache_mode", "no_preflight",
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


def test_an_unknown_key_is_refused_by_its_flat_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, cli={"samples": "0"})
    assert str(caught.value) == (
        "--samples (command line): Input should be greater than or equal to 1 (got '0')"
    )
    with pytest.raises(ValidationError):
        EvalSettings.model_validate({"sample": 2})


def test_the_fingerprint_keeps_its_json(tmp_path: Path) -> None:
    """Run directories made before the settings were grouped must still resume."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "p"}\n', encoding="utf-8")
    settings = EvalSettings.model_validate(
        {
            "dataset": str(data),
            "workflow": "eval_flows:Echo",
            "grader": "eval_flows:ExactMatch",
            "workflow_config": "eval_flows:two_at_once",
            "samples": 2,
            "rows": "0-3",
            "seed": 5,
            "concurrency": 9,
            "html": "r.html",
        }
    )
    components = load_components(settings)
    fingerprint = build_fingerprint(
        settings, selection_of(settings), components.workflow, components.grader
    )
    assert fingerprint == {
        "dataset": sha256_file(str(data)),
        "workflow": "eval_flows:Echo",
        "workflow_source": source_hash(components.workflow),
        "grader": "eval_flows:ExactMatch",
        "grader_source": source_hash(components.grader),
        "workflow_config": ["eval_flows:two_at_once", {}],
        "grader_config": [None, {}],
        "samples": 2,
        "selection": {
            "offset": 0,
            "limit": None,
            "rows": [[0, 3]],
            "ids": None,
            "shard": None,
            "shuffle": False,
            "seed": 5,
        },
    }
    assert list(fingerprint) == [
        "dataset", "workflow", "workflow_source", "grader", "grader_source",
        "workflow_config", "grader_config", "samples", "selection",
    ]  # fmt: skip


def test_the_gateway_model_is_model_else_the_workspaces_and_none_without_a_gateway() -> None:
    endpoint = {"chat_completions_url": "http://127.0.0.1:9/v1"}
    assert EvalSettings(workspace_model="w").gateway_model() is None  # no endpoint: recorded
    assert EvalSettings(**endpoint, workspace_model="w").gateway_model() == "w"
    assert EvalSettings(**endpoint, model="m", workspace_model="w").gateway_model() == "m"
    assert EvalSettings(**endpoint, workspace_model="w", no_gateway=True).gateway_model() is None
