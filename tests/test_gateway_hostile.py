"""The model gateway against hostile, broken and idle clients and upstreams, over real sockets.

- Raw requests (``RAW``): the framing and smuggling cases h11 and httptools refuse, refused with
  400 (413 past the body limit) and a closed connection; a table any listener can be run on.
- Chat bodies the gateway cannot forward as they are (nesting, lone surrogates, NaN): a 4xx in
  the OpenAI error shape, and nothing sent upstream.
- The listener's limits: keep-alive and head/body timeouts, the connection limit.
- What the cache stores (only complete, successful answers) and how calls are counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
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

import httpx
import openai
import pytest
from conftest import subprocess_env
from fake_upstream import Reply, Upstream, serve_upstream
from http_cases import Target, chunked, length_of, post
from test_gateway import HELLO, UPSTREAM_KEY, client, records, running

from osmosis_run.gateway.host import Gateway

CHAT = b"/v1/rollouts/r0/chat/completions"
BODY = json.dumps({"model": "m", "messages": HELLO}).encode()


@pytest.fixture
def up() -> Iterator[Upstream]:
    with serve_upstream(api_key=UPSTREAM_KEY) as upstream:
        yield upstream


def limits(**values: Any) -> Any:
    from dataclasses import replace

    from osmosis_run.gateway.host import LIMITS

    return replace(LIMITS, **values)


# Raw sockets -------------------------------------------------------------------------------


def connect(port: int, *, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response (Content-Length or chunked body): its status, headers and body."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        assert more, f"the connection closed before a response: {data!r}"
        data += more
    head, data = data.split(b"\r\n\r\n", 1)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines)
    if headers.get("transfer-encoding") == "chunked":
        while not data.endswith(b"0\r\n\r\n"):
            more = sock.recv(65536)
            assert more, "the connection closed mid-body"
            data += more
        return int(status_line.split()[1]), headers, data
    size = int(headers.get("content-length", "0"))
    while len(data) < size:
        more = sock.recv(65536)
        assert more, "the connection closed mid-body"
        data += more
    return int(status_line.split()[1]), headers, data[:size]


def closed(sock: socket.socket, *, within: float = 3.0) -> bool:
    """Whether the peer closed the connection within ``within`` seconds."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@dataclass(frozen=True)
class Listener:
    """Where raw requests go: a port, and the chat path, headers and body it takes."""

    port: int
    target: Target


@dataclass(frozen=True)
class Raw:
    """A raw request built for a target, and the status a careful server answers it with."""

    name: str
    build: Callable[[Target], bytes]
    status: int


