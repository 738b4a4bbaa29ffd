"""A small HTTP/1.1 server on asyncio streams: what the gateway needs and nothing more.

Keep-alive connections, ``Content-Length`` and chunked request bodies, whole responses and
chunked (streamed) ones. No TLS, no HTTP/2, no upgrades: it listens on loopback for the
rollouts of one run. A general server (uvicorn) costs several times more per request, and the
gateway sits on every model call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

__all__ = ["Handler", "Request", "Response", "Server", "start_server"]

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


@dataclass(slots=True)
class Request:
    """One request: method, path (with its query), lower-cased headers and the body."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes


class Response:
    """How a handler answers: ``send`` a whole body, or ``start`` then ``write`` then ``end``."""

    __slots__ = ("_chunked", "_writer", "keep_alive", "started")

    def __init__(self, writer: asyncio.StreamWriter, *, keep_alive: bool) -> None:
        self._writer = writer
        self._chunked = False
        self.keep_alive = keep_alive
        self.started = False

    def _head(self, status: int, headers: Iterable[tuple[str, str]], extra: str) -> bytes:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
        lines.extend(f"{k}: {v}" for k, v in headers)
        lines.append(extra)
        if not self.keep_alive:
            lines.append("connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def send(self, status: int, headers: Iterable[tuple[str, str]], body: bytes) -> None:
        """Answer with a whole body."""
        self.started = True
        self._writer.write(self._head(status, headers, f"content-length: {len(body)}") + body)
        await self._writer.drain()

    async def start(self, status: int, headers: Iterable[tuple[str, str]]) -> None:
        """Start a streamed (chunked) answer."""
        self.started = True
        self._chunked = True
        self._writer.write(self._head(status, headers, "transfer-encoding: chunked"))
        await self._writer.drain()

    async def write(self, data: bytes) -> None:
        """Send one chunk of a streamed answer, at once."""
        if data:
            self._writer.write(b"%x\r\n%b\r\n" % (len(data), data))
            await self._writer.drain()

    async def end(self) -> None:
        """End a streamed answer."""
        if self._chunked:
            self._writer.write(b"0\r\n\r\n")
            await self._writer.drain()


Handler = Callable[[Request, Response], Awaitable[None]]


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Server:
    """A listening server and its open connections."""

    def __init__(self) -> None:
        self.listener: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The port it listens on."""
        assert self.listener is not None
        port: int = self.listener.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        """Stop listening, close every connection (keep-alive ones too), wait for handlers."""
        if self.listener is not None:
            self.listener.close()
        for writer in list(self.writers):
            writer.close()
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=2.0)


async def start_server(handler: Handler, host: str = "127.0.0.1", port: int = 0) -> Server:
    """Listen on ``host:port`` (0: any free port) and serve every connection with ``handler``."""
    server = Server()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            server.tasks.add(task)
        try:
            await _serve(handler, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away, or the server is closing
        finally:
            server.writers.discard(writer)
            if task is not None:
                server.tasks.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    server.listener = await asyncio.start_server(
        connection, host, port, limit=MAX_HEAD, reuse_address=True, backlog=1024
    )
    return server


async def _serve(
    handler: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            return  # closed between requests
        except asyncio.LimitOverrunError:
            await _refuse(writer, 431, "request head too large")
            return
        try:
            request = await _read_request(head, reader, writer)
        except _BadRequest as exc:
            await _refuse(writer, exc.status, str(exc))
            return
        keep_alive = request.headers.get("connection", "").lower() != "close"
        response = Response(writer, keep_alive=keep_alive)
        await handler(request, response)
        if not response.keep_alive:
            return


async def _read_request(
    head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> Request:
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(400, "malformed request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise _BadRequest(400, "malformed header")
        headers[name.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":  # curl, for bodies over 1 KiB
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    else:
        try:
            length = int(headers.get("content-length") or 0)
        except ValueError:
            raise _BadRequest(400, "malformed content-length") from None
        if length > MAX_BODY or length < 0:
            raise _BadRequest(413, "request body too large")
        body = await reader.readexactly(length) if length else b""
    return Request(parts[0].upper(), parts[1], headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError:
            raise _BadRequest(400, "malformed chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailers
            return b"".join(parts)
        total += size
        if total > MAX_BODY:
            raise _BadRequest(413, "request body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def _refuse(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    body = message.encode()
    writer.write(
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: text/plain\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()
