"""The remote executor (``osmosis_run/backends/remote.py``): ``eval --server URL`` runs each
rollout on a rollout server (protocol "0.4").

Each behaviour is tested once, against the servers it must hold with where they differ:
``fake`` (``tests/remote_fake.py``: the protocol as osmosis-ai 0.3.8 speaks it, its state
readable by the test) and ``serve`` (osmosis-run's own ``create_rollout_server``), each on a real
uvicorn on loopback (in a thread, or as a process of its own where it must be killed). eval runs
in-process through the CLI, or as a real subprocess where it must get a real SIGINT. The HTTP
client under the executor is tested in ``tests/test_http_client.py``; osmosis-ai's own server
in ``tests/interop/test_remote_interop.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS_DIR, results, subprocess_env, write_jsonl
from remote_fake import FINAL, ProtocolServer, served
from typer.testing import Result

from osmosis_run.backends.remote import RemoteExecutor
from osmosis_run.run.seam import Attempt
from osmosis_run.sdk.backend import LocalBackend
from osmosis_run.sdk.context import RolloutContext
from osmosis_run.sdk.types import ExecutionRequest
from osmosis_run.server import create_rollout_server

Cli = Callable[..., Result]
FLOWS = ["-w", "remote_fake:Mixed", "-g", "remote_fake:Judge"]
KINDS = ["fake", "serve"]


class Busy(LocalBackend):
    """A backend that has no capacity the first ``refusals`` times it is asked."""

    refusals = 0

    def has_capacity(self) -> bool:
        if Busy.refusals > 0:
            Busy.refusals -= 1
            return False
        return True


@dataclass
class Served:
    """A rollout server running in a thread of the test: what the tests read of either kind."""

    kind: str
    url: str
    app: Any
    out: Path  # ``serve``'s run directory

    def in_flight(self) -> int:
        if self.kind == "fake":
            return int(self.app.active())
        return len(self.app.state.rollouts.table.in_flight())

    def cancelled(self) -> set[str]:
        if self.kind == "fake":
            return {rid for rid, r in self.app.rollouts.items() if r.status == "cancelled"}
        entries = self.app.state.rollouts.table.entries
        return {rid for rid, entry in entries.items() if str(entry.status) == "cancelled"}

    def finished(self) -> list[str]:
        """The rollouts the server has finished (``serve``: recorded in its run directory)."""
        if self.kind == "fake":
            return sorted(rid for rid, r in self.app.rollouts.items() if r.status in FINAL)
        return sorted(line.rollout_id for line in results(self.out))


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Served]]:
    """Start a rollout server in a thread: ``served = server(kind, **options)``.

    ``wait_s`` and ``lease_s`` are the long poll's wait and the lease, for either kind; the other
    options go to ``ProtocolServer`` (fake) or ``create_rollout_server`` (serve), and
    ``backend_class`` picks serve's backend.
    """
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    contexts: list[Any] = []

    def start(kind: str = "fake", **options: Any) -> Served:
        backend_class = options.pop("backend_class", LocalBackend)
        backend = backend_class(
            workflow="remote_fake:Mixed", grader="remote_fake:Judge", artifact_root=tmp_path / "srv"
        )
        out = tmp_path / "served"
        if kind == "fake":
            app: Any = ProtocolServer(backend, **options)
        else:
            renamed = {"wait_s": "result_wait_timeout_sec", "lease_s": "polling_lease_timeout_sec"}
            options = {renamed.get(name, name): value for name, value in options.items()}
            app = create_rollout_server(
                backend=backend, configure_logging=False, out=out, **options
            )
        context = served(app)
        contexts.append(context)
        return Served(kind, context.__enter__(), app, out)

    yield start
    for context in reversed(contexts):
        context.__exit__(None, None, None)


def mixed_rows() -> list[dict[str, Any]]:
    """Rows that give every status: pass, fail, agent error, removed, ungraded, timeout."""
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def eval_process(*args: str, cwd: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "osmosis_run", "eval", *args],
        cwd=cwd,
        env=subprocess_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# --- a run on a server is the run in-process ------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_server_gives_the_statuses_and_rewards_of_an_in_process_eval(
    cli: Cli, tmp_path: Path, server: Callable[..., Served], kind: str
) -> None:
    served_ = server(kind)
    data = write_jsonl(tmp_path / "d.jsonl", mixed_rows())
    common = [str(data), "--samples", "2", "--agent-timeout", "1"]
    here = cli("eval", *common, *FLOWS, "--out", "here")
    there = cli("eval", *common, "--server", served_.url, "--out", "there")
    assert (here.exit_code, there.exit_code) == (3, 3)  # the same verdict: errors over budget
    assert verdicts(tmp_path / "there") == verdicts(tmp_path / "here")
    assert len(verdicts(tmp_path / "there")) == 12
    assert {line.status for line in results(tmp_path / "there")} == {
        "success", "failure", "timeout", "removed", "ungraded",
    }  # fmt: skip
    # The server finished the same rollouts (serve: recorded in its own run directory; the two
    # that timed out end there a moment later, their cancellation recorded too).
    ids = sorted(f"{row['id']}.s{sample}" for row in mixed_rows() for sample in (0, 1))
    wait_for(lambda: served_.finished() == ids, 15)
    if kind == "fake":  # only the fake keeps what it was sent: each rollout's id, timeouts, row
        sent = {post["rollout_id"]: post for post in served_.app.posts}
        assert sorted(sent) == ids
        late = sent["late.s1"]
        assert (late["agent_timeout_sec"], late["grader_timeout_sec"]) == (1.0, None)
        assert late["initial_messages"] == [{"role": "user", "content": "f"}]
        assert (late["label"], late["metadata"]) == ("f", {"kind": "sleep", "sleep": 5})
        assert late["extra_fields"]["osmosis_run"]["rollout_id"] == "late.s1"


def test_a_served_rollout_leaves_a_trajectory_and_says_where_its_artifacts_are(
    cli: Cli, tmp_path: Path, server: Callable[..., Served]
) -> None:
    url = server().url
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
    cli: Cli, tmp_path: Path, server: Callable[..., Served]
) -> None:
    url = server().url
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [{"id": f"r{i}", "prompt": "a", "ground_truth": "a"} for i in range(3)],
    )
    done = cli("eval", str(data), "--server", url, "--out", "run", "--jsonl")
    assert done.exit_code == 0
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(line["rollout_id"] for line in lines) == ["r0.s0", "r1.s0", "r2.s0"]


def test_behind_a_proxy_eval_goes_through_it_and_gives_the_same_results(
    cli: Cli,
    tmp_path: Path,
    server: Callable[..., Served],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = server().url
    data = write_jsonl(tmp_path / "d.jsonl", mixed_rows())
    common = [str(data), "--agent-timeout", "1"]
    here = cli("eval", *common, *FLOWS, "--out", "here")
    with forwarding_proxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        there = cli("eval", *common, "--server", url, "--out", "there")
    assert (here.exit_code, there.exit_code) == (3, 3), there.stderr
    assert verdicts(tmp_path / "there") == verdicts(tmp_path / "here")
    assert len(results(tmp_path / "there")) == 6
    assert proxy.seen[0] == f"GET {url}/health HTTP/1.1"
    assert sum(line == f"POST {url}/rollout HTTP/1.1" for line in proxy.seen) == 6


class _Forward(socketserver.BaseRequestHandler):
    """One request of an HTTP proxy: sent on to its origin with ``connection: close``, answered
    with the origin's whole answer, the connection closed."""

    def handle(self) -> None:
        proxy: Any = self.server
        data = b""
        while b"\r\n\r\n" not in data:
            data += self.request.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        length = next(
            (
                int(line.split(":")[1])
                for line in lines
                if line.lower().startswith("content-length")
            ),
            0,
        )
        while len(body) < length:
            body += self.request.recv(65536)
        proxy.seen.append(lines[0])
        method, target, version = lines[0].split(" ")
        origin, _, path = target.removeprefix("http://").partition("/")
        host, _, port = origin.partition(":")
        fields = [line for line in lines[1:] if not line.lower().startswith("connection")]
        sent = "\r\n".join([f"{method} /{path} {version}", *fields, "connection: close"])
        with socket.create_connection((host, int(port))) as upstream:
            upstream.sendall(sent.encode("latin-1") + b"\r\n\r\n" + body)
            while chunk := upstream.recv(65536):
                self.request.sendall(chunk)


