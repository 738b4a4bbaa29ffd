"""``osmosis-run eval --server`` against osmosis-run's own server (``create_rollout_server``,
``osmosis-run serve``), on a real uvicorn on loopback.

The same statuses and rewards as an in-process eval, 429 back-off for the Retry-After, lease
renewal on long polls, Ctrl-C (a real SIGINT) cancelling the server's rollouts with an exact
resume, and a server killed mid-run.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS_DIR, results, subprocess_env, write_jsonl
from remote_fake import served
from test_remote_eval import FLOWS, eval_process, free_port, mixed_rows, verdicts, wait_for
from typer.testing import Result

from osmosis_run.sdk.backend import LocalBackend
from osmosis_run.server import create_rollout_server

Cli = Callable[..., Result]


class Busy(LocalBackend):
    """A backend that has no capacity the first ``refusals`` times it is asked."""

    refusals = 0

    def has_capacity(self) -> bool:
        if Busy.refusals > 0:
            Busy.refusals -= 1
            return False
        return True


@pytest.fixture
def serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., tuple[str, Any]]]:
    """``url, app = serve(**create_rollout_server options)``, in a thread of this process."""
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    contexts: list[Any] = []

    def start(backend_class: type[LocalBackend] = LocalBackend, **options: Any) -> tuple[str, Any]:
        backend = backend_class(workflow="remote_flows:Mixed", grader="remote_flows:Judge")
        app = create_rollout_server(
            backend=backend, configure_logging=False, out=tmp_path / "served", **options
        )
        context = served(app)
        contexts.append(context)
        return context.__enter__(), app

    yield start
    for context in reversed(contexts):
        context.__exit__(None, None, None)


def test_osmosis_runs_server_gives_the_statuses_and_rewards_of_an_in_process_eval(
    cli: Cli, tmp_path: Path, serve: Callable[..., tuple[str, Any]]
) -> None:
    url, _ = serve()
    data = write_jsonl(tmp_path / "d.jsonl", mixed_rows())
    common = [str(data), "--samples", "2", "--agent-timeout", "1"]
    here = cli("eval", *common, *FLOWS, "--out", "here")
    there = cli("eval", *common, "--server", url, "--out", "there")
    assert (here.exit_code, there.exit_code) == (3, 3)
    assert verdicts(tmp_path / "there") == verdicts(tmp_path / "here")
    assert {line.status for line in results(tmp_path / "there")} == {
        "success", "failure", "timeout", "removed", "ungraded",
    }  # fmt: skip
    # The server recorded the same rollouts in its own run directory; the two that timed out
    # on the client's side end there a moment later (their cancellation is recorded too).
    deadline = time.monotonic() + 15
    while len(results(tmp_path / "served")) < 12 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(line.rollout_id for line in results(tmp_path / "served")) == sorted(
        f"{row['id']}.s{sample}" for row in mixed_rows() for sample in (0, 1)
    )


@pytest.mark.slow
def test_a_429_waits_for_its_retry_after(
    cli: Cli, tmp_path: Path, serve: Callable[..., tuple[str, Any]]
) -> None:
    url, _ = serve(Busy)
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a", "ground_truth": "a"}])
    Busy.refusals = 1
    started = time.monotonic()
    done = cli("eval", str(data), "--server", url, "--out", "run")
    assert done.exit_code == 0, done.stderr
    assert time.monotonic() - started >= 4.9  # osmosis-run's server says Retry-After: 5
    assert Busy.refusals == 0
    assert [(line.status, line.reward) for line in results(tmp_path / "run")] == [("success", 1.0)]


def test_long_polls_renew_the_lease_of_osmosis_runs_server(
    cli: Cli, tmp_path: Path, serve: Callable[..., tuple[str, Any]]
) -> None:
    url, _ = serve(result_wait_timeout_sec=0.1, polling_lease_timeout_sec=0.3)
    rows = [
        {
            "id": "slow",
            "prompt": "a",
            "ground_truth": "a",
            "metadata": {"kind": "sleep", "sleep": 1.0},
        }
    ]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    assert cli("eval", str(data), "--server", url, "--out", "run").exit_code == 0
    assert [(line.status, line.reward) for line in results(tmp_path / "run")] == [("success", 1.0)]


@pytest.mark.slow
def test_ctrl_c_cancels_on_osmosis_runs_server_and_the_resume_is_exact(
    tmp_path: Path, serve: Callable[..., tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    monkeypatch.setenv("REMOTE_GATE", str(gate))
    url, app = serve()
    service = app.state.rollouts
    rows = [
        {"id": f"r{i}", "prompt": "a", "ground_truth": "a", "metadata": {"kind": "gate" if i >= 2 else "echo"}}
        for i in range(6)
    ]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    args = [str(data), "--server", url, "--out", "run", "-c", "3"]
    child = eval_process(*args, cwd=tmp_path)
    # r0 and r1 recorded, r2-r4 waiting at the gate on the server
    wait_for(lambda: len(results(tmp_path / "run")) == 2 and len(service.table.in_flight()) == 3)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=30)
    assert child.returncode == 130, stderr
    wait_for(lambda: not service.table.in_flight(), 5)  # cancelled there, not left running
    cancelled = [e for e in service.table.entries.values() if str(e.status) == "cancelled"]
    assert len(cancelled) == 3
    assert sorted(line.rollout_id for line in results(tmp_path / "run")) == ["r0.s0", "r1.s0"]
    gate.unlink()
    resumed = eval_process(*args, cwd=tmp_path)
    _, stderr = resumed.communicate(timeout=30)
    assert resumed.returncode == 0, stderr
    lines = results(tmp_path / "run")
    assert sorted(line.rollout_id for line in lines) == [f"r{i}.s0" for i in range(6)]
    assert {(line.status, line.reward) for line in lines} == {("success", 1.0)}


def serve_process(port: int, cwd: Path, out: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(
        [sys.executable, "-m", "osmosis_run", "serve", "-w", "remote_flows:Mixed",
         "-g", "remote_flows:Judge", "--port", str(port), "--out", out],
        cwd=cwd,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_for(lambda: _listening(port), 30)
    return child


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_osmosis_run_serve_killed_mid_run_stops_the_run_and_it_resumes(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = serve_process(port, tmp_path, "served-1")
    rows = [
        {"id": f"r{i}", "prompt": "a", "ground_truth": "a", "metadata": {"kind": "sleep", "sleep": 0.3}}
        for i in range(40)
    ]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    args = [str(data), "--server", url, "--out", "run", "-c", "2"]
    child = eval_process(*args, cwd=tmp_path)
    try:
        wait_for(lambda: len(results(tmp_path / "run")) >= 3)
    finally:
        first.kill()
        first.wait()
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 4, stderr
    assert [line for line in stderr.splitlines() if line.startswith("error:")] == [
        f"error: rollout server {url} unreachable (POST /rollout: ConnectError: Connection refused)"
    ]
    second = serve_process(port, tmp_path, "served-2")
    try:
        resumed = eval_process(*args, cwd=tmp_path)
        _, stderr = resumed.communicate(timeout=60)
    finally:
        second.send_signal(signal.SIGINT)
        second.wait(30)
    assert resumed.returncode == 0, stderr
    lines = results(tmp_path / "run")
    assert sorted(line.rollout_id for line in lines) == sorted(f"r{i}.s0" for i in range(40))
    assert {line.status for line in lines} == {"success"}
