"""Interop (a): osmosis-ai 0.3.8's own ``RolloutClient`` driving ``osmosis-run serve``.

The server is a real ``osmosis-run serve`` subprocess on loopback; the client is the SDK's,
unchanged: run, status transitions (running, grading), cancel, ``wait_idle``, Bearer auth.
Collected only where osmosis_ai imports (Python >= 3.12):

    PYTHONPATH=. /work/venv312/bin/python -m pytest tests/interop -q
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import subprocess_env
from serving import free_port

client_module: Any = pytest.importorskip(
    "osmosis_ai.rollout.client", reason="osmosis-ai (Python >= 3.12) is not installed"
)
RolloutClient = client_module.RolloutClient

KEY = "interop-key-0123456789"
MESSAGES = [{"role": "user", "content": "hi"}]
URL = "http://127.0.0.1:9/v1"


class Server:
    """A running ``osmosis-run serve``: its URL and run directory; ``stop()`` with SIGINT."""

    def __init__(self, proc: subprocess.Popen[str], url: str, out: Path) -> None:
        self.proc, self.url, self.out = proc, url, out

    def stop(self) -> Path:
        """Stop it (exit code 0); its run directory then holds everything it served."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0
        return self.out


@pytest.fixture(params=[(), ("--workers", "2")], ids=["in-process", "workers"])
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    """``osmosis-run serve`` of the test flows, with an API key, its rollouts in its own process
    or in worker processes; stopped with SIGINT."""
    port = free_port()
    out = tmp_path / "served"
    command = [
        sys.executable,
        "-m",
        "osmosis_run",
        "serve",
        "-w",
        "server_flows:Upper",
        "-g",
        "server_flows:Exact",
        "--port",
        str(port),
        "--out",
        str(out),
        "--result-wait",
        "1",
        "--lease",
        "10",
        "-c",
        "8",
        *request.param,
    ]
    env = subprocess_env(OSMOSIS_ROLLOUT_API_KEY=KEY)
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("osmosis-run serve: listening on")
    running = Server(proc, f"http://127.0.0.1:{port}", out)
    try:
        yield running
    finally:
        running.stop()


def _client(url: str) -> Any:
    return RolloutClient(url=url, api_key=KEY, admission_timeout_sec=10)


def test_the_sdk_client_runs_a_rollout(server: Server) -> None:
    url = server.url

    async def main() -> Any:
        client = _client(url)
        try:
            return await client.run_rollout(
                MESSAGES, URL, "one", label="HI", extra_fields={"step": 3}
            )
        finally:
            await client.aclose()

    result = asyncio.run(main())
    assert str(result.status) == "success"
    assert result.sample.reward == 1.0
    assert [m["content"] for m in result.sample.messages] == ["hi", "HI"]
    out = server.stop()  # a result is on the wire before the writer has written it
    trajectory = json.loads((out / "rollouts" / "one" / "trajectory.json").read_text())
    assert trajectory["extra"]["osmosis"]["request_extra_fields"] == {"step": 3}


def test_the_sdk_handle_sees_running_then_grading_then_the_result(server: Server) -> None:
    url = server.url

    async def main() -> tuple[str, str, Any]:
        client = _client(url)
        try:
            handle = await client.run_rollout_async(
                MESSAGES, URL, "steps", label="HI", metadata={"sleep": 0.5, "grade_sleep": 1.5}
            )
            running = await handle.wait_for_running()
            grading = await handle.wait_for_grading()
            return str(running), str(grading), await handle
        finally:
            await client.aclose()

    running, grading, result = asyncio.run(main())
    assert running in ("running", "grading")
    assert grading == "grading"
    assert str(result.status) == "success"


def test_the_sdk_client_cancels_and_waits_idle(server: Server) -> None:
    url = server.url

    async def main() -> tuple[Any, Any, dict[str, Any]]:
        client = _client(url)
        try:
            handle = await client.run_rollout_async(
                MESSAGES, URL, "doomed", label="HI", metadata={"sleep": 60}
            )
            others = [
                await client.run_rollout_async(MESSAGES, URL, f"ok-{i}", label="HI")
                for i in range(4)
            ]
            await handle.wait_for_running()
            cancelled = await client.cancel_rollout("doomed")
            result = await handle
            await asyncio.gather(*others)
            idle = await client.wait_idle(timeout_sec=20, poll_interval_sec=0.1)
            return cancelled, result, idle
        finally:
            await client.aclose()

    cancelled, result, idle = asyncio.run(main())
    assert cancelled.dispositions == {"doomed": "cancelled_running"}
    assert str(result.status) == "cancelled"
    assert result.err_message == "cancelled"
    assert idle["lifecycle"] == {"accepting_rollouts": True, "active_rollouts": 0}
    out = server.stop()
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((x["rollout_id"], x["status"]) for x in lines) == [
        ("doomed", "failure"),
        ("ok-0", "success"),
        ("ok-1", "success"),
        ("ok-2", "success"),
        ("ok-3", "success"),
    ]


def test_the_sdk_client_without_the_key_is_refused(server: Server) -> None:
    url = server.url
    protocol_error = client_module.RolloutProtocolError

    async def main() -> int:
        client = RolloutClient(url=url)
        try:
            await client.health()
        except protocol_error as exc:
            return int(exc.status_code)
        finally:
            await client.aclose()
        return 200

    assert asyncio.run(main()) == 401
