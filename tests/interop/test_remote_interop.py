"""Interop (b): ``osmosis-run eval --server`` against osmosis-ai 0.3.8's own ``create_rollout_server``.

The server is osmosis-ai's, under uvicorn, in a process of its own, running workflows written
for osmosis_ai (``OA_FLOWS``, written into the test's folder: this file never imports
osmosis_ai, so it type-checks anywhere); eval runs their osmosis_run twins (``remote_fake``)
in-process too, and the two runs must agree on every rollout's status and reward. Collected
only where osmosis_ai imports (Python >= 3.12; see tests/conftest.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import results, subprocess_env, write_jsonl
from test_remote import (
    FLOWS,
    eval_process,
    free_port,
    mixed_rows,
    verdicts,
    wait_for,
)
from typer.testing import Result

Cli = Callable[..., Result]

# The osmosis_ai twins of remote_fake.Mixed and remote_fake.Judge.
OA_FLOWS = """
import asyncio, os
from pathlib import Path
from osmosis_ai.rollout import AgentWorkflow, Grader

class Mixed(AgentWorkflow):
    async def run(self, ctx):
        meta = ctx.metadata or {}
        kind = meta.get("kind", "echo")
        if kind == "raise":
            raise RuntimeError("workflow exploded")
        if kind == "sleep":
            await asyncio.sleep(float(meta.get("sleep", 0.3)))
        if kind == "gate":
            while Path(os.environ["REMOTE_GATE"]).exists():
                await asyncio.sleep(0.02)
        return [*ctx.prompt, {"role": "assistant", "content": str(ctx.prompt[-1]["content"])}]

class Judge(Grader):
    async def grade(self, ctx):
        if (ctx.metadata or {}).get("remove"):
            ctx.sample.remove_sample = True
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == ctx.label else 0.0)
"""

SERVE = """
import sys, uvicorn
from osmosis_ai.rollout import LocalBackend
from osmosis_ai.rollout.server import create_rollout_server
import oa_flows
port, wait, lease = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
backend = LocalBackend(workflow=oa_flows.Mixed, grader=oa_flows.Judge)
app = create_rollout_server(
    backend=backend, configure_logging=False, result_wait_timeout_sec=wait,
    polling_lease_timeout_sec=lease,
)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""


@pytest.fixture
def osmosis_ai_server(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start osmosis-ai's server: ``url = osmosis_ai_server(wait=1.0, lease=3.0)``."""
    (tmp_path / "oa_flows.py").write_text(OA_FLOWS)
    children: list[subprocess.Popen[bytes]] = []

    def start(*, wait: float = 1.0, lease: float = 3.0, **env: str) -> str:
        port = free_port()
        child = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(port), str(wait), str(lease)],
            cwd=tmp_path,
            env=subprocess_env(
                PYTHONPATH=f"{tmp_path}:{subprocess_env()['PYTHONPATH']}",
                HOME=str(tmp_path),
                _OSMOSIS_ROLLOUT_ARTIFACT_ROOT=str(tmp_path / "oa-artifacts"),
                **env,
            ),
        )
        children.append(child)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert child.poll() is None, "osmosis-ai's server did not start"
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    return url
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "osmosis-ai's server did not answer"
            time.sleep(0.1)

    yield start
    for child in children:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def test_eval_on_osmosis_ais_server_agrees_with_in_process_eval(
    cli: Cli, tmp_path: Path, osmosis_ai_server: Callable[..., str]
) -> None:
    url = osmosis_ai_server()
    data = write_jsonl(tmp_path / "d.jsonl", mixed_rows())
    common = [str(data), "--samples", "2", "--agent-timeout", "1"]
    here = cli("eval", *common, *FLOWS, "--out", "here")
    there = cli("eval", *common, "--server", url, "--out", "there")
    assert (here.exit_code, there.exit_code) == (3, 3), there.stderr
    assert verdicts(tmp_path / "there") == verdicts(tmp_path / "here")
    assert {line.status for line in results(tmp_path / "there")} == {
        "success", "failure", "timeout", "removed", "ungraded",
    }  # fmt: skip
    doc = json.loads((tmp_path / "there" / "rollouts" / "right.s0" / "result.json").read_text())
    assert doc["artifacts"]["unavailable"] == f"kept by the rollout server {url} (rollout right.s0)"


def test_long_polls_renew_osmosis_ais_lease(
    cli: Cli, tmp_path: Path, osmosis_ai_server: Callable[..., str]
) -> None:
    url = osmosis_ai_server(wait=0.2, lease=0.5)
    rows = [
        {
            "id": "slow",
            "prompt": "a",
            "ground_truth": "a",
            "metadata": {"kind": "sleep", "sleep": 1.5},
        }
    ]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    assert cli("eval", str(data), "--server", url, "--out", "run").exit_code == 0
    assert [(line.status, line.reward) for line in results(tmp_path / "run")] == [("success", 1.0)]


@pytest.mark.slow
def test_ctrl_c_cancels_on_osmosis_ais_server_and_the_resume_is_exact(
    tmp_path: Path, osmosis_ai_server: Callable[..., str]
) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    url = osmosis_ai_server(REMOTE_GATE=str(gate))
    rows: list[dict[str, Any]] = [
        {"id": f"r{i}", "prompt": "a", "ground_truth": "a", "metadata": {"kind": "gate" if i >= 2 else "echo"}}
        for i in range(6)
    ]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    args = [str(data), "--server", url, "--out", "run", "-c", "3"]
    child = eval_process(*args, cwd=tmp_path)
    # r0 and r1 recorded, r2-r4 waiting at the gate on the server
    wait_for(
        lambda: (
            len(results(tmp_path / "run")) == 2
            and httpx.get(f"{url}/health").json()["lifecycle"]["active_rollouts"] == 3
        )
    )
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=30)
    assert child.returncode == 130, stderr
    # The server cancelled the three in flight: nothing is active there any more.
    wait_for(lambda: httpx.get(f"{url}/health").json()["lifecycle"]["active_rollouts"] == 0, 5)
    assert sorted(line.rollout_id for line in results(tmp_path / "run")) == ["r0.s0", "r1.s0"]
    gate.unlink()
    resumed = eval_process(*args, cwd=tmp_path)
    _, stderr = resumed.communicate(timeout=30)
    assert resumed.returncode == 0, stderr
    lines = results(tmp_path / "run")
    assert sorted(line.rollout_id for line in lines) == [f"r{i}.s0" for i in range(6)]
    assert {(line.status, line.reward) for line in lines} == {("success", 1.0)}
