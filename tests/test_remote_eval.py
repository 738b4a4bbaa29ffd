"""``osmosis-run eval --server URL``: rollouts run on a rollout server (protocol "0.4").

The server is ``tests/remote_fake.py``'s, served by a real uvicorn on loopback (in a thread, or
as a process of its own where it must be killed); eval runs in-process through the CLI, or as a
real subprocess where it must get a real SIGINT.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS_DIR, results, subprocess_env, write_jsonl
from remote_fake import ProtocolServer, served
from typer.testing import Result

from osmosis_run.sdk.backend import LocalBackend

Cli = Callable[..., Result]
FLOWS = ["-w", "remote_flows:Mixed", "-g", "remote_flows:Judge"]


def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        workflow="remote_flows:Mixed", grader="remote_flows:Judge", artifact_root=tmp_path / "srv"
    )


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """Start a protocol server in a thread: ``url, app = server(**options)``."""
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    stack: list[Any] = []

    def start(**options: Any) -> tuple[str, ProtocolServer]:
        app = ProtocolServer(backend(tmp_path), **options)
        context = served(app)
        url = context.__enter__()
        stack.append(context)
        return url, app

    yield start
    for context in reversed(stack):
        context.__exit__(None, None, None)


def mixed_rows() -> list[dict[str, Any]]:
    """Rows that give every status: pass, fail, agent error, removed, ungraded."""
    return [
        {"id": "right", "prompt": "a", "ground_truth": "a"},
        {"id": "wrong", "prompt": "b", "ground_truth": "x"},
        {"id": "boom", "prompt": "c", "ground_truth": "c", "metadata": {"kind": "raise"}},
        {"id": "gone", "prompt": "d", "ground_truth": "d", "metadata": {"remove": True}},
        {"id": "free", "prompt": "e"},
        {
            "id": "late",
            "prompt": "f",
            "ground_truth": "f",
            "metadata": {"kind": "sleep", "sleep": 5},
        },
    ]


def verdicts(run_dir: Path) -> dict[str, tuple[Any, ...]]:
    return {
        line.rollout_id: (line.status, line.reward, line.passed, line.error_category)
        for line in results(run_dir)
    }


def test_a_server_gives_the_statuses_and_rewards_of_an_in_process_eval(
    cli: Cli, tmp_path: Path, server: Callable[..., Any]
) -> None:
    url, app = server()
    data = write_jsonl(tmp_path / "d.jsonl", mixed_rows())
    common = [str(data), "--samples", "2", "--agent-timeout", "1"]
    here = cli("eval", *common, *FLOWS, "--out", "here")
    there = cli("eval", *common, "--server", url, "--out", "there")
    assert (here.exit_code, there.exit_code) == (3, 3)  # the same verdict: errors over budget
    assert verdicts(tmp_path / "there") == verdicts(tmp_path / "here")
    assert len(verdicts(tmp_path / "there")) == 12
    assert {line.status for line in results(tmp_path / "there")} == {
        "success", "failure", "timeout", "removed", "ungraded",
    }  # fmt: skip
    # Each rollout went to the server with its own id, its timeouts, and its row.
    sent = {post["rollout_id"]: post for post in app.posts}
    assert set(sent) == set(verdicts(tmp_path / "there"))
    late = sent["late.s1"]
    assert (late["agent_timeout_sec"], late["grader_timeout_sec"]) == (1.0, None)
    assert late["initial_messages"] == [{"role": "user", "content": "f"}]
    assert (late["label"], late["metadata"]) == ("f", {"kind": "sleep", "sleep": 5})
    assert late["extra_fields"]["osmosis_run"]["rollout_id"] == "late.s1"


def test_a_served_rollout_leaves_a_trajectory_and_says_where_its_artifacts_are(
    cli: Cli, tmp_path: Path, server: Callable[..., Any]
) -> None:
    url, _ = server()
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "right", "prompt": "a", "ground_truth": "a"}])
    assert cli("eval", str(data), "--server", url, "--out", "run").exit_code == 0
    rollout = tmp_path / "run" / "rollouts" / "right.s0"
    doc = json.loads((rollout / "result.json").read_text())
    assert doc["artifacts"] == {
        "shipped": [],
        "omitted": [],
        "unavailable": f"kept by the rollout server {url} (rollout right.s0)",
    }
    assert (doc["status"], doc["reward"]) == ("success", 1.0)
    trajectory = json.loads((rollout / "trajectory.json").read_text())
    assert [step["message"] for step in trajectory["steps"]][-1] == "a"
    assert not (rollout / "artifacts").exists() or not any((rollout / "artifacts").iterdir())


def test_jsonl_streams_each_served_rollout(
    cli: Cli, tmp_path: Path, server: Callable[..., Any]
) -> None:
    url, _ = server()
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [{"id": f"r{i}", "prompt": "a", "ground_truth": "a"} for i in range(3)],
    )
    done = cli("eval", str(data), "--server", url, "--out", "run", "--jsonl")
    assert done.exit_code == 0
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(line["rollout_id"] for line in lines) == ["r0.s0", "r1.s0", "r2.s0"]


def test_admission_backs_off_on_429_for_the_retry_after(
    cli: Cli, tmp_path: Path, server: Callable[..., Any]
) -> None:
    url, app = server(capacity=1, retry_after="0.05")
    rows = [
        {
            "id": f"r{i}",
            "prompt": "a",
            "ground_truth": "a",
            "metadata": {"kind": "sleep", "sleep": 0.1},
        }
        for i in range(4)
    ]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    started = time.monotonic()
    done = cli("eval", str(data), "--server", url, "--out", "run", "-c", "4")
    assert done.exit_code == 0, done.stderr
    assert [line.status for line in results(tmp_path / "run")] == ["success"] * 4
    assert app.refused >= 3  # three rollouts waited their turn at least once
    assert time.monotonic() - started >= 0.4  # one at a time on the server


def test_polls_renew_the_lease_of_a_rollout_longer_than_it(
    cli: Cli, tmp_path: Path, server: Callable[..., Any]
) -> None:
    url, app = server(wait_s=0.1, lease_s=0.3)
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
    assert [line.status for line in results(tmp_path / "run")] == ["success"]
    assert app.polls >= 5  # a long poll at most every 0.1 s: 1 s of work holds the 0.3 s lease


def test_a_retry_runs_under_a_fresh_id(
    cli: Cli, tmp_path: Path, server: Callable[..., Any]
) -> None:
    url, app = server()
    rows = [{"id": "f", "prompt": "a", "ground_truth": "a", "metadata": {"kind": "flaky"}}]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    assert cli("eval", str(data), "--server", url, "--out", "run", "--retries", "1").exit_code == 0
    [line] = results(tmp_path / "run")
    assert (line.status, line.attempts) == ("success", 2)
    first, second = (post["rollout_id"] for post in app.posts)
    assert first == "f.s0"
    assert second.startswith("f.s0~")
    assert len(second) == len("f.s0~") + 8


def test_an_id_the_server_still_holds_is_sent_again_under_a_fresh_one(
    cli: Cli, tmp_path: Path, server: Callable[..., Any]
) -> None:
    url, app = server()
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a", "ground_truth": "a"}])
    assert cli("eval", str(data), "--server", url, "--out", "one").exit_code == 0
    assert cli("eval", str(data), "--server", url, "--out", "two").exit_code == 0  # 409, then
    assert [post["rollout_id"][:5] for post in app.posts] == ["r.s0", "r.s0~"]
    assert verdicts(tmp_path / "one") == verdicts(tmp_path / "two")


def test_the_default_concurrency_is_the_servers(
    cli: Cli, tmp_path: Path, server: Callable[..., Any]
) -> None:
    url, app = server(max_concurrent=2)
    rows = [
        {"id": f"r{i}", "prompt": "a", "metadata": {"kind": "sleep", "sleep": 0.2}}
        for i in range(4)
    ]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    peak = 0

    original = app._admit

    def admit(body: dict[str, Any]) -> Any:
        nonlocal peak
        peak = max(peak, app.active() + 1)
        return original(body)

    app._admit = admit
    assert cli("eval", str(data), "--server", url, "--out", "run").exit_code == 0
    assert peak == 2


# --- what cannot start: one line, exit 2, the run directory released -----------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_refused_connection_is_one_line_and_exit_2(cli: Cli, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a"}])
    refused = cli("eval", str(data), "--server", url, "--out", "run")
    assert refused.exit_code == 2
    assert refused.stderr.splitlines()[-1] == (
        f"error: --server {url}: cannot reach the rollout server (ConnectError: All connection "
        "attempts failed); check the URL and that the server is running"
    )
    assert results(tmp_path / "run") == []


def test_a_wrong_key_is_one_line_and_exit_2(
    cli: Cli, tmp_path: Path, server: Callable[..., Any]
) -> None:
    url, app = server(api_key="the-right-key-1234")
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a"}])
    wrong = cli(
        "eval", str(data), "--server", url, "--server-api-key", "wrong-key-12345", "--out", "run"
    )
    assert (wrong.exit_code, wrong.stderr.splitlines()[-1]) == (
        2,
        f"error: --server {url}: the server refused the key (HTTP 401); give its key with "
        "--server-api-key or OSMOSIS_RUN_SERVER_API_KEY",
    )
    assert app.posts == []
    # The right key, from the environment; the run directory was released.
    os.environ["OSMOSIS_RUN_SERVER_API_KEY"] = "the-right-key-1234"
    try:
        assert cli("eval", str(data), "--server", url, "--out", "run").exit_code == 0
    finally:
        del os.environ["OSMOSIS_RUN_SERVER_API_KEY"]
    assert [line.status for line in results(tmp_path / "run")] == ["ungraded"]
    assert "the-right-key" not in (tmp_path / "run" / "run.toml").read_text()


def test_a_url_that_is_not_a_rollout_server_is_one_line_and_exit_2(
    cli: Cli, tmp_path: Path, server: Callable[..., Any]
) -> None:
    url, _ = server()
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a"}])
    wrong = cli("eval", str(data), "--server", f"{url}/nothing-here", "--out", "run")
    assert (wrong.exit_code, wrong.stderr.splitlines()[-1]) == (
        2,
        f"error: --server {url}/nothing-here: GET /health answered HTTP 404; is this a rollout "
        "server (protocol 0.4)?",
    )


def test_a_malformed_server_url_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a"}])
    bad = cli("eval", str(data), "--server", "localhost:8000")
    assert (bad.exit_code, bad.stderr.splitlines()[-1]) == (
        2,
        "error: --server (command line): Value error, must be an http:// or https:// URL, such as "
        "http://127.0.0.1:8000 (got 'localhost:8000')",
    )
    assert not (tmp_path / "runs").exists()


def test_workflow_options_are_not_used_with_a_server_and_eval_says_so(
    cli: Cli, tmp_path: Path, server: Callable[..., Any]
) -> None:
    url, _ = server()
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a", "ground_truth": "a"}])
    done = cli("eval", str(data), *FLOWS, "--server", url, "--out", "run")
    assert done.exit_code == 0
    assert done.stderr.splitlines()[0] == (
        "osmosis-run: --server runs the server's own workflow and grader; --workflow, --grader "
        "not used"
    )


def test_the_fingerprint_holds_the_server_not_its_key(
    cli: Cli, tmp_path: Path, server: Callable[..., Any]
) -> None:
    url, _ = server()
    other, _ = server()
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a", "ground_truth": "a"}])
    assert cli("eval", str(data), "--server", url, "--out", "run").exit_code == 0
    fingerprint = json.loads((tmp_path / "run" / "fingerprint.json").read_text())
    assert fingerprint["server"] == url
    assert "workflow" not in fingerprint
    elsewhere = cli("eval", str(data), "--server", other, "--out", "run")
    assert (elsewhere.exit_code, elsewhere.stderr) == (
        2,
        "error: run holds a run made with other inputs (changed: server); add --fresh to start "
        "it over, or choose another --out\n",
    )
    here = cli("eval", str(data), *FLOWS, "--out", "run")  # in-process: another run too
    assert here.exit_code == 2
    assert here.stderr.startswith("error: run holds a run made with other inputs (changed: ")
    # Another key for the same server is the same run: it resumes (nothing left to do).
    again = cli("eval", str(data), "--server", url, "--server-api-key", "k" * 16, "--out", "run")
    assert again.exit_code == 0


# --- real processes: Ctrl-C, a server killed mid-run --------------------------------------


def eval_process(*args: str, cwd: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "osmosis_run", "eval", *args],
        cwd=cwd,
        env=subprocess_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


@pytest.mark.slow
def test_ctrl_c_cancels_the_rollouts_on_the_server_and_the_resume_is_exact(
    tmp_path: Path, server: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    monkeypatch.setenv("REMOTE_GATE", str(gate))  # the server's workflows run in this process
    url, app = server()
    rows = [
        {
            "id": f"r{i}",
            "prompt": "a",
            "ground_truth": "a",
            "metadata": {"kind": "gate" if i >= 2 else "echo"},
        }
        for i in range(6)
    ]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    args = [str(data), "--server", url, "--out", "run", "-c", "3"]
    child = eval_process(*args, cwd=tmp_path)
    # r0 and r1 recorded, r2-r4 waiting at the gate on the server
    wait_for(lambda: len(results(tmp_path / "run")) == 2 and app.active() == 3)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=30)
    assert child.returncode == 130, stderr
    in_flight = {rid for rid, rollout in app.rollouts.items() if rollout.status == "cancelled"}
    assert len(in_flight) == 3
    assert {rid for cancel in app.cancels for rid in cancel["ids"]} == in_flight
    assert sorted(line.rollout_id for line in results(tmp_path / "run")) == ["r0.s0", "r1.s0"]
    gate.unlink()
    resumed = eval_process(*args, cwd=tmp_path)
    _, stderr = resumed.communicate(timeout=30)
    assert resumed.returncode == 0, stderr
    lines = results(tmp_path / "run")
    assert sorted(line.rollout_id for line in lines) == [f"r{i}.s0" for i in range(6)]
    assert {(line.status, line.reward) for line in lines} == {("success", 1.0)}


def serve_process(port: int, cwd: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, str(TESTS_DIR / "remote_fake.py"), "--workflow", "remote_flows:Mixed",
         "--grader", "remote_flows:Judge", "--port", str(port), "--artifacts", str(cwd / "srv")],
        cwd=cwd,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert child.stdout is not None
    assert child.stdout.readline() == "listening\n"
    return child


def stop(child: subprocess.Popen[str]) -> None:
    child.kill()
    child.wait()
    assert child.stdout is not None
    child.stdout.close()


@pytest.mark.slow
def test_a_server_killed_mid_run_stops_the_run_and_it_resumes(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = serve_process(port, tmp_path)
    rows = [
        {
            "id": f"r{i}",
            "prompt": "a",
            "ground_truth": "a",
            "metadata": {"kind": "sleep", "sleep": 0.3},
        }
        for i in range(40)
    ]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    args = [str(data), "--server", url, "--out", "run", "-c", "2"]
    child = eval_process(*args, cwd=tmp_path)
    try:
        wait_for(lambda: len(results(tmp_path / "run")) >= 3)
    finally:
        stop(first)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 4, stderr
    assert [line for line in stderr.splitlines() if line.startswith("error:")] == [
        f"error: rollout server {url} unreachable (POST /rollout: ConnectError: Connection refused)"
    ]
    kept = results(tmp_path / "run")
    assert 3 <= len(kept) < 40
    second = serve_process(port, tmp_path)
    try:
        resumed = eval_process(*args, cwd=tmp_path)
        _, stderr = resumed.communicate(timeout=60)
    finally:
        stop(second)
    assert resumed.returncode == 0, stderr
    lines = results(tmp_path / "run")
    assert sorted(line.rollout_id for line in lines) == sorted(f"r{i}.s0" for i in range(40))
    assert {line.status for line in lines} == {"success"}


def test_a_dry_run_with_a_server_reads_the_rows_and_runs_nothing(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a"}, "{not json"])
    dry = cli("eval", str(data), "--server", f"http://127.0.0.1:{free_port()}", "--dry-run")
    assert dry.exit_code == 2  # the dataset's problem, not the workflow the server holds
    assert dry.output.splitlines()[-1] == f"{data}: 2 rows, 1 invalid"
    assert not (tmp_path / "runs").exists()


def test_the_whole_attempt_is_bounded_even_by_a_server_that_ignores_its_timeouts(
    cli: Cli, tmp_path: Path, server: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_run.backends import remote

    monkeypatch.setattr(remote, "DEADLINE_MARGIN_S", 0.2)
    url, app = server(enforce_timeouts=False)
    rows = [
        {"id": "r", "prompt": "a", "ground_truth": "a", "metadata": {"kind": "sleep", "sleep": 30}}
    ]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    started = time.monotonic()
    done = cli("eval", str(data), "--server", url, "--out", "run", "--agent-timeout", "0.3")
    assert time.monotonic() - started < 10
    assert done.exit_code == 3
    [line] = results(tmp_path / "run")
    assert (line.status, line.error_message) == ("timeout", "rollout exceeded its 0.5s deadline")
    wait_for(lambda: app.cancelled_running == ["r.s0"], 5)  # and it was cancelled there


def test_behind_a_proxy_setting_eval_goes_through_httpx_and_gives_the_same_results(
    cli: Cli,
    tmp_path: Path,
    server: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, _ = server()
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # httpx honours NO_PROXY for loopback
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    data = write_jsonl(tmp_path / "d.jsonl", mixed_rows())
    common = [str(data), "--agent-timeout", "1"]
    here = cli("eval", *common, *FLOWS, "--out", "here")
    there = cli("eval", *common, "--server", url, "--out", "there")
    assert (here.exit_code, there.exit_code) == (3, 3)
    assert verdicts(tmp_path / "there") == verdicts(tmp_path / "here")
    assert len(results(tmp_path / "there")) == 6