@dataclass
class _Proxy:
    url: str
    seen: list[str]


@contextlib.contextmanager
def forwarding_proxy() -> Iterator[_Proxy]:
    """A plain HTTP forward proxy on loopback, keeping each request line it was sent."""
    proxy = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Forward)
    proxy.daemon_threads = True
    seen: list[str] = []
    proxy.seen = seen  # type: ignore[attr-defined]
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield _Proxy(f"http://127.0.0.1:{proxy.server_address[1]}", seen)
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join(5)


# --- admission, polls and ids -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fake", pytest.param("serve", marks=pytest.mark.slow)])
def test_admission_waits_out_a_429_for_its_retry_after(
    cli: Cli, tmp_path: Path, server: Callable[..., Served], kind: str
) -> None:
    if kind == "fake":  # room for one at a time; Retry-After: 0.05
        served_ = server(kind, capacity=1, retry_after="0.05")
        count, waited_s = 4, 0.4
    else:  # one refusal; osmosis-run's server says Retry-After: 5
        Busy.refusals = 1
        served_ = server(kind, backend_class=Busy)
        count, waited_s = 1, 4.9
    rows = [
        {"id": f"r{i}", "prompt": "a", "ground_truth": "a", "metadata": {"kind": "sleep", "sleep": 0.1}}
        for i in range(count)
    ]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    started = time.monotonic()
    done = cli("eval", str(data), "--server", served_.url, "--out", "run", "-c", "4")
    assert done.exit_code == 0, done.stderr
    assert time.monotonic() - started >= waited_s
    assert [(line.status, line.reward) for line in results(tmp_path / "run")] == [
        ("success", 1.0)
    ] * count
    if kind == "fake":
        assert served_.app.refused >= 3  # three rollouts waited their turn at least once
    else:
        assert Busy.refusals == 0


