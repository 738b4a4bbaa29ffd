"""``osmosis-run serve`` against hostile, broken and idle clients: a real process on loopback.

- Heads it cannot take (bytes that are not ASCII, absurd lengths): a 4xx with a one-line JSON
  reason and a closed connection, never a traceback.
- The body limit: refused with 413 from the head (or, chunked, from the chunk that passes it).
- Idle connections: closed after ``--keep-alive``; at the connection limit (and at a low
  open-file limit) the longest-idle makes room, so new clients keep being answered.
"""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import subprocess_env
from http_cases import Outcome, outcome
from serving import LEASE, free_port

from osmosis_run.server.settings import resolve_serve_settings

MIB = 1024 * 1024
MAX_BODY = 32 * MIB
ADMIT = json.dumps(
    {
        "initial_messages": [{"role": "user", "content": "hi"}],
        "chat_completions_url": "http://127.0.0.1:9/v1",
        "label": "HI",
    }
)


class Serve:
    """A running ``osmosis-run serve`` (serving server_flows), with an optional open-file limit."""

    def __init__(self, cwd: Path, *args: str, nofile: int | None = None) -> None:
        port = free_port()
        self.address = ("127.0.0.1", port)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "osmosis_run", "serve", "--port", str(port),
             "-w", "server_flows:Upper", "-g", "server_flows:Exact", "--out", str(cwd / "run"),
             *args],
            cwd=cwd,
            env=subprocess_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=None if nofile is None else lambda: _limit_files(nofile),
        )  # fmt: skip
        assert self.proc.stderr is not None
        first = self.proc.stderr.readline()
        assert first.startswith("osmosis-run serve: listening on "), first + self.stop()

    def connect(self, *, timeout: float = 5.0) -> socket.socket:
        return socket.create_connection(self.address, timeout=timeout)

    def stop(self) -> str:
        """Stop it (SIGINT, then a kill); what it printed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return str(err)


def _limit_files(nofile: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


@contextlib.contextmanager
def serving(cwd: Path, *args: str, nofile: int | None = None) -> Iterator[Serve]:
    """Serve until the block ends; then it must have printed no traceback."""
    served = Serve(cwd, *args, nofile=nofile)
    try:
        yield served
    finally:
        err = served.stop()
    assert "Traceback" not in err, err


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    with serving(tmp_path_factory.mktemp("served")) as process:
        yield process


def _detail(result: Outcome) -> str:
    assert result.body.count(b"\n") == 0, result.body
    body: dict[str, Any] = json.loads(result.body)
    assert list(body) == ["detail"]
    return str(body["detail"])


@pytest.mark.parametrize(
    ("request_bytes", "status", "detail"),
    [
        (
            b"GET /h\xe9alth HTTP/1.1\r\nHost: x\r\n\r\n",
            400,
            "invalid HTTP request: the request line is not METHOD TARGET HTTP/1.x "
            "in printable ASCII",
        ),
        (
            b"POST /rollout HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n",
            400,
            "invalid HTTP request: Content-Length is not 1 to 18 digits",
        ),
        (
            b"GET /health HTTP/1.1\r\nHost: x\r\nX-N\xc3\xa9: 1\r\n\r\n",
            400,
            "invalid HTTP request: a header line is not NAME: VALUE with NAME a token",
        ),
        (
            b"GET /health HTTP/1.1\nHost: x\n\n",
            400,
            "invalid HTTP request: a line ends in a bare LF (HTTP/1.1 lines end in CRLF)",
        ),
        (
            b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 20_000 + b"\r\n\r\n",
            431,
            "request head over the 16 KiB limit",
        ),
        (
            b"POST /rollout HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (40 * MIB),
            413,
            "request body over the 32 MiB limit (33554432 bytes)",
        ),
        (
            b"POST /rollout HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"%x\r\n" % (40 * MIB),
            413,
            "request body over the 32 MiB limit (33554432 bytes)",
        ),
    ],
    ids=[
        "non-ASCII target",
        "5000-digit length",
        "non-ASCII name",
        "bare LF",
        "head",
        "body",
        "chunked",
    ],
)
def test_what_serve_cannot_take_is_a_4xx_with_a_one_line_reason_and_a_close(
    served: Serve, request_bytes: bytes, status: int, detail: str
) -> None:
    result = outcome(served.address, request_bytes)
    assert (result.status, result.closed) == (status, True), result
    lines = result.head.split(b"\r\n")
    assert {b"content-type: application/json", b"connection: close"} <= set(lines), lines
    assert _detail(result) == detail


def test_a_body_over_the_limit_is_refused_before_it_is_sent(served: Serve) -> None:
    """The limit itself passes (the app asks for the body: 100 Continue); one byte more, 413."""
    head = (
        b"POST /rollout HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
    )
    with served.connect() as sock:
        sock.sendall(head % MAX_BODY)
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
    result = outcome(served.address, head % (MAX_BODY + 1))
    assert (result.status, _detail(result)) == (
        413,
        "request body over the 32 MiB limit (33554432 bytes)",
    )


def test_a_chunked_body_is_refused_at_the_chunk_that_passes_the_limit(served: Serve) -> None:
    chunk = b"%x\r\n%s\r\n" % (8 * MIB, b"a" * (8 * MIB))
    with served.connect(timeout=10) as sock:
        sock.sendall(b"POST /rollout HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(4):  # 32 MiB: the limit, still taken
            sock.sendall(chunk)
        sock.sendall(b"1\r\n")  # one byte more
        data = b""
        while b"}" not in data:
            more = sock.recv(65536)
            assert more, data
            data += more
    assert data.startswith(b"HTTP/1.1 413 "), data[:100]
    assert data.endswith(b'{"detail":"request body over the 32 MiB limit (33554432 bytes)"}')


def _idle_connections(served: Serve, count: int) -> list[socket.socket]:
    """``count`` connections that each asked for /health once (answered or not) and sit idle."""
    opened = []
    for _ in range(count):
        sock = served.connect(timeout=0.5)
        opened.append(sock)
        with contextlib.suppress(OSError):
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.recv(65536)
    return opened


def _health(served: Serve, *, within: float) -> int | None:
    return outcome(
        served.address, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", timeout=within
    ).status


def _open(sock: socket.socket) -> bool:
    """Whether the server still holds ``sock`` open (it neither closed nor reset it)."""
    sock.settimeout(0.01)
    try:
        return sock.recv(1) != b""
    except TimeoutError:
        return True
    except OSError:
        return False


def test_idle_clients_do_not_stop_new_ones_at_a_low_open_file_limit(tmp_path: Path) -> None:
    with serving(tmp_path, nofile=64) as served:
        idle = _idle_connections(served, 100)
        try:
            for _ in range(5):  # new clients, each answered while the idle ones sit
                assert _health(served, within=5) == 200
            assert 0 < sum(map(_open, idle)) <= 16  # a quarter of the open-file limit
            assert _open(idle[-1])  # the longest-idle ones made room, not the newest
        finally:
            for sock in idle:
                sock.close()


def _exchange(sock: socket.socket, request: bytes) -> dict[str, Any]:
    """Send one request, read its JSON answer (Content-Length framed)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        assert more, "closed"
        data += more
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    answer: dict[str, Any] = json.loads(body)
    return answer