RAW: list[Raw] = [
    # Accepted: what a careful server still takes.
    Raw("content-length", lambda t: post(t), 200),
    Raw("chunked", lambda t: chunked(t, b"transfer-encoding: chunked"), 200),
    Raw("chunked in any case", lambda t: chunked(t, b"Transfer-Encoding: Chunked"), 200),
    Raw(
        "a chunk extension",
        lambda t: chunked(
            t,
            b"transfer-encoding: chunked",
            chunks=b"%x;x=1\r\n%s\r\n0\r\n\r\n" % (len(t.body), t.body),
        ),
        200,
    ),
    Raw("optional whitespace around a value", lambda t: post(t, b"x-note:  \t a b \t"), 200),
    # Content-Length.
    Raw("two equal content-lengths", lambda t: post(t, b"content-length: " + length_of(t)), 400),
    Raw("conflicting content-lengths", lambda t: post(t, b"content-length: 1"), 400),
    Raw(
        "a content-length list",
        lambda t: post(t, b"content-length: %s, %s" % (length_of(t), length_of(t)), length=False),
        400,
    ),
    Raw(
        "a signed content-length",
        lambda t: post(t, b"content-length: +" + length_of(t), length=False),
        400,
    ),
    Raw("a negative content-length", lambda t: post(t, b"content-length: -1", length=False), 400),
    Raw("a hex content-length", lambda t: post(t, b"content-length: 0x10", length=False), 400),
    Raw("an empty content-length", lambda t: post(t, b"content-length:", length=False), 400),
    Raw(
        "a content-length with trailing junk",
        lambda t: post(t, b"content-length: " + length_of(t) + b"x", length=False),
        400,
    ),
    Raw(
        "an absurdly long content-length",
        lambda t: post(t, b"content-length: " + b"0" * 30 + length_of(t), length=False),
        400,
    ),
    Raw(
        "a content-length past the body limit",
        lambda t: post(t, b"content-length: %d" % (64 * 1024 * 1024 + 1), body=b"", length=False),
        413,
    ),
    # Transfer-Encoding.
    Raw("chunked, identity", lambda t: chunked(t, b"transfer-encoding: chunked, identity"), 400),
    Raw("gzip, chunked", lambda t: chunked(t, b"transfer-encoding: gzip, chunked"), 400),
    Raw("identity", lambda t: post(t, b"transfer-encoding: identity"), 400),
    Raw("not quite chunked", lambda t: chunked(t, b"transfer-encoding: xchunked"), 400),
    Raw(
        "two transfer-encodings",
        lambda t: chunked(t, b"transfer-encoding: chunked", b"transfer-encoding: chunked"),
        400,
    ),
    Raw(
        "transfer-encoding and content-length",
        lambda t: chunked(t, b"transfer-encoding: chunked", b"content-length: " + length_of(t)),
        400,
    ),
    Raw(
        "a hex-prefixed chunk size",
        lambda t: chunked(t, b"transfer-encoding: chunked", chunks=b"0x5\r\nhello\r\n0\r\n\r\n"),
        400,
    ),
    Raw(
        "a signed chunk size",
        lambda t: chunked(t, b"transfer-encoding: chunked", chunks=b"+5\r\nhello\r\n0\r\n\r\n"),
        400,
    ),
    Raw(
        "an underscored chunk size",
        lambda t: chunked(t, b"transfer-encoding: chunked", chunks=b"0_5\r\nhello\r\n0\r\n\r\n"),
        400,
    ),
    Raw(
        "a chunk longer than its size",
        lambda t: chunked(t, b"transfer-encoding: chunked", chunks=b"3\r\nhello\r\n0\r\n\r\n"),
        400,
    ),
    Raw(
        "a trailer line without a colon",
        lambda t: chunked(
            t,
            b"transfer-encoding: chunked",
            chunks=b"%x\r\n%s\r\n0\r\nx-sum 1\r\n\r\n" % (len(t.body), t.body),
        ),
        400,
    ),
    Raw(
        "a trailer",
        lambda t: chunked(
            t,
            b"transfer-encoding: chunked",
            chunks=b"%x\r\n%s\r\n0\r\nx-sum: 1\r\n\r\n" % (len(t.body), t.body),
        ),
        200,
    ),
    # Bytes a request line or header may not hold.
    Raw("a non-ASCII target", lambda t: post(t, path=t.post + b"?q=caf\xc3\xa9"), 400),
    Raw("a control byte in the target", lambda t: post(t, path=t.post + b"?q=\x01"), 400),
    Raw("a tab in the target", lambda t: post(t, path=t.post + b"?q=\t"), 400),
    Raw("an unknown HTTP version", lambda t: post(t, version=b"HTTP/1.x"), 400),
    Raw("obs-text in a header value", lambda t: post(t, b"x-note: caf\xc3\xa9"), 200),
    Raw("a NUL in a header value", lambda t: post(t, b"x-note: a\x00b"), 400),
    Raw("a control byte in a header value", lambda t: post(t, b"x-note: a\x01b"), 400),
    Raw("a DEL in a header value", lambda t: post(t, b"x-note: a\x7fb"), 400),
    Raw("a bare CR in a header value", lambda t: post(t, b"x-note: a\rb"), 400),
    Raw("a non-ASCII header name", lambda t: post(t, b"x-n\xc3\xb6te: 1"), 400),
    Raw("a header name that is not a token", lambda t: post(t, b"x(note): 1"), 400),
    Raw("whitespace before a header's colon", lambda t: post(t, b"x-note : 1"), 400),
    Raw("an empty header name", lambda t: post(t, b": 1"), 400),
    Raw("a header line without a colon", lambda t: post(t, b"x-note 1"), 400),
    Raw("an obs-fold continuation line", lambda t: post(t, b"x-note: a", b" folded"), 400),
    Raw("an obs-fold continuation with a tab", lambda t: post(t, b"x-note: a", b"\tfolded"), 400),
    Raw("a head past the head limit", lambda t: post(t, b"x-note: " + b"a" * 70_000), 431),
]


def chat_target(gateway: Gateway) -> Target:
    """The gateway's chat route as raw requests address it: the run's key with every POST."""
    auth = b"authorization: Bearer %s\r\n" % gateway.api_key.encode()
    return Target(get=b"/v1/models", post=CHAT, body=BODY, headers=auth)


