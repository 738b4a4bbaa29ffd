"""The HTTP/1.1 listener (http/listener.py): serve's ``UvicornProtocol`` under a real uvicorn on
loopback, and the gateway's ``Listener`` with a handler.

Every protocol test of test_server_protocol.py runs here again on it (imported below), then
HTTP itself over raw sockets: framing, pipelining, chunked bodies, 100-continue, keep-alive,
the requests it refuses, what an app can answer, and the memory a connection that pipelines
and never reads may hold. The gateway's own limits and refusals are in test_gateway_hostile.py;
both fronts against h11 and httptools in test_http_differential.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import serving as serving_module
from serving import Served, serve_app
from test_server_protocol import *  # noqa: F403  (the protocol tests, again on this protocol)

from osmosis_run import LocalBackend
from osmosis_run.http.listener import Limits, Listener, Request, Response, UvicornProtocol
from osmosis_run.server import create_rollout_server

ADMIT = json.dumps(
    {
        "initial_messages": [{"role": "user", "content": "hi"}],
        "rollout_id": "r1",
        "chat_completions_url": "http://127.0.0.1:9/v1",
    }
).encode()


@pytest.fixture(autouse=True)
def _lean_http(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving_module, "HTTP", UvicornProtocol)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Served]:
    backend = LocalBackend(workflow="server_flows:Upper", grader="server_flows:Exact")
    app = create_rollout_server(backend=backend, configure_logging=False, out=tmp_path / "run")
    with serve_app(app) as served:
        yield served


def _connect(served: Served) -> socket.socket:
    host, port = served.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _responses(sock: socket.socket, count: int) -> list[tuple[bytes, dict[bytes, bytes], bytes]]:
    """Read ``count`` responses with a Content-Length (or chunked) body, in order."""
    data = b""
    out: list[tuple[bytes, dict[bytes, bytes], bytes]] = []
    while len(out) < count:
        while b"\r\n\r\n" not in data:
            more = sock.recv(65536)
            assert more, f"connection closed after {len(out)} response(s): {data!r}"
            data += more
        head, data = data.split(b"\r\n\r\n", 1)
        status, *lines = head.split(b"\r\n")
        headers = dict(line.lower().split(b": ", 1) for line in lines)
        if headers.get(b"transfer-encoding") == b"chunked":
            body = b""
            while True:
                while b"\r\n" not in data:
                    data += sock.recv(65536)
                size_line, data = data.split(b"\r\n", 1)
                size = int(size_line, 16)
                while len(data) < size + 2:
                    data += sock.recv(65536)
                body, data = body + data[:size], data[size + 2 :]
                if size == 0:
                    break
        else:
            size = int(headers.get(b"content-length", b"0"))
            while len(data) < size:
                data += sock.recv(65536)
            body, data = data[:size], data[size:]
        out.append((status, headers, body))
    return out


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed the connection (within a few seconds)."""
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_rollout_over_httpx_keeps_one_connection(server: Served) -> None:
    admitted = server.client.post("/rollout", content=ADMIT)
    assert admitted.status_code == 202
    assert admitted.headers["content-type"] == "application/json"
    assert admitted.headers["server"] == "uvicorn"
    assert "date" in admitted.headers
    token = admitted.json()["polling_lease_token"]
    assert server.result("r1", token)["status"] == "success"


def test_pipelined_requests_are_answered_in_order(server: Served) -> None:
    with _connect(server) as sock:
        sock.sendall(
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /rollout HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s"
            b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n" % (len(ADMIT), ADMIT)
        )
        (s1, _, b1), (s2, _, b2), (s3, _, b3) = _responses(sock, 3)
    assert s1 == b"HTTP/1.1 200 OK"
    assert json.loads(b1)["status"] == "ok"
    assert s2 == b"HTTP/1.1 202 Accepted"
    assert json.loads(b2)["rollout_id"] == "r1"
    assert s3 == b"HTTP/1.1 404 Not Found"
    assert json.loads(b3) == {"detail": "Not Found"}


def test_a_chunked_body_is_read_whole(server: Served) -> None:
    half = len(ADMIT) // 2
    with _connect(server) as sock:
        sock.sendall(
            b"POST /rollout HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/json\r\n\r\n"
        )
        sock.sendall(b"%x;ext=1\r\n%s\r\n" % (half, ADMIT[:half]))
        time.sleep(0.05)  # the rest in another packet
        sock.sendall(b"%x\r\n%s\r\n0\r\nX-Trailer: y\r\n\r\n" % (len(ADMIT) - half, ADMIT[half:]))
        [(status, _, body)] = _responses(sock, 1)
    assert status == b"HTTP/1.1 202 Accepted"
    assert json.loads(body)["status"] == "queued"


