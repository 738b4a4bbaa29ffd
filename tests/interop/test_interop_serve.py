"""A scaffold from ``osmosis rollout init``, served by ``osmosis-run serve`` and driven by
osmosis-ai's own ``RolloutClient``: unchanged (osmosis_ai classes), and with its import lines
changed to osmosis_run (then also by its own ``python main.py``)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from conftest import TESTS_DIR, results
from osmosis_ai.rollout.client import RolloutClient

from interop.test_interop_workspace import osmosis_init

REPO = TESTS_DIR.parent
NOT_IMPLEMENTED = (
    "MyAgentWorkflow.run() received 1 prompt message(s) but the workflow body is not "
    "implemented yet."
)


def port_imports(source: str) -> str:
    """The import-line port: ``from osmosis_ai.rollout[.x] import N`` -> ``from osmosis_run ...``."""

    def replace(match: re.Match[str]) -> str:
        home = "osmosis_run.server" if match.group(1) == ".server" else "osmosis_run"
        return f"from {home} import {match.group(2)}"

    return re.sub(r"^from osmosis_ai\.rollout((?:\.\w+)*) import (.+)$", replace, source,
                  flags=re.MULTILINE)  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serving(argv: list[str], cwd: Path, port: int) -> Iterator[subprocess.Popen[str]]:
    """Start a server process, wait for /health, stop it with SIGINT at the end."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(cwd)]),
           "_OSMOSIS_ROLLOUT_PORT": str(port)}  # fmt: skip
    process = subprocess.Popen(argv, cwd=cwd, env=env, text=True, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.1)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stderr is not None:
            process.stderr.close()


def drive(port: int, rows: list[tuple[str, str]]) -> list[tuple[str, str | None, str | None]]:
    """Each (rollout id, prompt) run through osmosis-ai's RolloutClient: status, category, msg."""

    async def run_all() -> list[tuple[str, str | None, str | None]]:
        client = RolloutClient(url=f"http://127.0.0.1:{port}")
        try:
            answers = []
            for rollout_id, prompt in rows:
                result = await client.run_rollout(
                    initial_messages=[{"role": "user", "content": prompt}],
                    chat_completions_url="http://127.0.0.1:9/v1",
                    rollout_id=rollout_id, label="6", agent_timeout_sec=30,
                )  # fmt: skip
                category = None if result.err_category is None else str(result.err_category)
                answers.append((str(result.status), category, result.err_message))
            return answers
        finally:
            await client.aclose()

    return asyncio.run(run_all())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ported", "workers"),
    [(False, ()), (True, ()), (False, ("--workers", "1"))],
    ids=["unchanged", "import-line-ported", "unchanged-on-workers"],
)
def test_the_scaffold_is_served_by_osmosis_run_serve(
    tmp_path: Path, ported: bool, workers: tuple[str, ...]
) -> None:
    workspace = tmp_path / "ws"
    osmosis_init(workspace, "served")
    rollout = workspace / "rollouts" / "served"
    main = rollout / "main.py"
    if ported:
        main.write_text(port_imports(main.read_text()))
        assert re.search(r"^(from|import) osmosis_ai", main.read_text(), re.MULTILINE) is None
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "osmosis_run",
        "serve",
        "--workflow",
        "main:MyAgentWorkflow",
        "--grader",
        "main:MyGrader",
        "--port",
        str(port),
        "--out",
        str(tmp_path / "served"),
        *workers,
    ]
    with serving(argv, rollout, port) as process:  # fmt: skip
        answers = drive(port, [("r1", "2*3"), ("r2", "2*4")])
    assert process.returncode == 0
    assert answers == [("failure", "agent_error", NOT_IMPLEMENTED)] * 2
    assert sorted(line.rollout_id for line in results(tmp_path / "served")) == ["r1", "r2"]


@pytest.mark.slow
def test_the_ported_scaffold_serves_itself_with_osmosis_runs_create_rollout_server(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    osmosis_init(workspace, "self-served")
    rollout = workspace / "rollouts" / "self-served"
    main = rollout / "main.py"
    main.write_text(port_imports(main.read_text()))
    port = free_port()
    with serving([sys.executable, "main.py"], rollout, port):
        answers = drive(port, [("s1", "2*3")])
    assert answers == [("failure", "agent_error", NOT_IMPLEMENTED)]
