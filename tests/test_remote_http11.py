"""The lean HTTP/1.1 client of eval --server's hot path (``backends/_http11.py``), against real
loopback sockets that answer as servers do (keep-alive, chunked, closing, broken)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from osmosis_run.backends._http11 import Http11Pool, usable_for

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
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await use(f"http://127.0.0.1:{port}")
    finally:
        server.close()
        await server.wait_closed()


def test_requests_reuse_one_keep_alive_connection() -> None:
    connections = 0
    seen: list[bytes] = []

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
        pool = Http11Pool(url + "/prefix", headers={"Authorization": "Bearer k"}, keep=4)
        codes = []
        for _ in range(3):
            response = await pool.request("POST", "/rollout", content=b"{}", within_s=5)
            codes.append(response.status_code)
            assert response.json() == {"n": 1}
        await pool.aclose()
        return codes

    assert asyncio.run(with_server(handler, use)) == [200, 200, 200]
    assert connections == 1
    first = seen[0].decode()
    assert first.startswith("POST /prefix/rollout HTTP/1.1\r\n")
    assert "Authorization: Bearer k\r\n" in first
    assert first.endswith("Content-Length: 2\r\n\r\n{}")


def test_a_chunked_answer_is_read_whole() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b'4\r\n{"a"\r\n5;x=y\r\n: 12}\r\n0\r\nx-trailer: 1\r\n\r\n')
        await writer.drain()
        writer.close()

    async def use(url: str) -> Any:
        pool = Http11Pool(url, headers={}, keep=1)
        response = await pool.request("GET", "/x", within_s=5)
        await pool.aclose()
        return response.json()

    assert asyncio.run(with_server(handler, use)) == {"a": 12}


def test_an_idle_connection_the_server_closed_is_replaced_and_the_request_sent_again() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(ok(b"{}"))  # keep-alive promised, then closed: a keep-alive timeout
        await writer.drain()
        writer.close()

    async def use(url: str) -> list[int]:
        pool = Http11Pool(url, headers={}, keep=1)
        first = await pool.request("GET", "/x", within_s=5)
        await asyncio.sleep(0.1)
        second = await pool.request("GET", "/x", within_s=5)
        await pool.aclose()
        return [first.status_code, second.status_code]

    assert asyncio.run(with_server(handler, use)) == [200, 200]
    assert connections == 2


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
        pool = Http11Pool(url, headers={}, keep=4)
        answers = []
        for _ in range(2):
            response = await pool.request("POST", "/rollout", content=b"{}", within_s=5)
            answers.append((response.status_code, response.headers["Retry-After"], response.json()))
        await pool.aclose()
        return answers

    assert asyncio.run(with_server(handler, use)) == [(429, "2", {"detail": "full"})] * 2
    assert connections == 2


def test_what_is_not_http_a_silent_server_and_a_refused_port_are_transport_errors() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()
        writer.close()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # never answers; the client gives up and hangs up
        finally:
            writer.close()

    async def use(url: str) -> None:
        with pytest.raises(httpx.ReadError, match=r"not an HTTP/1\.1 answer: 'SSH-2\.0-OpenSSH'"):
            await Http11Pool(url, headers={}, keep=1).request("GET", "/x", within_s=5)

    async def wait(url: str) -> None:
        with pytest.raises(httpx.ReadTimeout, match=r"no answer within 0.2s"):
            await Http11Pool(url, headers={}, keep=1).request("GET", "/x", within_s=0.2)

    asyncio.run(with_server(garbage, use))
    asyncio.run(with_server(silent, wait))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    refused = Http11Pool(f"http://127.0.0.1:{port}", headers={}, keep=1)
    with pytest.raises(httpx.ConnectError, match=r"^Connection refused$"):
        asyncio.run(refused.request("GET", "/x", within_s=5))


def test_the_lean_client_serves_plain_http_without_a_proxy_only() -> None:
    assert usable_for("http://127.0.0.1:8000", {})
    assert not usable_for("https://rollouts.example:443", {})
    assert not usable_for("http://10.0.0.2:8000", {"HTTP_PROXY": "http://proxy:3128"})
    assert not usable_for("http://10.0.0.2:8000", {"all_proxy": "socks5://proxy"})
