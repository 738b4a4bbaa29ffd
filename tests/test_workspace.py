"""Osmosis workspace eval configs: ``eval --config configs/eval/NAME.toml`` in a workspace.

[experiment] locates the rollout's entrypoint, whose classes (or module-level LocalBackend) run;
[env] is set for the run; [secrets] come from the environment or --secrets-file and reach no
file; [advanced] is recorded; unknown sections are named. The interop suite runs the same with
osmosis-ai's own classes and scaffold.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from conftest import results, subprocess_env, write_jsonl, write_workspace
from serving import LEASE, free_port
from typer.testing import Result

Cli = Callable[..., Result]
SECRET = "tok-workspace-secret-0123456789"

MAIN = """
    import os

    from osmosis_run import AgentWorkflow, AgentWorkflowConfig, AgentWorkflowOutput, Grader


    class EchoConfig(AgentWorkflowConfig):
        suffix: str = "!"


    echo_config = EchoConfig(name="echo", suffix="?")


    class Echo(AgentWorkflow):
        async def run(self, ctx):
            said = f"{os.environ['MOOD']} {ctx.prompt[-1]['content']}{ctx.config.suffix}"
            said += " " + os.environ["WS_TOKEN"]
            return AgentWorkflowOutput(messages=[*ctx.prompt, {"role": "assistant", "content": said}])


    class Exact(Grader):
        async def grade(self, ctx):
            ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"].startswith(ctx.label) else 0.0)
"""

CONFIG = """
    [experiment]
    rollout = "echo"
    entrypoint = "main.py"
    model_path = "openai/gpt-5-mini"
    dataset = "echoes"

    [evaluation]
    n = 2

    [env]
    MOOD = "calm"

    [secrets]
    required = ["WS_TOKEN"]

    [advanced]
    lr = 0.1