def send_raw(listener: Listener, raw: bytes) -> tuple[int, dict[str, str], bytes, bool]:
    """Send ``raw`` on a fresh connection: the answer, and whether the server then closed it."""
    with connect(listener.port) as sock:
        sock.sendall(raw)
        status, headers, body = read_response(sock)
        return status, headers, body, closed(sock, within=0.5 if status == 200 else 3.0)


@pytest.fixture(scope="module")
def listener(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listener]:
    """The gateway, as the raw requests see it (one for the module: the table is long)."""
    with (
        serve_upstream(api_key=UPSTREAM_KEY) as upstream,
        running(upstream, tmp_path_factory.mktemp("raw")) as gateway,
    ):
        port = int(gateway.url.rsplit(":", 1)[1])
        yield Listener(port, chat_target(gateway))


@pytest.mark.parametrize("case", RAW, ids=[case.name for case in RAW])
def test_raw_requests_are_refused_as_h11_and_httptools_refuse_them(
    listener: Listener, case: Raw
) -> None:
    status, headers, body, was_closed = send_raw(listener, case.build(listener.target))
    assert status == case.status, body
    if case.status == 200:
        assert not was_closed  # kept alive
        return
    assert was_closed
    assert headers["connection"] == "close"
    error = json.loads(body)["error"]
    assert error["type"] == "osmosis_run_gateway"
    assert "\n" not in error["message"]


def test_a_refusal_says_why(listener: Listener) -> None:
    cases = {
        "conflicting content-lengths": (
            "invalid HTTP request: more than one Content-Length",
            "bad_request",
        ),
        "chunked, identity": (
            "invalid HTTP request: Transfer-Encoding is not chunked",
            "bad_request",
        ),
        "transfer-encoding and content-length": (
            "invalid HTTP request: both Content-Length and Transfer-Encoding",
            "bad_request",
        ),
        "a header line without a colon": (
            "invalid HTTP request: a header line is not NAME: VALUE with NAME a token",
            "bad_request",
        ),
        "a trailer line without a colon": (
            "invalid HTTP request: a trailer line is not NAME: VALUE with NAME a token",
            "bad_request",
        ),
        "a content-length past the body limit": (
            "request body over the 64 MiB limit (67108864 bytes)",
            "body_too_large",
        ),
    }
    by_name = {case.name: case for case in RAW}
    for name, (message, code) in cases.items():
        _, _, body, _ = send_raw(listener, by_name[name].build(listener.target))
        assert json.loads(body)["error"] == {
            "message": message,
            "type": "osmosis_run_gateway",
            "code": code,
        }, name


def test_a_chunked_body_past_the_limit_is_413(up: Upstream, tmp_path: Path) -> None:
    with running(up, tmp_path, limits=limits(max_body=1000)) as gateway:
        port = int(gateway.url.rsplit(":", 1)[1])
        listener = Listener(port, chat_target(gateway))
        chunks = b"".join(b"%x\r\n%s\r\n" % (300, b"x" * 300) for _ in range(4)) + b"0\r\n\r\n"
        status, _, body, was_closed = send_raw(
            listener, chunked(listener.target, b"transfer-encoding: chunked", chunks=chunks)
        )
        fits = send_raw(listener, post(listener.target))
    assert (status, was_closed) == (413, True)
    assert json.loads(body)["error"]["message"] == ("request body over the 1000 bytes limit")
    assert fits[0] == 200


def test_a_413_is_read_by_a_client_still_sending_its_body(up: Upstream, tmp_path: Path) -> None:
    with running(up, tmp_path, limits=limits(max_body=1000)) as gateway:
        reply = httpx.post(
            f"{gateway.url_for('r0')}/chat/completions",
            content=b"x" * 2_000_000,
            headers={"authorization": f"Bearer {gateway.api_key}"},
        )
    assert reply.status_code == 413
    assert reply.json()["error"]["code"] == "body_too_large"
    assert up.chat_requests() == []


# Chat bodies the gateway cannot forward ----------------------------------------------------


def deep(levels: int) -> bytes:
    """A chat body whose ``metadata`` nests lists ``levels`` deep (the body: one more)."""
    return b'{"model":"m","messages":[],"metadata":' + b"[" * levels + b"]" * levels + b"}"


