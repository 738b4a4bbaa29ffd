"""Osmosis workspaces: a scaffold made by osmosis-ai's own ``osmosis rollout init``, evaluated
unchanged, and a workspace whose eval config has [env] and [secrets]."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import results, write_jsonl
from osmosis_ai.rollout import ExecutionRequest, LocalBackend

from interop.test_interop_parity import their_view

SECRET = "tok-interop-secret-9f8e7d6c5b"
OSMOSIS = Path(sys.executable).parent / "osmosis"


def osmosis_init(workspace: Path, name: str) -> None:
    """An Osmosis workspace (a git worktree with its four folders) and ``osmosis rollout init``."""
    for folder in ("rollouts", "configs/eval", "configs/training", "data"):
        (workspace / folder).mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(workspace)], check=True, timeout=30)
    done = subprocess.run(
        [str(OSMOSIS), "rollout", "init", name],
        cwd=workspace, env={"HOME": str(workspace.parent), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def every_file_text(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


def test_a_scaffold_from_osmosis_rollout_init_is_evaluated_unchanged(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    osmosis_init(workspace, "my-rollout")
    write_jsonl(workspace / "data" / "rows.jsonl", [
        {"system_prompt": "Be brief.", "user_prompt": "2*3", "ground_truth": "6"},
        {"user_prompt": "2*4", "ground_truth": 8},
    ])  # fmt: skip
    main = workspace / "rollouts" / "my-rollout" / "main.py"
    before = main.read_bytes()
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # the scaffold's [secrets] required name
    result = cli(
        "eval", "--config", str(workspace / "configs" / "eval" / "my-rollout.toml"),
        "--dataset-file", str(workspace / "data" / "rows.jsonl"), "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 3, result.output  # the scaffold's run() is not implemented yet
    assert main.read_bytes() == before
    lines = results(tmp_path / "run")
    message = (
        "MyAgentWorkflow.run() received {} prompt message(s) but the workflow body is not "
        "implemented yet."
    )
    assert [(x.status, x.error_category, x.error_message) for x in lines] == [
        ("failure", "agent_error", message.format(2)),
        ("failure", "agent_error", message.format(1)),
    ]
    # osmosis-ai's own LocalBackend, on the scaffold's own classes, agrees.
    spec = importlib.util.spec_from_file_location("scaffold_main", main)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("_OSMOSIS_ROLLOUT_ARTIFACT_ROOT", str(tmp_path / "theirs"))
    backend = LocalBackend(workflow=module.MyAgentWorkflow, grader=module.MyGrader)
    for line in lines:
        document = json.loads(
            (tmp_path / "run" / "rollouts" / line.rollout_id / "result.json").read_text()
        )
        outcome = asyncio.run(backend.execute(ExecutionRequest(**document["request"])))
        assert their_view(outcome) == (line.status, line.error_category, line.reward)
    run_toml = (tmp_path / "run" / "run.toml").read_text()
    assert 'model_path = "openai/gpt-5-mini"' in run_toml
    assert SECRET not in every_file_text(tmp_path / "run")


WORKSPACE_MAIN = '''
    """A rollout written for osmosis-ai: a module-level LocalBackend, as osmosis-ai's serve uses."""
    import os

    from osmosis_ai.rollout import (
        AgentWorkflow, AgentWorkflowConfig, AgentWorkflowOutput, Grader, LocalBackend,
    )


    class GreetConfig(AgentWorkflowConfig):
        greeting: str = "hello"


    class Greet(AgentWorkflow):
        async def run(self, ctx):
            token = os.environ["SERVICE_TOKEN"]  # the [secrets] name, from --secrets-file
            text = f"{os.environ['GREETING']} {ctx.config.greeting} {token}"
            return AgentWorkflowOutput(
                messages=[*ctx.prompt, {"role": "assistant", "content": text}],
                metrics={"token_length": float(len(token))},
            )


    class Judge(Grader):
        async def grade(self, ctx):
            ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"].startswith(ctx.label) else 0.0)


    backend = LocalBackend(
        workflow=Greet, workflow_config=GreetConfig(name="greet", greeting="world"), grader=Judge
    )
'''

WORKSPACE_CONFIG = """
    [experiment]
    rollout = "greet"
    entrypoint = "main.py"
    model_path = "openai/gpt-5-mini"
    dataset = "greetings"

    [evaluation]
    n = 2
    pass_threshold = 1.0

    [env]
    GREETING = "hi"

    [secrets]
    required = ["SERVICE_TOKEN"]

    [advanced]
    note = "recorded, not used"
"""


@pytest.mark.parametrize(
    "backend", [(), ("--backend", "processes", "--workers", "1")], ids=["local", "processes"]
)
def test_a_workspace_config_runs_with_env_and_secrets_and_the_secret_in_no_file(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: tuple[str, ...]
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "rollouts" / "greet").mkdir(parents=True)
    (workspace / "configs" / "eval").mkdir(parents=True)
    (workspace / "rollouts" / "greet" / "main.py").write_text(textwrap.dedent(WORKSPACE_MAIN))
    config = workspace / "configs" / "eval" / "greet.toml"
    config.write_text(textwrap.dedent(WORKSPACE_CONFIG))
    (tmp_path / "secrets.env").write_text(f"# for the run\nexport SERVICE_TOKEN='{SECRET}'\n")
    write_jsonl(tmp_path / "rows.jsonl", [{"user_prompt": "greet me", "ground_truth": "hi world"}])
    monkeypatch.delenv("GREETING", raising=False)
    monkeypatch.delenv("SERVICE_TOKEN", raising=False)
    result = cli(
        "eval", "--config", str(config), "--dataset-file", "rows.jsonl",
        "--secrets-file", "secrets.env", "--out", "run", *backend,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = results(tmp_path / "run")
    assert [(x.status, x.reward, x.metrics) for x in lines] == [
        ("success", 1.0, {"token_length": float(len(SECRET))})
    ] * 2
    assert lines[0].messages is not None
    assert lines[0].messages[-1]["content"] == "hi world [REDACTED]"
    assert SECRET not in every_file_text(tmp_path / "run")
    assert SECRET not in result.output
    run_toml = (tmp_path / "run" / "run.toml").read_text()
    assert 'workflow = "main:backend.workflow_cls"' in run_toml
    assert 'required = [\n    "SERVICE_TOKEN",\n]' in run_toml
    assert 'note = "recorded, not used"' in run_toml
