"""The reference pages of the docs site hold every option, config key, variable and exit code.

The site is built once per module (``mkdocs build --strict`` in a subprocess); the command-line
pages are generated from the Typer app by ``osmosis_run/cli/docs_reference.py``, so these tests
check the built HTML against the app and the settings readers, asked independently here. The
example files the pages include (docs/examples/reference/) are loaded or compared with a real run.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main

from osmosis_run.cli import app, exit_codes
from osmosis_run.errors import ConfigError
from osmosis_run.results.records import ResultLine, Summary
from osmosis_run.run.settings import (
    ENV_PREFIX,
    GROUP_OF,
    config_file_layer,
    environment_layer,
    resolve_settings,
)
from osmosis_run.server import settings as serve_settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples" / "reference"
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Build:
    """One ``mkdocs build --strict`` of the site: where it wrote, and how it ended."""

    site: Path
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    # mkdocs and mkdocstrings are test dependencies (pyproject.toml): their absence fails, loudly.
    site = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**_environ(), "NO_MKDOCS_2_WARNING": "1"},
    )
    return Build(site, result)


def _environ() -> dict[str, str]:
    """This environment without OSMOSIS_RUN_* variables (they would change what runs)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}


def _page(build: Build, path: str) -> str:
    """A built page's text, entities unescaped (even when another page broke the build)."""
    page = build.site / path / "index.html"
    if not page.is_file():
        pytest.fail(f"the build wrote no {path}/index.html: {build.result.stderr[-2000:]}")
    return html.unescape(page.read_text(encoding="utf-8"))


def test_the_site_builds_strictly(build: Build) -> None:
    assert build.result.returncode == 0, build.result.stderr[-4000:]


def _params(command: str) -> list[Any]:
    root = typer.main.get_command(app)
    root_ctx = root.context_class(root, info_name="osmosis-run", **root.context_settings)
    cli = root.commands[command]  # type: ignore[attr-defined]
    ctx = cli.context_class(cli, info_name=command, parent=root_ctx, **cli.context_settings)
    return [p for p in cli.get_params(ctx) if not getattr(p, "hidden", False)]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_of_a_command_is_on_its_page(build: Build, command: str) -> None:
    text = _page(build, f"reference/cli/{command}")
    missing = [
        name
        for param in _params(command)
        for name in [*param.opts, *param.secondary_opts]
        if param.param_type_name == "option" and name not in text
    ]
    assert missing == []
    arguments = [p for p in _params(command) if p.param_type_name == "argument"]
    absent = [p.name for p in arguments if f'id="option-{p.name.replace("_", "-")}"' not in text]
    assert absent == []
    assert f"osmosis-run {command} [OPTIONS]" in text
    # Values and arguments are named as Click names them (TEXT, [DATASET]), as --help names them.
    assert re.findall(r"<(?:str|int|float|path|bool)>", text) == []
    usage = re.search(rf"osmosis-run {command} \[OPTIONS\][^<\n]*", text)
    assert usage is not None
    assert "{" not in usage.group(0), usage.group(0)


def test_the_app_page_lists_every_command(build: Build) -> None:
    text = _page(build, "reference/cli")
    assert [c for c in COMMANDS if f'href="{c}/"' not in text] == []
    assert "--install-completion" in text
    assert "--version" in text


def _file_keys(folder: Path) -> list[str]:
    """Every eval setting a config file may set, asked of the config-file reader."""
    keys = []
    for key in GROUP_OF:
        path = folder / f"{key}.toml"
        path.write_text(f'{key} = "1"\n', encoding="utf-8")
        try:
            if key in config_file_layer(path).values:
                keys.append(key)
        except ConfigError:
            pass
    return keys


def _variables() -> list[str]:
    """Every variable eval's environment reader takes."""
    names = [ENV_PREFIX + key.upper() for key in GROUP_OF]
    names += ["OSMOSIS_CHAT_COMPLETIONS_URL", "OSMOSIS_API_KEY"]
    taken = []
    for name in names:
        try:
            if environment_layer({name: "1"}).values:
                taken.append(name)
        except ConfigError:
            pass
    return taken


@pytest.fixture(scope="module")
def configuration(build: Build) -> str:
    return _page(build, "reference/configuration")


def test_every_config_key_and_variable_is_on_the_configuration_page(
    configuration: str, tmp_path: Path
) -> None:
    keys = _file_keys(tmp_path)
    assert "samples" in keys
    assert "api_key" not in keys  # never from a file
    assert [key for key in keys if f"<code>{key}</code>" not in configuration] == []
    variables = _variables()
    assert "OSMOSIS_RUN_SAMPLES" in variables
    assert [name for name in variables if f"<code>{name}</code>" not in configuration] == []


