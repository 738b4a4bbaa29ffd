"""The one HTTP/1.1 client (``osmosis_run/http/client.py``), against raw loopback sockets that
answer as servers do: keep-alive, chunked, closing, broken, malformed, slow, TLS, a proxy."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from fake_upstream import serve_upstream

from osmosis_run.http.client import Client, Proxied, Response, TransportError, proxy_for

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def ok(body: bytes, *extra: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in extra)
    return f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n{head}\r\n".encode() + body


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    return head + await reader.readexactly(length)


async def with_server(handler: Handler, use: Callable[[str], Awaitable[Any]]) -> Any:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(closing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await use(f"http://127.0.0.1:{port}")
    finally:
        server.close()
        await server.wait_closed()


def answering(*answers: bytes) -> Handler:
    """A server that reads one request per connection, writes the next answer and closes."""
    left = list(answers)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(left.pop(0))
        await writer.drain()
        writer.close()

    return handler


async def once(url: str, method: str = "GET", **options: Any) -> Response:
    """One request through a client of its own, closed after."""
    client = Client(url, max_head_bytes=options.pop("max_head_bytes", 1 << 20))
    try:
        return await client.request(method, "/x", timeout_s=options.pop("timeout_s", 5), **options)
    finally:
        await client.aclose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Keep-alive and framing -----------------------------------------------------------------------


def test_requests_reuse_one_keep_alive_connection() -> None:
    connections = 0
    seen: list[bytes] = []
    host = ""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while not reader.at_eof():
            try:
                seen.append(await read_request(reader))
            except asyncio.IncompleteReadError:
                break
            writer.write(ok(b'{"n": 1}'))
        writer.close()

    async def use(url: str) -> list[int]:
        nonlocal host
        host = url.removeprefix("http://")
        client = Client(url + "/prefix", headers={"authorization": "Bearer k"})
        codes = []
        for _ in range(3):
            response = await client.request("POST", "/rollout", body=b"{}", timeout_s=5)
            codes.append(response.status_code)
            assert response.json() == {"n": 1}
        await client.aclose()
        return codes

    assert asyncio.run(with_server(handler, use)) == [200, 200, 200]
    assert connections == 1
    assert seen[0].decode() == (
        f"POST /prefix/rollout HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer k\r\n"
        "content-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    )


def test_a_chunked_answer_is_read_whole_extensions_and_trailers_aside() -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b'4\r\n{"a"\r\n5;x=y\r\n: 12}\r\n0\r\nx-trailer: 1\r\n\r\n'
    )

    async def use(url: str) -> Any:
        return (await once(url)).json()

    assert asyncio.run(with_server(answering(answer), use)) == {"a": 12}


def test_a_100_continue_is_followed_by_the_answer() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"{}", "x-real: 1")

    async def use(url: str) -> tuple[int, dict[str, str]]:
        response = await once(url, "POST", body=b"{}")
        return response.status_code, response.headers

    assert asyncio.run(with_server(answering(answer), use)) == (
        200,
        {"content-length": "2", "x-real": "1"},
    )


def test_the_answer_to_a_head_has_no_body_whatever_length_it_names() -> None:
    async def use(url: str) -> tuple[int, str, bytes]:
        response = await once(url, "HEAD")
        return response.status_code, response.headers["content-length"], response.content

    answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
    assert asyncio.run(with_server(answering(answer), use)) == (200, "5", b"")


def test_an_idle_connection_the_server_closed_is_replaced() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(ok(b"{}"))  # keep-alive promised, then closed: a keep-alive timeout
        await writer.drain()
        writer.close()

    async def use(url: str) -> list[int]:
        client = Client(url)
        first = await client.request("POST", "/x", body=b"{}", timeout_s=5)
        await asyncio.sleep(0.1)
        second = await client.request("POST", "/x", body=b"{}", timeout_s=5)
        await client.aclose()
        return [first.status_code, second.status_code]

    assert asyncio.run(with_server(handler, use)) == [200, 200]
    assert connections == 2


@pytest.mark.parametrize(("method", "sent_again"), [("GET", True), ("POST", False)])
def test_a_reused_connection_closing_unanswered_sends_only_an_idempotent_request_again(
    method: str, sent_again: bool
) -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        if connections == 1:  # the second request on this connection is read, not answered
            writer.write(ok(b"{}"))
            await read_request(reader)
        else:
            writer.write(ok(b'"again"'))
        await writer.drain()
        writer.close()

    async def use(url: str) -> Any:
        client = Client(url)
        await client.request(method, "/x", timeout_s=5)
        try:
            return (await client.request(method, "/x", timeout_s=5)).json()
        except TransportError as exc:
            return (exc.kind, str(exc))
        finally:
            await client.aclose()

    expected = "again" if sent_again else ("dropped", "the connection dropped")
    assert asyncio.run(with_server(handler, use)) == expected
    assert connections == (2 if sent_again else 1)


def test_connection_close_is_honoured_and_an_answer_without_length_runs_to_the_end() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(b'HTTP/1.1 429 Too Many Requests\r\nretry-after: 2\r\n\r\n{"detail": "full"}')
        await writer.drain()
        writer.close()

    async def use(url: str) -> list[Any]:
        client = Client(url)
        answers = []
        for _ in range(2):
            response = await client.request("POST", "/rollout", body=b"{}", timeout_s=5)
            answers.append((response.status_code, response.headers["retry-after"], response.json()))
        await client.aclose()
        return answers

    assert asyncio.run(with_server(handler, use)) == [(429, "2", {"detail": "full"})] * 2
    assert connections == 2


def test_a_streamed_body_arrives_piece_by_piece_and_a_cut_is_an_error() -> None:
    go_on = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\nfirst\n\r\n")
        await writer.drain()
        await go_on.wait()
        writer.write(b"7\r\nsecond\n\r\n")  # and no last chunk: cut off
        await writer.drain()
        writer.close()

    async def use(url: str) -> list[Any]:
        reply = await Client(url).send("POST", "/x", body=b"{}", timeout_s=5)
        seen: list[Any] = [reply.status_code]
        try:
            async for data in reply.aiter_bytes():
                seen.append(data)
                go_on.set()
        except TransportError as exc:
            seen.append(str(exc))
        return seen

    assert asyncio.run(with_server(handler, use)) == [
        200,
        b"first\n",
        b"second\n",
        "the connection dropped",
    ]


# What is not a usable answer: errors naming what was wrong ----------------------------------


def test_a_silent_server_a_stalled_body_and_a_refused_port() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # never answers; the client gives up and hangs up
        finally:
            writer.close()

    async def stalled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
        await writer.drain()
        await reader.read()
        writer.close()

    async def no_answer(url: str) -> tuple[str, str]:
        with pytest.raises(TransportError) as caught:
            await once(url, timeout_s=0.2)
        return caught.value.kind, str(caught.value)

    async def no_body(url: str) -> tuple[str, str]:
        reply = await Client(url).send("GET", "/x", timeout_s=0.2)
        with pytest.raises(TransportError) as caught:
            await reply.aread()
        return caught.value.kind, str(caught.value)

    assert asyncio.run(with_server(silent, no_answer)) == ("timeout", "no answer within 0.2 s")
    assert asyncio.run(with_server(stalled, no_body)) == (
        "timeout",
        "nothing received for 0.2 s",
    )
    refused = Client(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(TransportError) as caught:
        asyncio.run(refused.request("GET", "/x", timeout_s=5))
    assert (caught.value.kind, str(caught.value)) == ("connect", "connection refused")


MALFORMED = [
    ("a bad status code", b"HTTP/1.1 2x0 OK\r\ncontent-length: 0\r\n\r\n", "Invalid status code"),
    ("HTTP/2's status line", b"HTTP/2 200 OK\r\n\r\n", "Expected dot"),
    (
        "a duplicate Content-Length",
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n{}",
        "Duplicate Content-Length",
    ),
    (
        "conflicting Content-Lengths",
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 7\r\n\r\n{}",
        "Duplicate Content-Length",
    ),
    (
        "a Content-Length list",
        b"HTTP/1.1 200 OK\r\ncontent-length: 2, 2\r\n\r\n{}",
        "Invalid character in Content-Length",
    ),
    (
        "a negative Content-Length",
        b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n{}",
        "Invalid character in Content-Length",
    ),
    (
        "Content-Length beside chunked",
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        "Transfer-Encoding can't be present with Content-Length",
    ),
    (
        "a chunk size that is not hexadecimal",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        "Invalid character in chunk size",
    ),
    (
        "a chunk longer than its size",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}xx\r\n0\r\n\r\n",
        "Expected LF after chunk data",
    ),
    (
        "a space before a header's colon",
        b"HTTP/1.1 200 OK\r\ncontent-length : 2\r\n\r\n{}",
        "Invalid header field char",
    ),
    (
        "a folded header line",
        b"HTTP/1.1 200 OK\r\nx-a: 1\r\n 2\r\ncontent-length: 2\r\n\r\n{}",
        "Unexpected whitespace after header value",
    ),
    ("bare LF line ends", b"HTTP/1.1 200 OK\ncontent-length: 2\n\n{}", "Missing expected CR after response line"),
    (
        "a NUL in a header value",
        b"HTTP/1.1 200 OK\r\nx-a: 1\x002\r\ncontent-length: 2\r\n\r\n{}",
        "Invalid header value char",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "why"), [case[1:] for case in MALFORMED], ids=[case[0] for case in MALFORMED]
)
def test_a_malformed_answer_is_an_error_naming_what_was_wrong(answer: bytes, why: str) -> None:
    async def use(url: str) -> tuple[str, str]:
        with pytest.raises(TransportError) as caught:
            await once(url)
        return caught.value.kind, str(caught.value)

    assert asyncio.run(with_server(answering(answer), use)) == (
        "protocol",
        f"not a valid HTTP/1.1 answer ({why})",
    )


def test_what_is_not_http_at_all_is_an_error_in_llhttps_words() -> None:
    async def use(url: str) -> tuple[str, str]:
        with pytest.raises(TransportError) as caught:
            await once(url)
        return caught.value.kind, str(caught.value)

    kind, message = asyncio.run(with_server(answering(b"SSH-2.0-OpenSSH\r\n\r\n"), use))
    assert kind == "protocol"
    assert message in (  # llhttp 9.2 names the other protocols it knows; 9.1 only HTTP
        "not a valid HTTP/1.1 answer (Expected HTTP/, RTSP/ or ICE/)",
        "not a valid HTTP/1.1 answer (Expected HTTP/)",
    )


def test_bytes_after_the_answer_or_before_a_request_are_errors() -> None:
    async def extra(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(ok(b"{}") + ok(b"{}"))
        await writer.drain()
        await reader.read()
        writer.close()

    async def after(url: str) -> str:
        with pytest.raises(TransportError) as caught:
            await once(url)
        return str(caught.value)

    async def unsolicited(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(ok(b"{}"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(ok(b'"stale"'))  # while idle: never taken for the next answer
        await writer.drain()
        await reader.read()
        writer.close()

    async def idle(url: str) -> list[Any]:
        client = Client(url)
        first = await client.request("GET", "/x", timeout_s=5)
        await asyncio.sleep(0.2)
        kept = len([c for c in client.idle if not c.closed])
        await client.aclose()
        return [first.json(), kept]

    assert asyncio.run(with_server(extra, after)) == (
        "not a valid HTTP/1.1 answer (bytes after the answer)"
    )
    assert asyncio.run(with_server(unsolicited, idle)) == [{}, 0]


def test_a_head_past_the_limit_is_an_error() -> None:
    answer = b"HTTP/1.1 200 OK\r\n" + b"x-pad: " + b"a" * 2000 + b"\r\ncontent-length: 0\r\n\r\n"

    async def use(url: str) -> str:
        with pytest.raises(TransportError) as caught:
            await once(url, max_head_bytes=1024)
        return str(caught.value)

    assert asyncio.run(with_server(answering(answer), use)) == (
        "the answer's head is over 1024 bytes"
    )


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^not an http\(s\) URL: ftp://host/$"):
        Client("ftp://host/")


# TLS ------------------------------------------------------------------------------------------


def test_tls_is_spoken_and_its_connection_reused(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    trusted = ssl.create_default_context(cafile=str(cert))
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()

    async def go(url: str) -> list[Any]:
        client = Client(url, headers={"authorization": "Bearer sk-up-0123456789"}, tls=trusted)
        answers = []
        for _ in range(3):
            reply = await client.send("POST", "/chat/completions", body=body, timeout_s=10)
            answers.append((reply.status_code, json.loads(await reply.aread())))
        idle = len(client.idle)
        await client.aclose()
        return [answers, idle]

    with serve_upstream(api_key="sk-up-0123456789", tls=served) as up:
        answers, idle = asyncio.run(go(up.url))
        assert up.url.startswith("https://")
        untrusted = Client(up.url)  # the system's trust store does not hold this certificate
        with pytest.raises(TransportError) as caught:
            asyncio.run(untrusted.request("GET", "/models", timeout_s=10))
    assert [status for status, _ in answers] == [200] * 3
    assert answers[0][1]["choices"][0]["message"]["content"] == "echo: hi"
    assert idle == 1  # one connection, kept alive across the three requests
    assert caught.value.kind == "connect"
    assert "certificate verify failed" in str(caught.value)


# Proxies --------------------------------------------------------------------------------------


def test_proxy_for_reads_the_environment_and_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    assert proxy_for("http://10.0.0.2:8000") is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert proxy_for("http://10.0.0.2:8000") == "http://proxy:3128"
    assert proxy_for("http://127.0.0.1:8000") is None
    assert proxy_for("https://rollouts.example") is None
    monkeypatch.setenv("ALL_PROXY", "socks5://proxy:1080")
    assert proxy_for("https://rollouts.example") == "socks5://proxy:1080"


def test_proxied_requests_go_through_the_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        writer.write(ok(b'{"via": "proxy"}', "connection: close"))
        await writer.drain()
        writer.close()

    async def use(url: str) -> tuple[int, Any]:
        monkeypatch.setenv("HTTP_PROXY", url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        client = Proxied("http://rollouts.invalid:8000", headers={"authorization": "Bearer k"})
        try:
            response = await client.request("POST", "/rollout", body=b"{}", timeout_s=5)
        finally:
            await client.aclose()
        return response.status_code, response.json()

    assert asyncio.run(with_server(proxy, use)) == (200, {"via": "proxy"})
    head = seen[0].decode().lower()
    assert head.startswith("post http://rollouts.invalid:8000/rollout http/1.1\r\n")
    assert "authorization: bearer k\r\n" in head