def test_a_body_in_pieces_is_read_whole(server: Served) -> None:
    with _connect(server) as sock:
        sock.sendall(
            b"POST /rollout HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
            % (len(ADMIT), ADMIT[:10])
        )
        time.sleep(0.05)
        sock.sendall(ADMIT[10:])
        [(status, _, _)] = _responses(sock, 1)
    assert status == b"HTTP/1.1 202 Accepted"


def test_expect_100_continue_is_answered_before_the_body(server: Served) -> None:
    with _connect(server) as sock:
        sock.sendall(
            b"POST /rollout HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % len(ADMIT)
        )
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(ADMIT)
        [(status, _, _)] = _responses(sock, 1)
    assert status == b"HTTP/1.1 202 Accepted"


@pytest.mark.parametrize(
    ("request_bytes", "status", "detail"),
    [
        (
            b"NOT A REQUEST\r\n\r\n",
            400,
            "invalid HTTP request: the request line is not METHOD TARGET HTTP/1.x in printable ASCII",
        ),
        (
            b"GET /health HTTP/2.0\r\n\r\n",
            400,
            "invalid HTTP request: the request line is not METHOD TARGET HTTP/1.x in printable ASCII",
        ),
        (
            b"GET /health HTTP/1.1\r\nBad Header: x\r\n\r\n",
            400,
            "invalid HTTP request: a header line is not NAME: VALUE with NAME a token",
        ),
        (
            b"GET /health HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
            400,
            "invalid HTTP request: a header line is not NAME: VALUE with NAME a token",
        ),
        (
            b"GET /health HTTP/1.1\r\nX: a\x00b\r\n\r\n",
            400,
            "invalid HTTP request: a header value holds a control byte",
        ),
        (
            b"GET /health HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            400,
            "invalid HTTP request: more than one Host",
        ),
        (
            b"POST /rollout HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
            400,
            "invalid HTTP request: more than one Content-Length",
        ),
        (
            b"POST /rollout HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            400,
            "invalid HTTP request: Content-Length is not 1 to 18 digits",
        ),
        (
            b"POST /rollout HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            400,
            "invalid HTTP request: Transfer-Encoding is not chunked",
        ),
        (
            b"POST /rollout HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            400,
            "invalid HTTP request: both Content-Length and Transfer-Encoding",
        ),
        (
            b"POST /rollout HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
            "invalid HTTP request: Transfer-Encoding in an HTTP/1.0 request",
        ),
        (
            b"POST /rollout HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            400,
            "invalid HTTP request: a chunk size line is not HEX[;extensions]",
        ),
        (
            b"POST /rollout HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
            400,
            "invalid HTTP request: chunk data not followed by CRLF",
        ),
        (
            b"POST /rollout HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nNo colon\r\n\r\n",
            400,
            "invalid HTTP request: a trailer line is not NAME: VALUE with NAME a token",
        ),
        (
            b"GET /health HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n",
            431,
            "request head over the 16 KiB limit",
        ),
    ],
)
def test_what_cannot_be_parsed_is_a_4xx_with_its_reason_and_a_closed_connection(
    server: Served, request_bytes: bytes, status: int, detail: str
) -> None:
    with _connect(server) as sock:
        sock.sendall(request_bytes)
        [(status_line, headers, body)] = _responses(sock, 1)
        assert int(status_line.split()[1]) == status
        assert headers[b"connection"] == b"close"
        assert headers[b"content-type"] == b"application/json"
        assert json.loads(body) == {"detail": detail}
        assert _closed(sock)


def test_a_body_is_bounded_by_the_limit_from_its_length_or_its_chunks(tmp_path: Path) -> None:
    backend = LocalBackend(workflow="server_flows:Upper", grader="server_flows:Exact")
    app = create_rollout_server(backend=backend, configure_logging=False, out=tmp_path / "run")
    with serve_app(app, http=UvicornProtocol.limited(Limits(max_body=len(ADMIT)))) as served:
        with _connect(served) as sock:  # at the limit: taken
            sock.sendall(
                b"POST /rollout HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                % (len(ADMIT), ADMIT)
            )
            assert _responses(sock, 1)[0][0] == b"HTTP/1.1 202 Accepted"
        for request in (
            b"POST /rollout HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (len(ADMIT) + 1),
            b"POST /rollout HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"%x\r\n%s\r\n1\r\n" % (len(ADMIT), ADMIT),
        ):
            with _connect(served) as sock:
                sock.sendall(request)
                [(status, _, body)] = _responses(sock, 1)
                assert int(status.split()[1]) == 413
                assert json.loads(body) == {
                    "detail": f"request body over the {len(ADMIT)} bytes limit"
                }
                assert _closed(sock)


