"""Every example of the documentation runs: the files under docs/examples/ that the tutorial and
how-to pages include (pymdownx.snippets, ``--8<-- "tutorial/my_rollout.py"``).

Workflows and graders run through the real CLI (``osmosis-run`` in a child process, from a
temporary folder holding copies of the example files); shell examples run with ``bash -e``;
config files are loaded by ``eval`` or ``validate``. Examples that call a model run against the
fake upstream of tests/fake_upstream.py on loopback. The Ray example is validated only (a Ray
cluster is out of the main suite's reach; tests/test_ray.py runs the backend itself).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]
from fake_upstream import Reply, serve_upstream

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
TUTORIAL = EXAMPLES / "tutorial"
HOW_TO = EXAMPLES / "how-to"
PAGES = sorted([*(DOCS / "tutorial").glob("*.md"), *(DOCS / "how-to").glob("*.md")])
# A snippet line of pymdownx.snippets: --8<-- "path" or --8<-- "path:section".
SNIPPET = re.compile(r'^\s*--8<-- "([^"]+)"\s*$', re.MULTILINE)
BIN = Path(sys.executable).parent  # the environment's osmosis-run and python


def _includes() -> list[tuple[Path, str, str | None]]:
    """(page, file, section) for every snippet the tutorial and how-to pages include."""
    found = []
    for page in PAGES:
        for target in SNIPPET.findall(page.read_text(encoding="utf-8")):
            name, _, section = target.partition(":")
            found.append((page, name, section or None))
    return found


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OSMOSIS_", "GITHUB_"))}
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env["NO_COLOR"] = "1"
    env.update(extra)
    return env


def _copy(dest: Path, *sources: Path) -> None:
    """Copy files, and folders' contents, into ``dest``."""
    for source in sources:
        if source.is_dir():
            shutil.copytree(source, dest, dirs_exist_ok=True)
        else:
            shutil.copy(source, dest / source.name)


def _bundled(dest: Path) -> None:
    """The clone's configs/ and datasets/, which the bundled example's commands use."""
    shutil.copytree(ROOT / "configs", dest / "configs")
    shutil.copytree(ROOT / "datasets", dest / "datasets")