BAD_BODIES = [
    (
        "deeply nested",
        deep(100_000),
        "the request body is nested more than 254 levels deep",
        "too_deeply_nested",
    ),
    (
        "nested past what the records hold",
        deep(300),
        "the request body is nested more than 254 levels deep",
        "too_deeply_nested",
    ),
    (
        "a lone surrogate",
        b'{"model":"m","messages":[{"role":"user","content":"a\\ud800b"}]}',
        "the request body cannot be sent: messages[0].content holds a lone surrogate "
        "(\\ud800); text must be valid Unicode",
        "invalid_json",
    ),
    (
        "an encoded surrogate",
        b'{"model":"m","messages":[{"role":"user","content":"a\xed\xa0\x80b"}]}',
        "the request body is not UTF-8 text (byte 0xed at 52)",
        "invalid_json",
    ),
    (
        "not UTF-8",
        b'{"model":"m","messages":[{"role":"user","content":"\xff"}]}',
        "the request body is not UTF-8 text (byte 0xff at 51)",
        "invalid_json",
    ),
    (
        "NaN",
        b'{"model":"m","messages":[],"temperature":NaN}',
        "the request body holds NaN, which is not JSON; send a number or null",
        "invalid_json",
    ),
    (
        "Infinity",
        b'{"model":"m","messages":[],"temperature":Infinity}',
        "the request body holds Infinity, which is not JSON; send a number or null",
        "invalid_json",
    ),
    (
        "-Infinity",
        b'{"model":"m","messages":[],"temperature":-Infinity}',
        "the request body holds -Infinity, which is not JSON; send a number or null",
        "invalid_json",
    ),
    (
        "a number past a float's range",
        b'{"model":"m","messages":[],"temperature":1e999}',
        "the request body holds 1e999, past a float's range; send a smaller number",
        "invalid_json",
    ),
    (
        "not JSON",
        b'{"model":"m",',
        "the request body must be a JSON object",
        "invalid_json",
    ),
]


@pytest.mark.parametrize(
    ("body", "message", "code"),
    [case[1:] for case in BAD_BODIES],
    ids=[case[0] for case in BAD_BODIES],
)
def test_a_body_that_cannot_be_forwarded_is_a_400_saying_why(
    up: Upstream, tmp_path: Path, body: bytes, message: str, code: str
) -> None:
    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        headers = {"authorization": f"Bearer {gateway.api_key}"}
        url = f"{gateway.url_for('r0')}/chat/completions"
        with httpx.Client() as http:
            reply = http.post(url, content=body, headers=headers)
            after = http.post(url, content=BODY, headers=headers)  # the connection still serves
    assert reply.status_code == 400
    assert reply.json() == {
        "error": {"message": message, "type": "osmosis_run_gateway", "code": code}
    }
    assert reply.headers["x-should-retry"] == "false"
    assert after.status_code == 200
    assert len(up.chat_requests()) == 1  # only the good one


def test_a_body_nested_as_deep_as_the_records_hold_is_forwarded_and_recorded(
    up: Upstream, tmp_path: Path
) -> None:
    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        reply = httpx.post(
            f"{gateway.url_for('r0')}/chat/completions",
            content=deep(253),
            headers={"authorization": f"Bearer {gateway.api_key}"},
        )
    assert reply.status_code == 200
    [record] = records(tmp_path)
    assert record["status"] == 200
    assert record["request"]["metadata"] == json.loads(deep(253))["metadata"]


# Idle, slow and too many connections -------------------------------------------------------


def port_of(gateway: Gateway) -> int:
    return int(gateway.url.rsplit(":", 1)[1])


UNAUTHORISED = b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n"  # answered by the gateway itself