def test_connection_close_and_http_10_close_after_the_response(server: Served) -> None:
    for request in (
        b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /health HTTP/1.0\r\n\r\n",
    ):
        with _connect(server) as sock:
            sock.sendall(request)
            [(status, headers, body)] = _responses(sock, 1)
            assert status == b"HTTP/1.1 200 OK"
            assert headers[b"connection"] == b"close"
            assert json.loads(body)["status"] == "ok"
            assert _closed(sock)


def test_an_idle_connection_is_closed_after_the_keep_alive(tmp_path: Path) -> None:
    backend = LocalBackend(workflow="server_flows:Upper", grader="server_flows:Exact")
    app = create_rollout_server(backend=backend, configure_logging=False, out=tmp_path / "run")
    with serve_app(app, timeout_keep_alive=0.3) as served, _connect(served) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _responses(sock, 1)[0][0] == b"HTTP/1.1 200 OK"
        started = time.monotonic()
        assert _closed(sock)
        assert 0.2 < time.monotonic() - started < 3


def _limited(tmp_path: Path, limits: Limits, **options: Any) -> Any:
    backend = LocalBackend(workflow="server_flows:Upper", grader="server_flows:Exact")
    app = create_rollout_server(backend=backend, configure_logging=False, out=tmp_path / "run")
    return serve_app(app, http=UvicornProtocol.limited(limits), **options)


@pytest.mark.slow
def test_a_request_that_does_not_arrive_in_time_is_a_408(tmp_path: Path) -> None:
    limits = Limits(head_timeout_s=0.5, body_timeout_s=0.5)
    with _limited(tmp_path, limits, timeout_keep_alive=60) as served:
        for partial, reason in (
            (  # a head that stops
                b"GET /health HTTP/1.1\r\nHost: x\r\n",
                {"detail": "the request head did not arrive within 0.5 s"},
            ),
            (  # a body that stops
                b"POST /rollout HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                % (len(ADMIT), ADMIT[:10]),
                {"detail": "the request body did not arrive within 0.5 s of its head"},
            ),
        ):
            with _connect(served) as sock:
                sock.sendall(partial)
                started = time.monotonic()
                [(status, _, body)] = _responses(sock, 1)
                assert (status, json.loads(body)) == (b"HTTP/1.1 408 Request Timeout", reason)
                assert 0.4 < time.monotonic() - started < 3
                assert _closed(sock)
        with _connect(served) as sock:  # connected, never asked: closed, nothing to answer
            assert _closed(sock)
        with _connect(served) as sock:  # a trickle keeps no connection past the timeout
            sock.sendall(b"GET /health HTTP/1.1\r\n")
            for _ in range(8):
                time.sleep(0.1)
                sock.sendall(b"X: y\r\n")
            [(status, _, _)] = _responses(sock, 1)
            assert status == b"HTTP/1.1 408 Request Timeout"
        with _connect(served) as sock:  # between requests the keep-alive (60 s) applies
            for _ in range(3):
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                assert _responses(sock, 1)[0][0] == b"HTTP/1.1 200 OK"
                time.sleep(0.4)
            time.sleep(0.4)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _responses(sock, 1)[0][0] == b"HTTP/1.1 200 OK"


def _asked(served: Served) -> socket.socket:
    sock = _connect(served)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _responses(sock, 1)[0][0] == b"HTTP/1.1 200 OK"
    return sock


def test_at_the_connection_limit_the_longest_idle_connection_makes_room(tmp_path: Path) -> None:
    with _limited(tmp_path, Limits(max_connections=2)) as served:
        first, second = _asked(served), _asked(served)
        third = _asked(served)  # answered: the first, idle longest, was closed for it
        assert _closed(first)
        for sock in (second, third):
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _responses(sock, 1)[0][0] == b"HTTP/1.1 200 OK"
        for sock in (first, second, third):
            sock.close()