@pytest.mark.parametrize("kind", KINDS)
def test_polls_renew_the_lease_of_a_rollout_longer_than_it(
    cli: Cli, tmp_path: Path, server: Callable[..., Served], kind: str
) -> None:
    served_ = server(kind, wait_s=0.1, lease_s=0.3)
    rows = [
        {"id": "slow", "prompt": "a", "ground_truth": "a", "metadata": {"kind": "sleep", "sleep": 1.0}}
    ]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    assert cli("eval", str(data), "--server", served_.url, "--out", "run").exit_code == 0
    assert [(line.status, line.reward) for line in results(tmp_path / "run")] == [("success", 1.0)]
    if kind == "fake":  # a long poll at most every 0.1 s: 1 s of work holds the 0.3 s lease
        assert served_.app.polls >= 5


def test_a_retry_runs_under_a_fresh_id(
    cli: Cli, tmp_path: Path, server: Callable[..., Served]
) -> None:
    served_ = server()
    rows = [{"id": "f", "prompt": "a", "ground_truth": "a", "metadata": {"kind": "flaky"}}]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    done = cli("eval", str(data), "--server", served_.url, "--out", "run", "--retries", "1")
    assert done.exit_code == 0
    [line] = results(tmp_path / "run")
    assert (line.status, line.attempts) == ("success", 2)
    first, second = (post["rollout_id"] for post in served_.app.posts)
    assert first == "f.s0"
    assert second.startswith("f.s0~")
    assert len(second) == len("f.s0~") + 8


def test_an_id_the_server_still_holds_is_sent_again_under_a_fresh_one(
    cli: Cli, tmp_path: Path, server: Callable[..., Served]
) -> None:
    served_ = server()
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a", "ground_truth": "a"}])
    assert cli("eval", str(data), "--server", served_.url, "--out", "one").exit_code == 0
    assert cli("eval", str(data), "--server", served_.url, "--out", "two").exit_code == 0  # 409
    assert [post["rollout_id"][:5] for post in served_.app.posts] == ["r.s0", "r.s0~"]
    assert verdicts(tmp_path / "one") == verdicts(tmp_path / "two")