"""


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace: rollouts/echo/main.py and configs/eval/echo.toml; rows in data/rows.jsonl."""
    root = tmp_path / "ws"
    write_workspace(root, "echo", MAIN, CONFIG)
    (root / "data").mkdir()
    write_jsonl(root / "data" / "rows.jsonl", [{"user_prompt": "hi", "ground_truth": "calm hi?"}])
    for name in ("MOOD", "WS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(os, "environ", os.environ.copy())  # [env] and [secrets] land here
    return root


def config_of(workspace: Path, extra: str = "", *, drop: str = "") -> str:
    text = textwrap.dedent(CONFIG).replace(drop, "") if drop else textwrap.dedent(CONFIG)
    path = workspace / "configs" / "eval" / "echo.toml"
    path.write_text(text + textwrap.dedent(extra))
    return str(path)


def every_file_text(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


def test_a_workspace_config_runs_its_rollout_with_env_and_secrets(
    cli: Cli, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(os.environ, "WS_TOKEN", SECRET)
    result = cli(
        "eval", "--config", config_of(workspace),
        "--dataset-file", str(workspace / "data" / "rows.jsonl"), "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = results(Path("run"))
    assert [(x.rollout_id, x.status, x.reward) for x in lines] == [
        ("row@0.s0", "success", 1.0),
        ("row@0.s1", "success", 1.0),
    ]
    assert lines[0].messages is not None
    assert lines[0].messages[-1]["content"] == "calm hi? [REDACTED]"
    assert SECRET not in every_file_text(Path("run"))
    assert SECRET not in result.output
    run_toml = Path("run/run.toml").read_text()
    for recorded in (
        'workflow = "main:Echo"', 'grader = "main:Exact"', 'workflow_config = "main:echo_config"',
        'model_path = "openai/gpt-5-mini"', 'dataset = "echoes"', "lr = 0.1", 'MOOD = "calm"',
    ):  # fmt: skip
        assert recorded in run_toml
    # run.toml reproduces the run: everything finished is found again.
    again = cli("eval", "--config", "run/run.toml")
    assert again.exit_code == 0, again.output
    assert len(results(Path("run"))) == 2


def test_secrets_come_from_a_dotenv_file_first(cli: Cli, workspace: Path) -> None:
    os.environ["WS_TOKEN"] = "from-the-environment-not-used"
    Path("secrets.env").write_text(f'# local secrets\nexport WS_TOKEN="{SECRET}"\n\nOTHER=x # c\n')
    result = cli(
        "eval", "--config", config_of(workspace), "--secrets-file", "secrets.env",
        "--dataset-file", str(workspace / "data" / "rows.jsonl"), "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert os.environ["WS_TOKEN"] == SECRET
    assert SECRET not in every_file_text(Path("run"))


def test_a_missing_secret_stops_the_run_before_it_starts(cli: Cli, workspace: Path) -> None:
    result = cli(
        "eval", "--config", config_of(workspace),
        "--dataset-file", str(workspace / "data" / "rows.jsonl"), "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr == (
        "error: [secrets] requires WS_TOKEN, not set in the environment: export it, or give "
        "--secrets-file FILE (a dotenv file of NAME=value lines)\n"
    )
    assert not Path("run").exists()


def test_serve_opens_a_workspace_config_as_eval_does(workspace: Path, tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.env"
    secrets.write_text(f"WS_TOKEN={SECRET}\n")
    port = free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "osmosis_run", "serve", "--config", config_of(workspace),
         "--secrets-file", str(secrets), "--port", str(port), "--out", str(tmp_path / "served")],
        env=subprocess_env(), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert serve.stderr is not None
    assert serve.stderr.readline().startswith("osmosis-run serve: listening on")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            body = {"rollout_id": "r1", "initial_messages": [{"role": "user", "content": "hi"}],
                    "chat_completions_url": "http://127.0.0.1:9/v1", "label": "calm hi?"}  # fmt: skip
            token = client.post("/rollout", json=body).json()["polling_lease_token"]
            deadline = time.monotonic() + 30
            while (answer := client.get("/rollout/r1/result", headers={LEASE: token}).json())[
                "status"
            ] not in ("success", "failure"):
                assert time.monotonic() < deadline, answer
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=30)
    assert serve.returncode == 0
    assert (answer["status"], answer["sample"]["reward"]) == ("success", 1.0)
    [line] = results(tmp_path / "served")
    assert line.messages is not None
    assert line.messages[-1]["content"] == "calm hi? [REDACTED]"  # [env], [secrets], its config
    assert SECRET not in every_file_text(tmp_path / "served")


def test_validate_reads_a_workspace_config_too(cli: Cli, workspace: Path) -> None:
    os.environ["WS_TOKEN"] = SECRET
    result = cli(
        "validate", "--config", config_of(workspace),
        "--dataset-file", str(workspace / "data" / "rows.jsonl"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("rows.jsonl: 1 row, 0 invalid; selected 1 row x 2 samples = "
                                  "2 rollouts\n")  # fmt: skip


def test_unknown_sections_are_named(cli: Cli, workspace: Path) -> None:
    path = config_of(workspace, "[training]\nlr = 1\n[llm]\nmodel = 'x'\n")
    result = cli("eval", "--config", path, "--dataset-file", "x.jsonl")
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {path}: unknown sections [training], [llm]; known: [experiment], [evaluation], "
        "[env], [secrets], [advanced], [workflow_config], [grader_config], [serve]\n"
    )


@pytest.mark.parametrize(
    ("extra", "drop", "message"),
    [
        ("", 'rollout = "echo"\n', '{path}: [experiment] needs "rollout" (the code is '
         "rollouts/<rollout>/<entrypoint>)"),
        ("", "\n[evaluation]", '{path}: unknown key "experiment.n"; known: rollout, entrypoint, '
         "model_path, dataset, branch, commit_sha"),
    ],
)  # fmt: skip
def test_experiment_mistakes_are_one_line(
    cli: Cli, workspace: Path, extra: str, drop: str, message: str
) -> None:
    path = config_of(workspace, extra, drop=drop)
    result = cli("eval", "--config", path, "--dataset-file", "x.jsonl")
    assert result.exit_code == 2
    assert result.stderr == f"error: {message.format(path=path)}\n"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('rollout = "echo"', 'rollout = "../echo"',
         '{path}: experiment.rollout "../echo" must be one folder name under rollouts/'),
        ('rollout = "echo"', 'rollout = "nope"',
         '{path}: experiment.rollout "nope": no folder {ws}/rollouts/nope; check the name'),
        ('entrypoint = "main.py"', 'entrypoint = "../../x.py"',
         '{path}: experiment.entrypoint "../../x.py" must stay inside {ws}/rollouts/echo'),
        ('entrypoint = "main.py"', 'entrypoint = "serve.py"',
         '{path}: experiment.entrypoint "serve.py": no Python file {ws}/rollouts/echo/serve.py; '
         "check the name"),
        ('MOOD = "calm"', "mood = 'calm'",
         '{path}: [env] name "mood" must match ^[A-Z_][A-Z0-9_]*$ (e.g. LOG_LEVEL)'),
        ('MOOD = "calm"', "_OSMOSIS_X = 'calm'",
         '{path}: [env] name "_OSMOSIS_X": names starting with _OSMOSIS_ are reserved by the '
         "Osmosis platform; choose another"),
        ('MOOD = "calm"', "MOOD = 3",
         '{path}: env.MOOD must be a string (got int); quote it: MOOD = "3"'),
        ('required = ["WS_TOKEN"]', 'required = ["ws"]',
         '{path}: secret name "ws" must match ^[A-Z][A-Z0-9_]*$ (e.g. MY_SECRET)'),
        ('required = ["WS_TOKEN"]', 'required = ["A", "A"]',
         "{path}: secrets.required names A twice"),
        ('required = ["WS_TOKEN"]', 'names = ["A"]',
         '{path}: [secrets] only has "required"; unknown key(s): names'),
        ('required = ["WS_TOKEN"]', 'required = ["MOOD"]',
         "MOOD in both [env] and [secrets]: each variable comes from one place; keep secrets in "
         "[secrets] only"),
    ],
)  # fmt: skip
def test_workspace_config_mistakes_are_one_line(
    cli: Cli, workspace: Path, old: str, new: str, message: str
) -> None:
    path = workspace / "configs" / "eval" / "echo.toml"
    path.write_text(textwrap.dedent(CONFIG).replace(old, new))
    os.environ["WS_TOKEN"] = SECRET
    result = cli("eval", "--config", str(path), "--dataset-file", "x.jsonl")
    assert result.exit_code == 2
    ws = workspace.resolve()
    assert result.stderr == f"error: {message.format(path=path, ws=ws)}\n"


def test_no_dataset_names_the_dataset_file_option(cli: Cli, workspace: Path) -> None:
    os.environ["WS_TOKEN"] = SECRET
    result = cli("eval", "--config", config_of(workspace))
    assert result.exit_code == 2
    assert result.stderr == (
        "error: no dataset: give --dataset-file FILE (or DATASET); experiment.dataset names a "
        "platform dataset, which osmosis-run does not fetch\n"
    )


def test_dataset_and_dataset_file_must_agree(cli: Cli, workspace: Path) -> None:
    result = cli("eval", "a.jsonl", "--dataset-file", "b.jsonl", "--workflow", "m:W")
    assert result.exit_code == 2
    assert result.stderr == "error: DATASET a.jsonl and --dataset-file b.jsonl differ; give one\n"


def test_an_entrypoint_with_two_workflows_asks_which(cli: Cli, workspace: Path) -> None:
    main = workspace / "rollouts" / "echo" / "main.py"
    main.write_text(main.read_text() + "\n\nclass Echo2(Echo):\n    pass\n")
    os.environ["WS_TOKEN"] = SECRET
    result = cli(
        "eval", "--config", config_of(workspace), "--dataset-file",
        str(workspace / "data" / "rows.jsonl"), "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {main.resolve()}: several AgentWorkflow classes (Echo, Echo2); pick one with "
        "--workflow main:Echo\n"
    )
    chosen = cli(
        "eval", "--config", config_of(workspace), "--dataset-file",
        str(workspace / "data" / "rows.jsonl"), "--out", "run", "--workflow", "main:Echo2",
    )  # fmt: skip
    assert chosen.exit_code == 0, chosen.output


def test_a_module_level_local_backend_is_what_runs(cli: Cli, workspace: Path) -> None:
    main = workspace / "rollouts" / "echo" / "main.py"
    main.write_text(
        main.read_text()
        + "\n\nfrom osmosis_run import LocalBackend\n\n"
        + "class Loud(EchoConfig):\n    pass\n\n"
        + "backend = LocalBackend(workflow=Echo, grader=Exact, "
        + "workflow_config=EchoConfig(name='b', suffix='?!'))\n"
    )
    os.environ["WS_TOKEN"] = SECRET
    write_jsonl(
        workspace / "data" / "rows.jsonl", [{"user_prompt": "hi", "ground_truth": "calm hi?!"}]
    )
    result = cli(
        "eval", "--config", config_of(workspace), "--dataset-file",
        str(workspace / "data" / "rows.jsonl"), "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert {x.reward for x in results(Path("run"))} == {1.0}
    assert 'workflow_config = "main:backend.workflow_config"' in Path("run/run.toml").read_text()


def test_a_secrets_file_value_wins_over_the_environment_even_empty(
    cli: Cli, workspace: Path
) -> None:
    os.environ["WS_TOKEN"] = SECRET
    Path("secrets.env").write_text("WS_TOKEN=\n")
    result = cli(
        "validate", "--config", config_of(workspace), "--secrets-file", "secrets.env",
        "--dataset-file", str(workspace / "data" / "rows.jsonl"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert os.environ["WS_TOKEN"] == ""


def test_an_empty_environment_variable_is_no_secret(cli: Cli, workspace: Path) -> None:
    os.environ["WS_TOKEN"] = ""
    Path("secrets.env").write_text("OTHER=1\n")
    result = cli(
        "validate", "--config", config_of(workspace), "--secrets-file", "secrets.env",
        "--dataset-file", str(workspace / "data" / "rows.jsonl"),
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr == (
        "error: [secrets] requires WS_TOKEN, not set in secrets.env or the environment: export "
        "it, or give --secrets-file FILE (a dotenv file of NAME=value lines)\n"
    )


def test_a_malformed_secrets_file_names_the_line(cli: Cli, workspace: Path) -> None:
    Path("secrets.env").write_text(f"# local\n\nWS_TOKEN {SECRET}\n")
    result = cli(
        "eval", "--config", config_of(workspace), "--secrets-file", "secrets.env",
        "--dataset-file", str(workspace / "data" / "rows.jsonl"), "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr == "error: secrets.env:3: expected NAME=value (a dotenv line)\n"
    assert not Path("run").exists()


@pytest.mark.skipif(
    importlib.util.find_spec("osmosis_ai") is not None, reason="osmosis_ai is installed here"
)
def test_osmosis_ai_code_without_osmosis_ai_installed_says_what_to_do(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "theirs.py").write_text("from osmosis_ai.rollout import AgentWorkflow\n")
    write_jsonl(tmp_path / "rows.jsonl", [{"prompt": "p"}])
    result = cli("eval", "rows.jsonl", "--workflow", "theirs:W")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == (
        'error: importing "theirs" (for "theirs:W") raised ModuleNotFoundError: No module named '
        "'osmosis_ai'; the code is written for osmosis-ai: install it (Python >= 3.12), or port "
        "the import lines to osmosis_run"
    )