def _bash(script: Path, cwd: Path, **env: str) -> str:
    """Run a shell example with ``bash -e`` from ``cwd``; return stdout and stderr together."""
    done = subprocess.run(
        ["bash", "-e", str(script)],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def _osmosis_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "osmosis-run"), *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _results(run_dir: Path) -> list[dict[str, object]]:
    lines = (run_dir / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def _process(args: list[str], cwd: Path, ready: str) -> Iterator[subprocess.Popen[str]]:
    """Start a long-running command; yield once a line holding ``ready`` reached its stdout or
    stderr; then stop it with SIGINT."""
    proc = subprocess.Popen(
        args, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if ready in line:
                break
        else:
            pytest.fail(f"{args} ended before saying {ready!r}: {''.join(seen)}")
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


# The pages and their files


def test_the_readme_example_is_the_tutorial_file() -> None:
    example = (TUTORIAL / "my_rollout.py").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"```python\n{example}```" in readme


def test_every_snippet_a_page_includes_exists() -> None:
    missing = []
    for page, name, section in _includes():
        path = EXAMPLES / name
        if not path.is_file():
            missing.append(f"{page.name}: {name}")
        elif section and f"--8<-- [start:{section}]" not in path.read_text(encoding="utf-8"):
            missing.append(f"{page.name}: {name}:{section}")
    assert missing == []


def test_every_example_file_is_used_by_a_page() -> None:
    used = {name for _, name, _ in _includes()}
    files = [*TUTORIAL.rglob("*"), *HOW_TO.rglob("*")]
    orphans = [
        str(path.relative_to(EXAMPLES))
        for path in files
        if path.is_file() and "__pycache__" not in path.parts
        if str(path.relative_to(EXAMPLES)) not in used
    ]
    assert orphans == []


# Tutorial


def test_tutorial_first_workflow(tmp_path: Path) -> None:
    _copy(tmp_path, TUTORIAL)
    output = _bash(TUTORIAL / "validate.sh", tmp_path)
    assert output.count("data.jsonl: 3 rows, 0 invalid") == 2


def test_tutorial_init(tmp_path: Path) -> None:
    output = _bash(TUTORIAL / "init.sh", tmp_path)
    assert "created my-agent/my_agent_rollout.py" in output
    assert "finished my-agent/runs/" in output


def test_tutorial_bundled_example(tmp_path: Path) -> None:
    _bundled(tmp_path)
    output = _bash(TUTORIAL / "bundled.sh", tmp_path)
    assert "rollouts         300 of 300: 6 failure, 294 success" in output
    assert "ok: error budget: held (6 of 300 rollouts failed, 2.00%; 5.00% allowed)" in output


def test_tutorial_first_run(tmp_path: Path) -> None:
    _copy(tmp_path, TUTORIAL)
    output = _bash(TUTORIAL / "first-run.sh", tmp_path)
    assert "pass rate        66.7% (2/3 at reward >= 1)" in output
    assert ", 3 already done -> runs/data-" in output
    assert [r["rollout_id"] for r in _results(tmp_path / "runs/n4")][:4] == [
        f"a.s{i}" for i in range(4)
    ]
    rewards = {r["rollout_id"]: r["reward"] for r in _results(tmp_path / "runs/v2")}
    assert rewards == {"a.s0": 1.0, "b.s0": 1.0, "c.s0": 0.0}


def test_tutorial_reading_results(tmp_path: Path) -> None:
    _copy(tmp_path, TUTORIAL)
    output = _bash(TUTORIAL / "reading-results.sh", tmp_path)
    first = '{"rollout_id":"a.s0","status":"success","reward":1,"passed":true,'
    assert first + '"metrics":{"answer_chars":5}}' in output
    assert "status    success   reward 0.000   passed no" in output
    assert "c.s0      0.000  THANK YOU  THANKS" in output
    assert (tmp_path / "runs/v2/rollouts/c.s0/artifacts/answer.txt").read_text() == "THANKS\n"
    assert (tmp_path / "report.html").stat().st_size > 0


def test_tutorial_ci_job(tmp_path: Path) -> None:
    _copy(tmp_path, TUTORIAL)
    output = _bash(TUTORIAL / "ci.sh", tmp_path)
    assert re.findall(r"exit code \d+", output) == ["exit code 0", "exit code 1", "exit code 1"]
    assert "FAILED: pass_rate >= 0.9: failed by 0.2333 (0.6667)" in output
    assert "ok: mean regression <= 0.05: held" in output
    suite = ET.parse(tmp_path / "report.xml").getroot()
    assert suite.get("tests") == "3"


def test_tutorial_error_budget(tmp_path: Path) -> None:
    _bundled(tmp_path)
    output = _bash(TUTORIAL / "budget.sh", tmp_path)
    assert "FAILED: error budget: exceeded (6 of 300 rollouts failed, 2.00%; 0 allowed)" in output
    assert "exit code 3" in output


def test_tutorial_github_actions_workflow(tmp_path: Path) -> None:
    """The workflow's osmosis-run steps run as GitHub would run them (bash -e, the step summary
    file set); the setup steps (checkout, Python, pip) are GitHub's."""
    _copy(tmp_path, TUTORIAL)
    workflow = yaml.safe_load((TUTORIAL / "github-actions.yml").read_text(encoding="utf-8"))
    steps = [
        s["run"] for s in workflow["jobs"]["eval"]["steps"] if "osmosis-run" in s.get("run", "")
    ]
    assert steps
    summary = tmp_path / "step-summary.md"
    for number, step in enumerate(steps):
        script = tmp_path / f"step{number}.sh"
        script.write_text(step)
        _bash(script, tmp_path, GITHUB_STEP_SUMMARY=str(summary))
    assert "### osmosis-run eval: ci" in summary.read_text(encoding="utf-8")
    uploaded = workflow["jobs"]["eval"]["steps"][-1]["with"]["path"].split()
    assert all((tmp_path / path).exists() for path in uploaded)


# How-to guides


@pytest.mark.slow
def test_call_a_model(tmp_path: Path) -> None:
    _copy(tmp_path, HOW_TO / "call-a-model")
    with serve_upstream(default=Reply(content="The answer is 4, with 8 legs.")) as up:
        run = _osmosis_run(
            tmp_path, "eval", "--config", "chat.toml", "--chat-completions-url", up.url
        )
        assert run.returncode == 0, run.stderr
        seen = len(up.chat_requests())
        replay = _osmosis_run(
            tmp_path, "eval", "--config", "chat.toml", "--chat-completions-url", up.url,
            "--model-cache-mode", "read-only", "--out", "runs/replay",
        )  # fmt: skip
        assert replay.returncode == 0, replay.stderr
        assert len(up.chat_requests()) == seen  # every answer came from the cache
    assert "model cache      2 of 2 calls replayed" in replay.stderr
    (run_dir,) = (tmp_path / "runs").glob("rows-*")
    lines = _results(run_dir)
    assert [line["reward"] for line in lines] == [1.0, 1.0]
    assert all(isinstance(line["usage"], dict) for line in lines)
    calls = (run_dir / "rollouts/sum.s0/model_calls.jsonl").read_text().splitlines()
    assert json.loads(calls[0])["request"]["model"] == "Qwen/Qwen2.5-7B-Instruct"


def test_serve(tmp_path: Path) -> None:
    _copy(tmp_path, TUTORIAL / "my_rollout.py", HOW_TO / "serve")
    port = _free_port()
    args = [str(BIN / "osmosis-run"), "serve", "--config", "serve.toml", "--port", str(port)]
    with _process(args, tmp_path, ready="listening on"):
        output = _bash(HOW_TO / "serve/protocol.sh", tmp_path, PORT=str(port))
    assert '"status":"success"' in output
    assert _results(tmp_path / "runs/served")[0]["rollout_id"] == "r-1"


def test_serve_main_is_an_asgi_app_uvicorn_serves(tmp_path: Path) -> None:
    _copy(tmp_path, TUTORIAL / "my_rollout.py", HOW_TO / "serve/main.py")
    port = _free_port()
    args = [str(BIN / "python"), "-m", "uvicorn", "main:app", "--port", str(port)]
    health_url = f"http://127.0.0.1:{port}/health"
    with (
        _process(args, tmp_path, ready="Uvicorn running on"),
        urllib.request.urlopen(health_url, timeout=10) as answer,
    ):
        assert answer.status == 200
        health = json.loads(answer.read())
    assert health["concurrency"]["max_concurrent"] == 8


def test_eval_on_a_server(tmp_path: Path) -> None:
    _copy(tmp_path, TUTORIAL / "my_rollout.py", TUTORIAL / "data.jsonl")
    output = _bash(HOW_TO / "eval-on-a-server/server-eval.sh", tmp_path, PORT=str(_free_port()))
    assert "ok: pass_rate >= 0.5: held (0.6667)" in output
    assert len(_results(tmp_path / "runs/remote")) == 12
    assert json.loads((tmp_path / "runs/served/summary.json").read_text())["rollouts"] == 12


def test_ray_config_loads(tmp_path: Path) -> None:
    """validate loads ray.toml (backend, actors and all) without starting Ray."""
    _copy(tmp_path, TUTORIAL / "my_rollout.py", TUTORIAL / "data.jsonl", HOW_TO / "ray")
    run = _osmosis_run(tmp_path, "validate", "--config", "ray.toml")
    assert run.returncode == 0, run.stderr
    assert "data.jsonl: 3 rows, 0 invalid" in run.stderr + run.stdout


@pytest.mark.slow
def test_processes(tmp_path: Path) -> None:
    _copy(tmp_path, TUTORIAL / "my_rollout.py", TUTORIAL / "data.jsonl", HOW_TO / "processes")
    output = _bash(HOW_TO / "processes/processes.sh", tmp_path)
    assert (
        "failure crash.s0: agent_error: the worker process running this rollout died "
        "(SIGSEGV) 4 times in a row" in output
    )
    stuck = {r["rollout_id"]: r for r in _results(tmp_path / "runs/stuck")}
    assert len(stuck) == 5
    assert stuck["stuck.s0"]["status"] == "timeout"
    # A rollout sharing stuck.s0's worker may miss its deadline too; the others succeed.
    assert {r["status"] for r in stuck.values()} <= {"success", "timeout"}
    assert "success" in {r["status"] for r in stuck.values()}


def test_osmosis_project(tmp_path: Path) -> None:
    _copy(tmp_path, HOW_TO / "osmosis-projects")
    output = _bash(HOW_TO / "osmosis-projects/workspace.sh", tmp_path)
    assert "pass rate        100.0% (4/4 at reward >= 1)" in output
    run_dir = tmp_path / "workspace/runs/my-rollout"
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert "s3cret-token-value" not in path.read_text(encoding="utf-8"), path


@pytest.mark.slow
def test_regrade_and_compare(tmp_path: Path) -> None:
    _copy(tmp_path, TUTORIAL / "my_rollout.py", HOW_TO / "regrade-and-compare")
    output = _bash(HOW_TO / "regrade-and-compare/regrade.sh", tmp_path)
    assert "fail -> pass (12): r01.s0" in output
    assert "FAILED: pass_rate regression <= 0.05: failed" in output
    assert "exit code 1" in output
    fingerprint = json.loads((tmp_path / "runs/v1-lenient/fingerprint.json").read_text())
    assert fingerprint["graded_from"].endswith("v1")


@pytest.mark.slow
def test_resume_and_retries(tmp_path: Path) -> None:
    _copy(tmp_path, TUTORIAL / "my_rollout.py", TUTORIAL / "data.jsonl", HOW_TO / "resume")
    output = _bash(HOW_TO / "resume/resume.sh", tmp_path)
    assert "exit code 3" in output
    assert [r["status"] for r in _results(tmp_path / "runs/flaky")] == ["success"] * 3
    assert '"attempts":2}' in output


@pytest.mark.slow
def test_datasets(tmp_path: Path) -> None:
    _copy(tmp_path, TUTORIAL / "my_rollout.py", HOW_TO / "datasets")
    output = _bash(HOW_TO / "datasets/datasets.sh", tmp_path)
    assert "rows.jsonl: 5 rows, 0 invalid" in output
    assert 'bad.jsonl:3: "user_prompt" must be a string (got array)' in output
    assert "bad.jsonl: 4 rows, 3 invalid" in output
    assert "error: dataset rows.json is a .json file holding a JSON array" in output
    assert output.count("exit code 2") == 2
    assert '{"rollout_id":"5.s0","status":"ungraded","reward":null}' in output


@pytest.mark.slow
def test_budgets_time_limit(tmp_path: Path) -> None:
    _copy(tmp_path, TUTORIAL / "my_rollout.py", HOW_TO / "budgets")
    output = _bash(HOW_TO / "budgets/budgets.sh", tmp_path)
    assert output.count("exit code 124") == 2
    assert '"budget":"time_limit"' in output


def test_budgets_config(tmp_path: Path) -> None:
    """budgets.toml loads and runs within its budgets; a smaller token budget stops it (124)."""
    _copy(tmp_path, HOW_TO / "call-a-model/agent.py", HOW_TO / "budgets")
    with serve_upstream() as up:
        run = _osmosis_run(
            tmp_path, "eval", "--config", "budgets.toml", "--chat-completions-url", up.url,
            "--limit", "2", "--out", "runs/within",
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        stopped = _osmosis_run(
            tmp_path, "eval", "--config", "budgets.toml", "--chat-completions-url", up.url,
            "--max-tokens", "1", "--concurrency", "1", "--out", "runs/stopped",
        )  # fmt: skip
    assert stopped.returncode == 124, stopped.stderr


@pytest.mark.slow
def test_reports(tmp_path: Path) -> None:
    _bundled(tmp_path)
    output = _bash(HOW_TO / "reports/reports.sh", tmp_path)
    assert '{"rollouts":300,"pass_rate":0.8566666666666667,"errors":6}' in output
    assert "metadata.op=word_problem" in (tmp_path / "report.txt").read_text()
    for name in ("report.html", "report.xml", "diff.html"):
        assert (tmp_path / name).stat().st_size > 0


def test_view(tmp_path: Path) -> None:
    """Each command of view.sh serves (on a free port, without a browser) until Ctrl-C."""
    _copy(tmp_path, TUTORIAL / "my_rollout.py", TUTORIAL / "data.jsonl")
    for out in ("runs/first", "other/runs/calc-1a2b3c4d"):
        run = _osmosis_run(tmp_path, "eval", "data.jsonl", "-w", "my_rollout:EchoAgent", "-o", out)
        assert run.returncode == 0, run.stderr
    lines = (HOW_TO / "view/view.sh").read_text().splitlines()
    commands = [line.split("#")[0].split() for line in lines if line.startswith("osmosis-run")]
    assert len(commands) == 2
    for command in commands:
        if "--port" in command:
            command[command.index("--port") + 1] = "0"
        else:
            command += ["--port", "0", "--no-open"]
        args = [str(BIN / "osmosis-run"), *command[1:]]
        with _process(args, tmp_path, ready="http://127.0.0.1:") as proc:
            assert proc.poll() is None