def test_every_serve_setting_is_on_the_configuration_page(configuration: str) -> None:
    table = [key for key in serve_settings.ServeSettings.model_fields if key != "gateway"]
    table += list(serve_settings.GATEWAY_KEYS)
    secrets = ("api_key", "model_api_key")
    assert [k for k in table if k not in secrets and f"[serve] {k}" not in configuration] == []
    for name in (
        serve_settings.PORT_ENV,
        serve_settings.API_KEY_ENV,
        serve_settings.MODEL_URL_ENV,
        serve_settings.MODEL_API_KEY_ENV,
    ):
        assert f"<code>{name}</code>" in configuration


def test_the_evaluation_table_keys_are_documented(tmp_path: Path) -> None:
    text = (DOCS / "reference" / "configuration.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `[evaluation]`"))
    documented = re.findall(r"`(\w+)` \(", row)
    path = tmp_path / "evaluation.toml"
    path.write_text("[evaluation]\n" + "".join(f"{k} = 1\n" for k in documented), "utf-8")
    assert set(config_file_layer(path).values) >= {"samples", "concurrency", "grader_timeout"}
    path.write_text("[evaluation]\nnot_a_key = 1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        config_file_layer(path)
    known = str(caught.value).rpartition("known: ")[2].split(", ")
    assert sorted(documented) == sorted(known)


def test_every_exit_code_is_on_the_exit_codes_page() -> None:
    text = (DOCS / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    codes = {v for k, v in vars(exit_codes).items() if k.isupper() and isinstance(v, int)}
    assert codes == {0, 1, 2, 3, 4, 124, 130}
    assert [code for code in sorted(codes) if f"| `{code}` |" not in text] == []


def test_every_public_name_is_on_the_python_api_page(build: Build) -> None:
    import osmosis_run

    text = _page(build, "reference/python-api")
    assert [n for n in osmosis_run.__all__ if f'id="osmosis_run.{n}"' not in text] == []


def test_the_example_configs_load(tmp_path: Path) -> None:
    eval_toml = EXAMPLES / "eval.toml"
    settings = resolve_settings({}, config_file=eval_toml, environ={})
    assert settings.run.samples == 1
    assert settings.execution.concurrency == 16  # [evaluation] batch_size
    done = _osmosis_run("validate", "--config", str(eval_toml), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    served = serve_settings.resolve_serve_settings(
        {}, config_file=EXAMPLES / "serve.toml", environ={}
    )
    assert (served.port, served.keep_alive, served.concurrency) == (8000, 2160, 32)
    assert tomllib.loads((EXAMPLES / "serve.toml").read_text(encoding="utf-8"))["workflow"]


def _osmosis_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = "from osmosis_run.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_environ(),
    )


def test_the_run_directory_examples_have_a_real_run_s_keys(tmp_path: Path) -> None:
    run = tmp_path / "run"
    dataset = ROOT / "datasets" / "calculator-small.jsonl"
    done = _osmosis_run(
        "eval",
        str(dataset),
        "-w",
        "osmosis_run.examples.calculator:CalculatorAgent",
        "-g",
        "osmosis_run.examples.calculator:ExactMatchGrader",
        "--workflow-config",
        "osmosis_run.examples.calculator:config",
        "--limit",
        "1",
        "-q",
        "--out",
        str(run),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    rollout = next((run / "rollouts").iterdir())
    real = {
        "results-line.json": json.loads((run / "results.jsonl").read_text().splitlines()[0]),
        "result.json": json.loads((rollout / "result.json").read_text()),
        "trajectory.json": json.loads((rollout / "trajectory.json").read_text()),
        "summary.json": json.loads((run / "summary.json").read_text()),
        "fingerprint.json": json.loads((run / "fingerprint.json").read_text()),
        "invocation.json": json.loads((run / "invocation.json").read_text()),
    }
    for name, document in real.items():
        example = json.loads((EXAMPLES / name).read_text(encoding="utf-8"))
        assert sorted(example) == sorted(document), name


def test_the_run_directory_page_names_every_field() -> None:
    text = (DOCS / "reference" / "run-directory.md").read_text(encoding="utf-8")
    fields = [*ResultLine.model_fields, *Summary.model_fields]
    assert [field for field in fields if f"`{field}`" not in text] == []