def idle_connections(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each had one request answered and were kept alive."""
    socks = []
    for _ in range(count):
        sock = connect(port)
        sock.sendall(UNAUTHORISED)
        assert read_response(sock)[0] == 401
        socks.append(sock)
    return socks


def test_idle_keep_alive_connections_are_closed_after_the_keep_alive_timeout(
    up: Upstream, tmp_path: Path
) -> None:
    with running(up, tmp_path, limits=limits(keep_alive_s=0.3)) as gateway:
        socks = idle_connections(port_of(gateway), 100)
        never_used = connect(port_of(gateway))
        started = time.monotonic()
        assert all(closed(sock, within=3.0) for sock in [*socks, never_used])
        elapsed = time.monotonic() - started
        for sock in [*socks, never_used]:
            sock.close()
    assert 0.2 <= elapsed < 2.0


def test_a_connection_in_use_is_kept_past_the_keep_alive_timeout(
    up: Upstream, tmp_path: Path
) -> None:
    up.script([Reply(delay=0.8)])
    with running(up, tmp_path, limits=limits(keep_alive_s=0.3)) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)

        async def go() -> list[str | None]:
            async with client(gateway, "r0", max_retries=0) as c:
                answers = []
                for _ in range(3):  # a slow answer, then two more within the keep-alive
                    reply = await c.chat.completions.create(model="m", messages=HELLO)
                    answers.append(reply.choices[0].message.content)
                    await asyncio.sleep(0.1)
                return answers

        assert asyncio.run(go()) == ["echo: hello there model"] * 3


@pytest.mark.parametrize(
    ("sent", "timeouts", "message"),
    [
        (
            b"POST /v1/models HTTP/1.1\r\nhost: x\r\n",
            {"head_timeout_s": 0.5, "body_timeout_s": 10.0},
            "the request head did not arrive within 0.5 s",
        ),
        (
            b"POST /v1/models HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{}",
            {"head_timeout_s": 10.0, "body_timeout_s": 0.5},
            "the request body did not arrive within 0.5 s of its head",
        ),
    ],
    ids=["head", "body"],
)
def test_a_request_that_arrives_too_slowly_gets_408(
    up: Upstream, tmp_path: Path, sent: bytes, timeouts: dict[str, float], message: str
) -> None:
    with (
        running(up, tmp_path, limits=limits(keep_alive_s=10.0, **timeouts)) as gateway,
        connect(port_of(gateway), timeout=10.0) as sock,
    ):
        started = time.monotonic()
        for byte in sent:  # a byte at a time (slowloris): each resets no timer
            sock.sendall(bytes([byte]))
            time.sleep(0.005)
        status, _, body = read_response(sock)
        elapsed = time.monotonic() - started
        assert closed(sock)
    assert status == 408
    assert json.loads(body)["error"] == {
        "message": message,
        "type": "osmosis_run_gateway",
        "code": "request_timeout",
    }
    assert elapsed < 5.0  # not the other clock (10 s)


def test_at_the_connection_limit_the_longest_idle_connection_makes_room(
    up: Upstream, tmp_path: Path
) -> None:
    with running(up, tmp_path, limits=limits(max_connections=8)) as gateway:
        port = port_of(gateway)
        socks = idle_connections(port, 8)
        for _ in range(20):  # each new client is answered; an idle one is closed for it
            socks.extend(idle_connections(port, 1))
        still_open = [not closed(sock, within=0.05) for sock in socks]
        for sock in socks:
            sock.close()
    assert still_open == [False] * 20 + [True] * 8  # the oldest went first


def test_at_the_connection_limit_with_none_idle_a_new_client_gets_503(
    up: Upstream, tmp_path: Path
) -> None:
    up.default = Reply(delay=1.0)
    with running(up, tmp_path, limits=limits(max_connections=4)) as gateway:
        headers = {"authorization": f"Bearer {gateway.api_key}"}
        url = f"{gateway.url_for('r0')}/chat/completions"

        async def go() -> tuple[list[int], httpx.Response]:
            async with httpx.AsyncClient(timeout=10) as http:
                busy = [
                    asyncio.ensure_future(http.post(url, content=BODY, headers=headers))
                    for _ in range(4)
                ]
                await asyncio.sleep(0.3)  # all four in flight
                async with httpx.AsyncClient() as other:
                    refused = await other.post(url, content=BODY, headers=headers)
                return [(await answer).status_code for answer in busy], refused

        statuses, refused = asyncio.run(go())
    assert statuses == [200] * 4
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["connection"] == "close"
    assert refused.json()["error"] == {
        "message": "the server has 4 connections open, all busy (its limit); retry",
        "type": "osmosis_run_gateway",
        "code": "overloaded",
    }


_LOW_LIMIT = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from fake_upstream import serve_upstream
from osmosis_run.gateway.host import Gateway
from osmosis_run.gateway.proxy import ProxyConfig
with serve_upstream() as up:
    config = ProxyConfig(upstream=up.url, api_key=None, run_key=Gateway.new_key())
    with Gateway(config, run_dir=__import__("pathlib").Path(sys.argv[1]), check=False) as gw:
        print(gw.url, flush=True)
        sys.stdin.read()
"""


def test_idle_clients_do_not_starve_new_ones_at_a_low_descriptor_limit(tmp_path: Path) -> None:
    socks: list[socket.socket] = []
    with subprocess.Popen(
        [sys.executable, "-c", _LOW_LIMIT, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=subprocess_env(), text=True,
    ) as child:  # fmt: skip
        assert child.stdin is not None
        assert child.stdout is not None
        try:
            port = int(child.stdout.readline().strip().rsplit(":", 1)[1])
            for _ in range(200):  # far more than 128 descriptors' worth, each answered
                sock = connect(port, timeout=3.0)
                sock.sendall(UNAUTHORISED)
                assert read_response(sock)[0] == 401
                socks.append(sock)
        finally:
            for sock in socks:
                sock.close()
            child.stdin.close()  # the child ends


# The cache keeps only complete, successful answers -----------------------------------------


class _RawUpstream(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answers: list[bytes]) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.answers = answers
        self.requests: list[bytes] = []


class _Answer(socketserver.BaseRequestHandler):
    """One request read, the next scripted bytes written, the connection closed."""

    def handle(self) -> None:
        server: Any = self.server
        data = b""
        while b"\r\n\r\n" not in data:
            data += self.request.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        while len(body) < length:
            body += self.request.recv(65536)
        server.requests.append(body)
        self.request.sendall(server.answers.pop(0))
        self.request.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def raw_upstream(*answers: bytes) -> Iterator[Upstream]:
    """An upstream that answers each request with the next of ``answers``, byte for byte."""
    server = _RawUpstream(list(answers))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Upstream(url=f"http://127.0.0.1:{server.server_address[1]}/v1")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _sse(
    *events: bytes, done: bool = True, close_delimited: bool = False, then: bytes = b""
) -> bytes:
    """A 200 stream of ``events`` (``data:`` lines), then ``then`` as it is, then [DONE]."""
    payload = b"".join(b"data: " + event + b"\n\n" for event in events) + then
    if done:
        payload += b"data: [DONE]\n\n"
    if close_delimited:
        return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n" + payload
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
        b"connection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload)
    )


def _delta(text: str) -> bytes:
    return json.dumps(
        {"model": "m", "choices": [{"index": 0, "delta": {"content": text}}]}
    ).encode()


def _whole(body: bytes, *, close_delimited: bool = False) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    if close_delimited:
        return head + b"\r\n" + body
    return head + b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)