def test_the_default_concurrency_is_the_servers(
    cli: Cli, tmp_path: Path, server: Callable[..., Served]
) -> None:
    served_ = server(max_concurrent=2)
    app = served_.app
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
    assert cli("eval", str(data), "--server", served_.url, "--out", "run").exit_code == 0
    assert peak == 2


def test_the_whole_attempt_is_bounded_even_by_a_server_that_ignores_its_timeouts(
    server: Callable[..., Served],
) -> None:
    served_ = server(enforce_timeouts=False)
    request = ExecutionRequest(
        id="r.s0",
        prompt=[{"role": "user", "content": "a"}],
        label="a",
        metadata={"kind": "sleep", "sleep": 30},
        agent_timeout_sec=0.3,
    )
    attempt = Attempt(request, 1, RolloutContext(rollout_id="r.s0"))

    async def run() -> Any:
        executor = RemoteExecutor(served_.url, deadline_margin_s=0.2)
        await executor.open()
        try:
            return await executor.run(attempt, _Deadline())
        finally:
            await executor.close()

    started = time.monotonic()
    done = asyncio.run(run())
    assert time.monotonic() - started < 10
    workflow = done.outcome.workflow
    assert (workflow.status, workflow.err_category, workflow.err_message) == (
        "failure",
        "timeout",
        "rollout exceeded its 0.5s deadline",
    )
    wait_for(lambda: served_.app.cancelled_running == ["r.s0"], 5)  # and it was cancelled there


class _Deadline:
    """The engine's deadline rule, as far as one attempt needs it."""

    async def within(
        self, stage: str, seconds: float | None, work: Any, *, rollout_id: str, timed_out: Any
    ) -> Any:
        try:
            async with asyncio.timeout(seconds):
                return await work
        except TimeoutError:
            return timed_out()


# --- what cannot start: one line, exit 2, the run directory released -----------------------


def test_a_refused_connection_is_one_line_and_exit_2(cli: Cli, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a"}])
    refused = cli("eval", str(data), "--server", url, "--out", "run")
    assert refused.exit_code == 2
    assert refused.stderr.splitlines()[-1] == (
        f"error: --server {url}: cannot reach the rollout server (connection refused); check "
        "the URL and that the server is running"
    )
    assert results(tmp_path / "run") == []


def test_a_wrong_key_is_one_line_and_exit_2(
    cli: Cli, tmp_path: Path, server: Callable[..., Served]
) -> None:
    served_ = server(api_key="the-right-key-1234")
    url = served_.url
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a"}])
    wrong = cli(
        "eval", str(data), "--server", url, "--server-api-key", "wrong-key-12345", "--out", "run"
    )
    assert (wrong.exit_code, wrong.stderr.splitlines()[-1]) == (
        2,
        f"error: --server {url}: the server refused the key (HTTP 401); give its key with "
        "--server-api-key or OSMOSIS_RUN_SERVER_API_KEY",
    )
    assert served_.app.posts == []
    # The right key, from the environment; the run directory was released.
    os.environ["OSMOSIS_RUN_SERVER_API_KEY"] = "the-right-key-1234"
    try:
        assert cli("eval", str(data), "--server", url, "--out", "run").exit_code == 0
    finally:
        del os.environ["OSMOSIS_RUN_SERVER_API_KEY"]
    assert [line.status for line in results(tmp_path / "run")] == ["ungraded"]
    assert "the-right-key" not in (tmp_path / "run" / "run.toml").read_text()


def test_a_url_that_is_not_a_rollout_server_is_one_line_and_exit_2(
    cli: Cli, tmp_path: Path, server: Callable[..., Served]
) -> None:
    url = server().url
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
        "error: --server (command line): must be an http:// or https:// URL, such as "
        "http://127.0.0.1:8000 (got 'localhost:8000')",
    )
    assert not (tmp_path / "runs").exists()


def test_workflow_options_are_not_used_with_a_server_and_eval_says_so(
    cli: Cli, tmp_path: Path, server: Callable[..., Served]
) -> None:
    url = server().url
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a", "ground_truth": "a"}])
    done = cli("eval", str(data), *FLOWS, "--server", url, "--out", "run")
    assert done.exit_code == 0
    assert done.stderr.splitlines()[0] == (
        "osmosis-run: --server runs the server's own workflow and grader; --workflow, --grader "
        "not used"
    )


