"""A lean HTTP/1.1 protocol for uvicorn: what ``osmosis-run serve`` speaks.

uvicorn's pure-Python protocol (h11, the only one without a C extension) costs more Python per
request than a trivial rollout does: it validates every header with regular expressions,
walks a state machine per event, and writes a response in two system calls (its head, then its
body). ``HttpProtocol`` is a drop-in for it (``uvicorn.Config(http=HttpProtocol)``: the same
constructor, server state, keep-alive timeout and graceful shutdown), written for what a rollout
server is asked: small JSON requests on keep-alive connections. A response whose body is given
whole goes out in one write, head and body together.

What it speaks: HTTP/1.1 and 1.0; requests in order on a connection (pipelined ones wait their
turn); bodies by ``Content-Length`` or chunked; ``Expect: 100-continue``; ``Connection: close``
either way; responses with a length, chunked, or (HTTP/1.0) until close. What it refuses, with
a 400 and a closed connection, as h11 would: a malformed request line or header, a head larger
than ``h11_max_incomplete_event_size`` (16 KiB by default), conflicting or invalid lengths, a
transfer coding other than chunked. No WebSocket upgrade (the server has no WebSocket route).

Standard library only; the ASGI app is uvicorn's (``config.loaded_app``, its proxy-headers
middleware included).
"""

from __future__ import annotations

import asyncio
import http
import logging
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

__all__ = ["HttpProtocol"]

_MAX_HEAD = 16 * 1024  # h11's default for an incomplete event
_HIGH_WATER = 65536  # buffered request bytes before reading pauses (uvicorn's limit)
_TOKEN = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([^\x00-\x20\x7f]+) HTTP/1\.([01])")
_HEADER_NAME = re.compile(_TOKEN)
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?")
_INVALID = b"Invalid HTTP request received."
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


_STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}


class _BadRequest(Exception):
    """The request cannot be parsed: answer 400 and close."""


class HttpProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection, served to the ASGI app (uvicorn's protocol interface).

    Args:
        config: uvicorn's ``Config`` (loaded here if it is not yet).
        server_state: uvicorn's ``ServerState``: its connections, tasks and default headers.
        app_state: the lifespan's state, copied into each request's scope.
    """

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        self.config = config
        self.app = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.logger = logging.getLogger("uvicorn.error")
        self.access_logger = logging.getLogger("uvicorn.access")
        self.access_log = self.access_logger.hasHandlers()
        self.root_path: str = config.root_path
        self.asgi = {"version": config.asgi_version, "spec_version": "2.3"}
        self.limit_concurrency: int | None = config.limit_concurrency
        self.max_head: int = config.h11_max_incomplete_event_size or _MAX_HEAD
        self.timeout_keep_alive: float = config.timeout_keep_alive
        self.app_state = app_state
        self.server_state = server_state
        self.connections: set[Any] = server_state.connections
        self.tasks: set[asyncio.Task[None]] = server_state.tasks
        self.transport: asyncio.Transport | None = None
        self.server: tuple[str, int] | None = None
        self.client: tuple[str, int] | None = None
        self.scheme = "http"
        self.buffer = bytearray()
        self.cycle: _Cycle | None = None  # the request being answered
        self.reading_body: _Cycle | None = None  # the request whose body is arriving
        self.chunks: _Chunks | None = None
        self.keep_alive_timer: asyncio.TimerHandle | None = None
        self.read_paused = False
        self.write_paused = False
        self.writable: asyncio.Future[None] | None = None
        self.closed = False

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Register the connection with the server."""
        assert isinstance(transport, asyncio.Transport)
        self.connections.add(self)
        self.transport = transport
        self.server = _address(transport.get_extra_info("sockname"))
        self.client = _address(transport.get_extra_info("peername"))
        if transport.get_extra_info("sslcontext") is not None:
            self.scheme = "https"

    def connection_lost(self, exc: Exception | None) -> None:
        """The client went away: a request in progress sees ``http.disconnect``."""
        self.connections.discard(self)
        self.closed = True
        self._stop_keep_alive()
        for cycle in (self.cycle, self.reading_body):
            if cycle is not None:
                cycle.disconnect()
        self._resume_writing()
        if exc is None and self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool | None:
        """Half-closed by the client: the transport closes, as under uvicorn's own protocols."""
        return None

    def data_received(self, data: bytes) -> None:
        """Parse what arrived: bodies for the request reading one, then new requests."""
        self._stop_keep_alive()
        self.buffer += data
        try:
            self._parse()
        except _BadRequest:
            self._refuse()

    def pause_writing(self) -> None:
        """The transport's buffer is full: responses wait."""
        self.write_paused = True

    def resume_writing(self) -> None:
        """The transport drained."""
        self._resume_writing()

    # -- uvicorn's server interface ---------------------------------------------------------

    def shutdown(self) -> None:
        """Graceful shutdown: close when idle, else after the response in progress."""
        if self.cycle is None or self.cycle.complete:
            if self.transport is not None:
                self.transport.close()
        else:
            self.cycle.keep_alive = False

    # -- parsing --------------------------------------------------------------------------

    def _parse(self) -> None:
        while not self.closed:
            if self.reading_body is not None:
                if not self._read_body(self.reading_body):
                    return
                continue
            if self.cycle is not None:  # a pipelined request waits for the one before it
                if len(self.buffer) > _HIGH_WATER:
                    self._pause_reading()
                return
            if not self._read_head():
                return

    def _read_head(self) -> bool:
        """Start the next request if its head is all here (True), else wait (False)."""
        buffer = self.buffer
        while buffer[:2] == b"\r\n":  # blank lines before a request are allowed
            del buffer[:2]
        end = buffer.find(b"\r\n\r\n")
        if end < 0 or end > self.max_head:
            if len(buffer) > self.max_head:
                raise _BadRequest
            return False
        request = _Head(bytes(buffer[:end]))
        del buffer[: end + 4]
        raw_path, _, query = request.target.partition(b"?")
        path = raw_path.decode("ascii")
        if "%" in path:
            path = unquote(path)
        scope = {
            "type": "http",
            "asgi": self.asgi,
            "http_version": "1.0" if request.http_10 else "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": request.method,
            "root_path": self.root_path,
            "path": self.root_path + path,
            "raw_path": self.root_path.encode("ascii") + raw_path,
            "query_string": query,
            "headers": request.headers,
            "state": self.app_state.copy(),
        }
        # HTTP/1.0 connections close after one response, as h11 has them.
        cycle = _Cycle(
            self,
            scope,
            keep_alive=not (request.close or request.http_10),
            expect_continue=request.expect_continue,
        )
        length, chunked = request.length, request.chunked
        if chunked:
            self.chunks = _Chunks()
            self.reading_body = cycle
        elif length:
            cycle.remaining = length
            self.reading_body = cycle
        else:
            cycle.more_body = False
        self.cycle = cycle
        self._start(cycle)
        return True

    def _read_body(self, cycle: _Cycle) -> bool:
        """Hand the buffered body to the request; True once it is all read."""
        buffer = self.buffer
        if self.chunks is not None:
            done = self.chunks.feed(buffer, cycle)
        else:
            take = min(cycle.remaining, len(buffer))
            if take:
                cycle.add(bytes(buffer[:take]))
                del buffer[:take]
                cycle.remaining -= take
            done = cycle.remaining == 0
        if done:
            self.reading_body = None
            self.chunks = None
            cycle.more_body = False
            cycle.wake()
        elif len(cycle.body) > _HIGH_WATER:
            self._pause_reading()  # the app reads it first (``receive`` resumes reading)
        return done

    def _start(self, cycle: _Cycle) -> None:
        app: Callable[..., Any] = self.app
        if self.limit_concurrency is not None and (
            len(self.connections) >= self.limit_concurrency
            or len(self.tasks) >= self.limit_concurrency
        ):
            self.logger.warning("Exceeded concurrency limit.")
            app = _service_unavailable
        task = self.loop.create_task(cycle.run(app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def _refuse(self) -> None:
        """Answer 400 to what cannot be parsed, and close the connection."""
        self.logger.warning("Invalid HTTP request received.")
        if self.cycle is not None and not self.cycle.complete:
            self.cycle.disconnect()  # the request in progress cannot be answered now
            if self.cycle.started:
                self._close()
                return
        transport = self.transport
        if transport is not None and not transport.is_closing():
            head = [_STATUS_LINES[400]]
            head += [b"%s: %s\r\n" % pair for pair in self.server_state.default_headers]
            head.append(
                b"content-type: text/plain; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n" % len(_INVALID)
            )
            transport.write(b"".join(head) + _INVALID)
        self._close()

    # -- after a response -----------------------------------------------------------------

    def response_complete(self, cycle: _Cycle) -> None:
        """One response is out: close, or take the next request."""
        self.server_state.total_requests += 1
        if self.cycle is cycle:
            self.cycle = None
        # Answered before its body was read (a 401, say): the rest of the body is read and
        # dropped, as h11 does, unless the client waits for a 100 Continue it will not get.
        if not cycle.keep_alive or (self.reading_body is cycle and cycle.expect_continue):
            self._close()
            return
        if self.closed or self.transport is None or self.transport.is_closing():
            return
        self._resume_reading()
        if self.buffer:
            try:
                self._parse()
            except _BadRequest:
                self._refuse()
                return
        if self.cycle is None and self.reading_body is None and not self.closed:
            self.keep_alive_timer = self.loop.call_later(
                self.timeout_keep_alive, self._keep_alive_ended
            )

    def _keep_alive_ended(self) -> None:
        self.keep_alive_timer = None
        self._close()

    def _stop_keep_alive(self) -> None:
        if self.keep_alive_timer is not None:
            self.keep_alive_timer.cancel()
            self.keep_alive_timer = None

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def _pause_reading(self) -> None:
        if not self.read_paused and self.transport is not None:
            self.read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self.read_paused and self.transport is not None:
            self.read_paused = False
            self.transport.resume_reading()

    def _resume_writing(self) -> None:
        self.write_paused = False
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)
        self.writable = None

    async def drain(self) -> None:
        """Wait until the transport takes writes again."""
        if self.writable is None:
            self.writable = self.loop.create_future()
        await self.writable


class _Head:
    """A request's line and headers, parsed and checked.

    Raises:
        _BadRequest: a malformed request line or header, conflicting or invalid framing.
    """

    __slots__ = (
        "chunked",
        "close",
        "expect_continue",
        "headers",
        "http_10",
        "length",
        "method",
        "target",
    )

    def __init__(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        matched = _REQUEST_LINE.fullmatch(lines[0])
        if matched is None:
            raise _BadRequest
        method, self.target, minor = matched.groups()
        self.method = method.decode("ascii")
        self.http_10 = minor == b"0"
        self.headers: list[tuple[bytes, bytes]] = []
        self.length: int | None = None
        self.chunked = self.close = self.expect_continue = False
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or _HEADER_NAME.fullmatch(name) is None:
                raise _BadRequest  # also obsolete line folding (a leading space or tab)
            value = value.strip(b" \t")
            if _BAD_VALUE.search(value) is not None:
                raise _BadRequest
            name = name.lower()
            self._take(name, value)
            self.headers.append((name, value))
        if self.chunked and (self.length is not None or self.http_10):
            raise _BadRequest

    def _take(self, name: bytes, value: bytes) -> None:
        """Note what a header says about framing and the connection."""
        if name == b"content-length":
            if not value.isdigit() or (self.length is not None and int(value) != self.length):
                raise _BadRequest
            self.length = int(value)
        elif name == b"transfer-encoding":
            if value.lower() != b"chunked" or self.chunked:
                raise _BadRequest
            self.chunked = True
        elif name == b"connection":
            self.close = self.close or b"close" in _tokens(value)
        elif name == b"expect" and value.lower() == b"100-continue":
            self.expect_continue = True


def _tokens(value: bytes) -> list[bytes]:
    return [token.strip().lower() for token in value.split(b",")]


class _Chunks:
    """A chunked request body, decoded as it arrives."""

    def __init__(self) -> None:
        self.left = 0  # bytes of the current chunk still to come
        self.state = "size"  # size, data, crlf (after a chunk's data), trailer

    def feed(self, buffer: bytearray, cycle: _Cycle) -> bool:
        """Move what ``buffer`` holds into ``cycle``; True at the end of the body.

        Raises:
            _BadRequest: a malformed chunk.
        """
        while True:
            if self.state == "data":
                take = min(self.left, len(buffer))
                if not take:
                    return False
                cycle.add(bytes(buffer[:take]))
                del buffer[:take]
                self.left -= take
                if self.left:
                    return False
                self.state = "crlf"
            end = buffer.find(b"\r\n")
            if end < 0:
                if len(buffer) > _MAX_HEAD:
                    raise _BadRequest
                return False
            line = bytes(buffer[:end])
            del buffer[: end + 2]
            if self._line(line):
                return True

    def _line(self, line: bytes) -> bool:
        """Take a chunk's size line, the end of its data, or a trailer line; True at the end."""
        if self.state == "crlf":
            if line:
                raise _BadRequest
            self.state = "size"
        elif self.state == "size":
            matched = _CHUNK_SIZE.fullmatch(line)
            if matched is None:
                raise _BadRequest
            self.left = int(matched.group(1), 16)
            self.state = "data" if self.left else "trailer"
        elif not line:  # the blank line that ends the trailer
            return True
        return False


class _Cycle:
    """One request and its response."""

    __slots__ = (
        "body",
        "chunked",
        "complete",
        "connection",
        "disconnected",
        "expect_continue",
        "handed",
        "head",
        "keep_alive",
        "length",
        "more_body",
        "remaining",
        "scope",
        "started",
        "waiter",
    )

    def __init__(
        self,
        connection: HttpProtocol,
        scope: dict[str, Any],
        *,
        keep_alive: bool,
        expect_continue: bool,
    ) -> None:
        self.connection = connection
        self.scope = scope
        self.keep_alive = keep_alive
        self.expect_continue = expect_continue
        self.body = bytearray()
        self.more_body = True  # more of the body is to come from the client
        self.handed = False  # the whole body was given to the app
        self.remaining = 0
        self.disconnected = False
        self.started = False
        self.complete = False
        self.head = b""
        self.length: int | None = None  # response bytes still due, when a length was given
        self.chunked = False
        self.waiter: asyncio.Future[None] | None = None

    def add(self, data: bytes) -> None:
        if not self.complete:  # after the response, the rest of the body is dropped
            self.body += data
            self.wake()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def disconnect(self) -> None:
        self.disconnected = True
        self.wake()

    async def run(self, app: Callable[..., Any]) -> None:
        connection = self.connection
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as exc:  # as uvicorn: logged, answered 500 (or closed), kept here
            connection.logger.error("Exception in ASGI application\n", exc_info=exc)  # noqa: TRY400
            if not self.started:
                await self._internal_error()
            else:
                connection._close()
        else:
            if result is not None:
                connection.logger.error(
                    "ASGI callable should return None, but returned '%s'.", result
                )
                connection._close()
            elif not self.started and not self.disconnected:
                connection.logger.error("ASGI callable returned without starting response.")
                await self._internal_error()
            elif not self.complete and not self.disconnected:
                connection.logger.error("ASGI callable returned without completing response.")
                connection._close()

    async def _internal_error(self) -> None:
        self.keep_alive = False
        await self.send(
            {
                "type": "http.response.start",
                "status": 500,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", b"21"),
                    (b"connection", b"close"),
                ],
            }
        )
        await self.send({"type": "http.response.body", "body": b"Internal Server Error"})

    async def receive(self) -> dict[str, Any]:
        """The request's body (as it arrives), then ``http.disconnect`` once it is answered."""
        connection = self.connection
        if self.expect_continue and not self.started:
            self.expect_continue = False
            if self.more_body and not self.disconnected and connection.transport is not None:
                connection.transport.write(_CONTINUE)
        while not self.disconnected and not self.complete:
            if not self.handed:
                if self.body or not self.more_body:
                    body, self.body = bytes(self.body), bytearray()
                    more = self.more_body
                    self.handed = not more
                    if more:
                        connection._resume_reading()
                    return {"type": "http.request", "body": body, "more_body": more}
                connection._resume_reading()
            self.waiter = connection.loop.create_future()
            await self.waiter
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        """Take the app's response; a whole one is written at once, head and body."""
        connection = self.connection
        if connection.write_paused and not self.disconnected:
            await connection.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.started:
            if kind != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{kind}'."
                )
            self.started = True
            self._start(message)
            return
        if self.complete:
            raise RuntimeError(
                f"Unexpected ASGI message '{kind}' sent, after response already completed."
            )
        if kind != "http.response.body":
            raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
        more: bool = message.get("more_body", False)
        body = self._framed(message.get("body", b""), more=more)
        out = self.head + body if self.head else body
        self.head = b""
        transport = connection.transport
        if out and transport is not None:
            transport.write(out)
        if more:
            return
        if self.length:
            raise RuntimeError("Response content shorter than Content-Length")
        self.complete = True
        self.wake()
        connection.response_complete(self)

    def _framed(self, body: bytes, *, more: bool) -> bytes:
        """A piece of the response's body as it goes on the wire."""
        if self.scope["method"] == "HEAD":
            self.length = None
            return b""
        if self.chunked:
            framed = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            return framed if more else framed + b"0\r\n\r\n"
        if self.length is not None:
            self.length -= len(body)
            if self.length < 0:
                raise RuntimeError("Response content longer than Content-Length")
        return body

    def _log(self, status: int) -> None:
        connection, scope = self.connection, self.scope
        query = scope["query_string"]
        connection.access_logger.info(
            '%s - "%s %s HTTP/%s" %d',
            "{}:{}".format(*connection.client) if connection.client else "",
            scope["method"],
            scope["path"] + ("?" + query.decode("latin-1") if query else ""),
            scope["http_version"],
            status,
        )

    def _take(self, name: bytes, value: bytes) -> bool:
        """Note what a response header says about framing; True when it closes."""
        if name == b"content-length" and self.length is None and not self.chunked:
            self.length = int(value)
        elif name == b"transfer-encoding" and value.lower() == b"chunked":
            self.length = None
            self.chunked = True
        elif name == b"connection" and b"close" in _tokens(value):
            self.keep_alive = False
            return True
        return False

    def _start(self, message: dict[str, Any]) -> None:
        connection = self.connection
        status: int = message["status"]
        scope = self.scope
        if connection.access_log:
            self._log(status)
        head = [_STATUS_LINES.get(status) or _status_line(status)]
        head += [b"%s: %s\r\n" % pair for pair in connection.server_state.default_headers]
        closing = False
        for name, value in message.get("headers", ()):
            if _HEADER_NAME.fullmatch(name) is None:
                raise RuntimeError("Invalid HTTP header name.")
            if _BAD_VALUE.search(value) is not None:
                raise RuntimeError("Invalid HTTP header value.")
            lowered = name.lower()
            closing = self._take(lowered, value) or closing
            head.append(b"%s: %s\r\n" % (lowered, value))
        bodiless = scope["method"] == "HEAD" or status in (204, 304) or status < 200
        if self.length is None and not self.chunked and not bodiless:
            if scope["http_version"] == "1.0":
                self.keep_alive = False  # the body ends when the connection does
            else:
                self.chunked = True
                head.append(b"transfer-encoding: chunked\r\n")
        if not self.keep_alive and not closing:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        self.head = b"".join(head)


async def _service_unavailable(_scope: Any, _receive: Any, send: Any) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", b"19"),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"Service Unavailable"})


def _address(info: Any) -> tuple[str, int] | None:
    if isinstance(info, (tuple, list)) and len(info) >= 2:
        return str(info[0]), int(info[1])
    if isinstance(info, str):  # a Unix socket
        return info, 0
    return None