COMPLETION = json.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
).encode()

FAILED_ANSWERS = [
    (
        "a 200 that is not JSON",
        False,
        _whole(b"<html>upstream proxy error</html>"),
        "upstream {url}: a 200 answer that is not a JSON object",
    ),
    (
        "a close-delimited body cut short",
        False,
        _whole(COMPLETION[:40], close_delimited=True),
        "upstream {url}: a 200 answer that is not a JSON object",
    ),
    (
        "a 200 carrying an error",
        False,
        _whole(b'{"error": {"message": "the model is overloaded"}}'),
        "upstream {url}: a 200 answer carrying an error (the model is overloaded)",
    ),
    (
        "a stream without [DONE]",
        True,
        _sse(_delta("hel"), _delta("lo"), done=False),
        "upstream {url}: the stream ended before data: [DONE] (mid-stream)",
    ),
    (
        "a close-delimited stream cut short",
        True,
        _sse(_delta("hel"), done=False, close_delimited=True),
        "upstream {url}: the stream ended before data: [DONE] (mid-stream)",
    ),
    (
        "a stream with an error event",
        True,
        _sse(_delta("hel"), b'{"error": {"message": "the model is overloaded", "code": 503}}'),
        "upstream {url}: the stream carried an error (the model is overloaded)",
    ),
    (
        "a stream with an event: error",
        True,
        _sse(_delta("hel"), then=b'event: error\ndata: {"message": "overloaded"}\n\n'),
        "upstream {url}: the stream carried an error (overloaded)",
    ),
]


def _call(gateway: Gateway, *, stream: bool) -> httpx.Response:
    body = {"model": "m", "messages": HELLO, "stream": stream}
    return httpx.post(
        f"{gateway.url_for('r0')}/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {gateway.api_key}"},
    )