def test_the_fingerprint_holds_the_server_not_its_key(
    cli: Cli, tmp_path: Path, server: Callable[..., Served]
) -> None:
    url, other = server().url, server().url
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


def test_a_dry_run_with_a_server_reads_the_rows_and_runs_nothing(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "a"}, "{not json"])
    dry = cli("eval", str(data), "--server", f"http://127.0.0.1:{free_port()}", "--dry-run")
    assert dry.exit_code == 2  # the dataset's problem, not the workflow the server holds
    assert dry.output.splitlines()[-1] == f"{data}: 2 rows, 1 invalid"
    assert not (tmp_path / "runs").exists()


# --- real processes: Ctrl-C, a server killed mid-run --------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_ctrl_c_cancels_the_rollouts_on_the_server_and_the_resume_is_exact(
    tmp_path: Path, server: Callable[..., Served], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    monkeypatch.setenv("REMOTE_GATE", str(gate))  # the server's workflows run in this process
    served_ = server(kind)
    rows = [
        {"id": f"r{i}", "prompt": "a", "ground_truth": "a", "metadata": {"kind": "gate" if i >= 2 else "echo"}}
        for i in range(6)
    ]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    args = [str(data), "--server", served_.url, "--out", "run", "-c", "3"]
    child = eval_process(*args, cwd=tmp_path)
    # r0 and r1 recorded, r2-r4 waiting at the gate on the server
    wait_for(lambda: len(results(tmp_path / "run")) == 2 and served_.in_flight() == 3)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=30)
    assert child.returncode == 130, stderr
    wait_for(lambda: served_.in_flight() == 0, 5)  # cancelled there, not left running
    assert len(served_.cancelled()) == 3
    if kind == "fake":  # the ids eval asked to cancel are the ones cancelled
        asked = {rid for cancel in served_.app.cancels for rid in cancel["ids"]}
        assert asked == served_.cancelled()
    assert sorted(line.rollout_id for line in results(tmp_path / "run")) == ["r0.s0", "r1.s0"]
    gate.unlink()
    resumed = eval_process(*args, cwd=tmp_path)
    _, stderr = resumed.communicate(timeout=30)
    assert resumed.returncode == 0, stderr
    lines = results(tmp_path / "run")
    assert sorted(line.rollout_id for line in lines) == [f"r{i}.s0" for i in range(6)]
    assert {(line.status, line.reward) for line in lines} == {("success", 1.0)}


def serve_process(kind: str, port: int, cwd: Path, out: str) -> subprocess.Popen[bytes]:
    """A rollout server in a process of its own: the fake, or ``osmosis-run serve``."""
    if kind == "fake":
        command = [sys.executable, str(TESTS_DIR / "remote_fake.py"), "--workflow",
                   "remote_fake:Mixed", "--grader", "remote_fake:Judge", "--port", str(port),
                   "--artifacts", str(cwd / out)]  # fmt: skip
    else:
        command = [sys.executable, "-m", "osmosis_run", "serve", "-w", "remote_fake:Mixed",
                   "-g", "remote_fake:Judge", "--port", str(port), "--out", out]  # fmt: skip
    child = subprocess.Popen(
        command,
        cwd=cwd,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: _listening(port), 30)
    return child


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_a_server_killed_mid_run_stops_the_run_and_it_resumes(tmp_path: Path, kind: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = serve_process(kind, port, tmp_path, "served-1")
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
        f"error: rollout server {url} unreachable (POST /rollout: connection refused)"
    ]
    assert 3 <= len(results(tmp_path / "run")) < 40
    second = serve_process(kind, port, tmp_path, "served-2")
    try:
        resumed = eval_process(*args, cwd=tmp_path)
        _, stderr = resumed.communicate(timeout=60)
    finally:
        second.send_signal(signal.SIGINT)  # serve shuts down gracefully; uvicorn too
        second.wait(30)
    assert resumed.returncode == 0, stderr
    lines = results(tmp_path / "run")
    assert sorted(line.rollout_id for line in lines) == sorted(f"r{i}.s0" for i in range(40))
    assert {line.status for line in lines} == {"success"}