def test_at_the_connection_limit_with_none_idle_a_request_gets_503(tmp_path: Path) -> None:
    with _limited(tmp_path, Limits(max_connections=2)) as served:
        admitted = served.client.post(
            "/rollout", content=json.dumps({**json.loads(ADMIT), "metadata": {"sleep": 2}})
        )
        token = admitted.json()["polling_lease_token"]
        while served.client.get("/health").json()["concurrency"]["running"] == 0:
            time.sleep(0.01)  # then running for 2 s: a poll waits for its next change
        served.client.close()
        while served.server.server_state.connections:  # the server saw it go
            time.sleep(0.01)
        poll = b"GET /rollout/r1/result HTTP/1.1\r\nHost: x\r\nX-Osmosis-Rollout-Lease: %s\r\n\r\n"
        busy = [_connect(served) for _ in range(2)]
        for sock in busy:  # both wait for the rollout's next status change
            sock.sendall(poll % token.encode())
        time.sleep(0.2)
        with _connect(served) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            [(status, headers, body)] = _responses(sock, 1)
            assert (status, headers[b"retry-after"], json.loads(body)) == (
                b"HTTP/1.1 503 Service Unavailable",
                b"1",
                {"detail": "the server has 2 connections open, all busy (its limit); retry"},
            )
            assert _closed(sock)
        for sock in busy:
            assert _responses(sock, 1)[0][0] == b"HTTP/1.1 200 OK"
            sock.close()


async def _streaming_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An app answering without a length, in pieces; or crashing; or echoing the body."""
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/crash":
        raise RuntimeError("boom")
    if path == "/echo":
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]})
    for piece in (b"one ", b"two ", b""):
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"three"})


@pytest.fixture
def streaming() -> Iterator[Served]:
    with serve_app(_streaming_app, lifespan="off") as served:
        yield served


def test_a_response_without_a_length_is_chunked_or_ends_with_the_connection(
    streaming: Served,
) -> None:
    response = streaming.client.get("/stream")
    assert response.status_code == 200
    assert response.headers["transfer-encoding"] == "chunked"
    assert response.headers["x-a"] == "1"
    assert response.text == "one two three"
    with _connect(streaming) as sock:
        sock.sendall(b"GET /stream HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    assert b"connection: close" in head
    assert body == b"one two three"


def test_head_answers_no_body_and_a_crash_is_a_500(streaming: Served) -> None:
    head = streaming.client.head("/stream")
    assert head.status_code == 200
    assert head.content == b""
    crash = streaming.client.get("/crash")
    assert crash.status_code == 500
    assert crash.text == "Internal Server Error"
    assert crash.headers["connection"] == "close"
    echoed = streaming.client.post("/echo", content=iter([b"a" * 100_000, b"b" * 100_000]))
    assert echoed.content == b"a" * 100_000 + b"b" * 100_000


def test_a_request_answered_before_its_body_keeps_the_connection(tmp_path: Path) -> None:
    backend = LocalBackend(workflow="server_flows:Upper", grader="server_flows:Exact")
    app = create_rollout_server(
        backend=backend, configure_logging=False, out=tmp_path / "run", api_key="k"
    )
    with serve_app(app) as served:
        with _connect(served) as sock:  # the 401 comes before the body; the body is dropped
            sock.sendall(
                b"POST /rollout HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(ADMIT)
            )
            [(status, _, body)] = _responses(sock, 1)
            assert (status, json.loads(body)) == (
                b"HTTP/1.1 401 Unauthorized",
                {"detail": "unauthorized"},
            )
            sock.sendall(
                ADMIT + b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n"
            )
            [(status, _, body)] = _responses(sock, 1)
            assert status == b"HTTP/1.1 200 OK"
            assert json.loads(body)["status"] == "ok"
        with _connect(served) as sock:  # waiting for a 100 Continue it will not get: closed
            sock.sendall(
                b"POST /rollout HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                b"Content-Length: %d\r\n\r\n" % len(ADMIT)
            )
            [(status, _, _)] = _responses(sock, 1)
            assert status == b"HTTP/1.1 401 Unauthorized"
            assert _closed(sock)


# Memory under pipelining: a client that pipelines and never reads holds a bounded amount. ----

PIPELINED = 5_000_000  # bytes of pipelined GETs; uvicorn's httptools protocol grows 300 MB on it
HELD = 1 << 20  # what one connection may hold server-side meanwhile (it holds ~200 KiB)


def _pipeline_unread(port: int, path: bytes) -> socket.socket:
    """Pipeline ``PIPELINED`` bytes of GETs of ``path`` on one connection, reading nothing,
    until the server stops taking them (or all are sent)."""
    request = b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    blob = request * (PIPELINED // len(request))
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.settimeout(1.0)
    sent = 0
    try:
        while sent < len(blob):
            sent += sock.send(blob[sent : sent + 65536])
    except TimeoutError:
        pass  # the server stopped reading: what it holds is what it would ever hold
    return sock


def _held(connection: Any) -> int:
    """Bytes a connection holds: unparsed input, the app's pending body, unsent output."""
    cycles = [c for c in (connection.cycle, connection.reading_body) if c is not None]
    transport = connection.transport
    unsent = transport.get_write_buffer_size() if transport is not None else 0
    return len(connection.buffer) + sum(len(c.body) for c in cycles) + unsent