@pytest.mark.parametrize(
    ("stream", "answer", "error"),
    [case[1:] for case in FAILED_ANSWERS],
    ids=[case[0] for case in FAILED_ANSWERS],
)
def test_a_failed_answer_is_not_cached_and_counts_as_an_error(
    tmp_path: Path, stream: bool, answer: bytes, error: str
) -> None:
    cache = tmp_path / "cache.sqlite"
    with (
        raw_upstream(answer) as upstream,
        running(upstream, tmp_path / "a", cache_path=cache, check=False, model_retries=0) as gw,
    ):
        gw.open_rollout("r0", sample_index=0, timeout_s=None)
        _call(gw, stream=stream)
        usage = gw.take_usage("r0")
        url = upstream.url
    stats = gw.stats()  # the gateway closed: every answer it was storing is stored
    assert stats["cache"]["stored"] == 0
    assert (usage.requests, usage.errors, stats["errors"]) == (1, 1, 1)
    [record] = records(tmp_path / "a")
    assert (record["status"], record["error"]) == (200, error.format(url=url))
    with running(Upstream(url=url), tmp_path / "b", cache_path=cache, cache_mode="read-only") as gw:
        gw.open_rollout("r0", sample_index=0, timeout_s=None)
        replay = _call(gw, stream=stream)
    assert replay.status_code == 503
    assert replay.json()["error"]["code"] == "cache_miss"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_complete_answer_is_cached_and_replayed(tmp_path: Path, stream: bool) -> None:
    answer = _sse(_delta("hel"), _delta("lo")) if stream else _whole(COMPLETION)
    cache = tmp_path / "cache.sqlite"
    with (
        raw_upstream(answer) as upstream,
        running(upstream, tmp_path / "a", cache_path=cache, check=False) as gw,
    ):
        gw.open_rollout("r0", sample_index=0, timeout_s=None)
        first = _call(gw, stream=stream)
        url = upstream.url
    stored = gw.stats()["cache"]["stored"]
    with running(Upstream(url=url), tmp_path / "b", cache_path=cache, cache_mode="read-only") as gw:
        gw.open_rollout("r0", sample_index=0, timeout_s=None)
        replay = _call(gw, stream=stream)
    assert stored == 1
    assert (replay.status_code, replay.content) == (200, first.content)
    assert records(tmp_path / "a")[0]["error"] is None


# How calls are counted ---------------------------------------------------------------------


def test_a_call_that_gave_up_records_the_attempts_it_made(up: Upstream, tmp_path: Path) -> None:
    up.default = Reply(status=429, retry_after=0)
    with running(up, tmp_path, model_retries=5) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        with pytest.raises(openai.RateLimitError):
            asyncio.run(_ask(gateway))
    [record] = records(tmp_path)
    assert len(up.chat_requests()) == 6
    assert record["attempt"] == 6
    assert [a["attempt"] for a in record["previous_attempts"]] == [1, 2, 3, 4, 5, 6]
    assert record["previous_attempts"][-1]["gave_up"] == "retries"


def test_a_replayed_or_refused_call_made_no_attempt(up: Upstream, tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    with running(up, tmp_path / "a", cache_path=cache) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        asyncio.run(_ask(gateway))
    with running(up, tmp_path / "b", cache_path=cache, cache_mode="read-only") as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        asyncio.run(_ask(gateway))  # a hit
        with pytest.raises(openai.APIStatusError):
            asyncio.run(_ask(gateway, content="not in the cache"))
    assert [record["attempt"] for record in records(tmp_path / "a")] == [1]
    assert [(r["cached"], r["attempt"]) for r in records(tmp_path / "b")] == [(True, 0), (False, 0)]


async def _ask(gateway: Gateway, content: str = "hello there model") -> Any:
    async with client(gateway, "r0", max_retries=0) as c:
        return await c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": content}]
        )


def test_an_answer_json_cannot_hold_is_still_passed_on_and_recorded(tmp_path: Path) -> None:
    answer = COMPLETION.replace(b'"hello"', b'"a\\ud800b"')
    with (
        raw_upstream(_whole(answer)) as upstream,
        running(upstream, tmp_path, check=False) as gateway,
    ):
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        reply = _call(gateway, stream=False)
        usage = gateway.take_usage("r0")
    assert (reply.status_code, reply.content) == (200, answer)
    assert (usage.requests, usage.total_tokens, usage.errors) == (1, 4, 0)
    [record] = records(tmp_path)
    assert record["response"] == {
        "unencodable": True,
        "bytes": len(json.dumps(json.loads(answer))),
        "head": json.dumps(json.loads(answer)),
    }
    assert record["usage"]["total_tokens"] == 4
