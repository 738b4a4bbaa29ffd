"""run.toml: the resolved settings written as a config file that reproduces the run."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from conftest import results
from settings_cases import option_of, write_config
from typer.testing import Result

from osmosis_run.run.settings import EvalSettings, Gate, resolve_settings, settings_to_toml

Cli = Callable[..., Result]
REPO = Path(__file__).resolve().parent.parent
CALCULATOR = REPO / "configs" / "calculator.toml"


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


def test_run_toml_never_holds_a_key(tmp_path: Path) -> None:
    settings = EvalSettings(api_key="sk-very-secret-1", server_api_key="sk-server-secret-2")
    text = settings_to_toml(settings, run_dir=tmp_path)
    assert "sk-very-secret-1" not in text
    assert "sk-server-secret-2" not in text