@pytest.mark.slow
def test_idle_connections_are_closed_after_the_keep_alive_but_not_a_long_poll(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, "--keep-alive", "1", "--result-wait", "5") as served:
        idle = _idle_connections(served, 100)
        body = json.dumps({**json.loads(ADMIT), "rollout_id": "slow", "metadata": {"sleep": 2.5}})
        with served.connect(timeout=10) as sock:
            admitted = _exchange(
                sock,
                b"POST /rollout HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body.encode()),
            )
            poll = (
                f"GET /rollout/slow/result HTTP/1.1\r\nHost: x\r\n"
                f"{LEASE}: {admitted['polling_lease_token']}\r\n\r\n"
            ).encode()
            longest = 0.0
            status = "queued"
            while status not in ("success", "failure"):  # each waits for a status change
                started = time.monotonic()
                status = _exchange(sock, poll)["status"]
                longest = max(longest, time.monotonic() - started)
        assert (status, longest > 1.5) == ("success", True)  # on one connection, past 1 s
        time.sleep(0.5)
        try:
            assert sum(map(_open, idle)) == 0
        finally:
            for idle_sock in idle:
                idle_sock.close()


def test_the_keep_alive_setting_and_its_precedence(tmp_path: Path) -> None:
    config = tmp_path / "eval.toml"
    config.write_text('workflow = "server_flows:Upper"\n[serve]\nkeep_alive = 600\n')
    assert resolve_serve_settings({}, environ={}).keep_alive == 10
    assert resolve_serve_settings({}, config_file=config, environ={}).keep_alive == 600
    cli = resolve_serve_settings({"keep_alive": 75}, config_file=config, environ={})
    assert cli.keep_alive == 75


def test_a_bad_keep_alive_is_one_line_and_exit_2(cli: Any) -> None:
    result = cli("serve", "-w", "server_flows:Upper", "--keep-alive", "0", "--out", "r")
    assert (result.exit_code, result.stderr) == (
        2,
        "error: --keep-alive (command line): Input should be greater than or equal to 1 (got 0)\n",
    )