def _wait_paused(connections: set[Any]) -> Any:
    deadline = time.monotonic() + 30
    while not any(getattr(c, "read_paused", False) for c in connections):
        assert time.monotonic() < deadline, "the server never paused reading"
        time.sleep(0.05)
    [connection] = connections
    return connection


def test_pipelined_requests_never_read_hold_bounded_memory(server: Served) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    with _pipeline_unread(port, b"/health"):
        connection = _wait_paused(server.server.server_state.connections)
        assert _held(connection) < HELD


@contextlib.contextmanager
def _listening(handler: Any, **options: Any) -> Iterator[Any]:
    """A ``Listener`` serving ``handler`` on a loop of its own thread."""
    loop = asyncio.new_event_loop()
    listener = Listener(handler, **options)
    loop.run_until_complete(listener.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        asyncio.run_coroutine_threadsafe(listener.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _ok(_request: Request, response: Response) -> None:
    await response.send(200, [("content-type", "text/plain")], b"ok")


def test_the_handler_listener_holds_bounded_memory_under_pipelining() -> None:
    with _listening(_ok) as listener, _pipeline_unread(listener.port, b"/"):
        connection = _wait_paused(listener.state.connections)
        assert _held(connection) < HELD


def _ask(port: int, *requests: bytes) -> tuple[list[tuple[bytes, dict[bytes, bytes], bytes]], bool]:
    """Send ``requests`` on one connection, one at a time: their answers, and whether the
    server then closed it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        answers = []
        for request in requests:
            sock.sendall(request)
            answers += _responses(sock, 1)
        return answers, _closed(sock)


def test_a_handler_gets_the_whole_request_and_may_stream_its_answer() -> None:
    seen: list[Request] = []

    async def stream(request: Request, response: Response) -> None:
        seen.append(request)
        await response.start(200, [("content-type", "text/event-stream")])
        for part in (b"one ", b"two"):
            await response.write(part)
        await response.end()

    with _listening(stream) as listener:
        chunked = b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        [(status, headers, body), again], closed = _ask(
            listener.port,
            b"POST /v1/x?q=1 HTTP/1.1\r\nHost: h\r\nX-Note: caf\xc3\xa9\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + chunked,
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",  # on the same one
        )
    assert (status, headers[b"transfer-encoding"], body) == (
        b"HTTP/1.1 200 OK",
        b"chunked",
        b"one two",
    )
    assert (again[0], again[2], closed) == (b"HTTP/1.1 200 OK", b"one two", True)
    assert seen[0] == Request(
        "POST",
        "/v1/x?q=1",
        {"host": "h", "x-note": "caf\xc3\xa9", "transfer-encoding": "chunked"},
        b"abcde",
    )


def test_a_handler_that_fails_is_a_500_in_the_listeners_error_shape() -> None:
    async def broken(_request: Request, _response: Response) -> None:
        raise RuntimeError("a bug")

    def shape(reason: str, code: str) -> bytes:
        return json.dumps({"error": {"message": reason, "code": code}}).encode()

    with _listening(broken, error_body=shape, error_headers=((b"x-kind", b"test"),)) as listener:
        [(status, headers, body)], closed = _ask(
            listener.port, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
        )
    assert (status, headers[b"x-kind"], closed) == (
        b"HTTP/1.1 500 Internal Server Error",
        b"test",
        True,
    )
    assert json.loads(body) == {
        "error": {
            "message": "the server failed on this request (a bug; see the log)",
            "code": "internal_error",
        }
    }
