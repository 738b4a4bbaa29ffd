"""A small HTTP/1.1 server on asyncio streams: what the gateway needs and nothing more.

Keep-alive connections, ``Content-Length`` and chunked request bodies, whole responses and
chunked (streamed) ones. No TLS, no HTTP/2, no upgrades: it listens on loopback for the
rollouts of one run. A general server (uvicorn) costs several times more per request, and the
gateway sits on every model call.

What it refuses, as h11 and httptools do (400, then the connection is closed): a malformed
request line or version, bytes outside printable ASCII in the target or a header (tab allowed
in values), a header name that is not a token (whitespace before the colon included), a line
without a colon, obs-fold continuation lines, more than one ``Content-Length`` or one that is
not 1 to 20 digits, ``Transfer-Encoding`` other than exactly ``chunked`` (or given twice, or
beside ``Content-Length``), a malformed chunk. A head over ``max_head`` gets 431, a body over
``max_body`` 413. Each refusal is a JSON error in the OpenAI shape, and the rest of the request
is read and dropped for up to ``LINGER_S`` before the close, so that a client still sending
its body reads the answer instead of a reset.

``Limits`` (the server's constructor parameters, documented in the README) bound what clients
hold: a connection with no request under way is closed after ``keep_alive_s``; a request's head
must arrive within ``head_timeout_s`` of its first byte and its body within ``body_timeout_s``
of the head (else 408 and close); at most ``max_connections`` are open. At that limit a new
client makes room by closing the longest-idle keep-alive connection, as nginx does (an idle
connection may be closed at any time, RFC 9112 §9.5, and its client reconnects; refusing the
new client instead would let idle ones starve busy ones); when none is idle, the new client's
request gets 503 with ``retry-after: 1``, as uvicorn's ``limit_concurrency`` answers. The limit
is also at most a quarter of the process's open-file limit: the rollouts' own ends of these
connections, the upstream connections and the run's files live in the same process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

__all__ = ["Handler", "Limits", "Request", "Response", "Server", "error_body", "start_server"]

KEEP_ALIVE_S = 5.0  # uvicorn's default
HEAD_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 60.0
MAX_CONNECTIONS = 1024
MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
LINGER_S = 2.0
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Payload Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
# What a head may hold (CR and LF only in pairs); each check is one pass in C: the head of
# every model call goes through them.
_PRINTABLE = bytes(range(0x20, 0x7F)) + b"\t\r\n"
_TCHAR = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_TOKEN = re.compile(f"{_TCHAR}+").fullmatch
_FIELDS = re.compile(f"(?:{_TCHAR}+:[^\r\n]*\r\n)*").fullmatch  # name:value lines
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}").fullmatch
_VERSIONS = frozenset({"HTTP/1.1", "HTTP/1.0"})
_FRAMING = frozenset({"content-length", "transfer-encoding"})


@dataclass(frozen=True, slots=True)
class Limits:
    """What a listener allows its clients (the README's gateway section documents them)."""

    keep_alive_s: float = KEEP_ALIVE_S  # a connection with no request under way, then closed
    head_timeout_s: float = HEAD_TIMEOUT_S  # from a request's first byte to its head's end
    body_timeout_s: float = BODY_TIMEOUT_S  # from the head's end to the body's
    max_connections: int = MAX_CONNECTIONS  # open at once (and at most a quarter of RLIMIT_NOFILE)
    max_head: int = MAX_HEAD  # bytes of request line and headers
    max_body: int = MAX_BODY  # bytes of body


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


def error_body(message: str, code: str) -> bytes:
    """An error answer's body, in the OpenAI error shape the gateway answers every error in."""
    error = {"message": message, "type": "osmosis_run_gateway", "code": code}
    return json.dumps({"error": error}).encode()


class _Refused(Exception):
    """A request answered with an error and the connection closed."""

    def __init__(self, status: int, message: str, code: str = "bad_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def _malformed(what: str) -> _Refused:
    return _Refused(400, f"malformed request: {what}")


# A connection's phases: waiting for its first request, kept alive after one (only these
# make room at the limit), reading a request, answering it, closed. The sweeper closes the
# first four once their deadline passes.
_FRESH, _IDLE, _HEAD, _BODY, _BUSY, _GONE = range(6)


class _Connection:
    __slots__ = ("deadline", "phase", "since", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.phase = _FRESH
        self.since = 0.0  # when the current phase began
        self.deadline: float | None = None

    def enter(self, phase: int, seconds: float | None) -> None:
        self.phase = phase
        self.since = now = time.monotonic()
        self.deadline = None if seconds is None else now + seconds


class Server:
    """A listening server and its open connections.

    Args:
        handler: answers each request.
        limits: timeouts, the connection limit and the size limits.
    """

    def __init__(self, handler: Handler, limits: Limits | None = None) -> None:
        self.handler = handler
        self.limits = limits = limits or Limits()
        self.max_connections = _descriptor_cap(limits.max_connections)
        self.listener: asyncio.Server | None = None
        self.connections: dict[asyncio.StreamWriter, _Connection] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        shortest = min(limits.keep_alive_s, limits.head_timeout_s, limits.body_timeout_s)
        self._tick = min(1.0, max(0.01, shortest / 4))

    @property
    def port(self) -> int:
        """The port it listens on."""
        assert self.listener is not None
        port: int = self.listener.sockets[0].getsockname()[1]
        return port

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen on ``host:port`` (0: any free port)."""
        self.listener = await asyncio.start_server(
            self._connection, host, port, limit=self.limits.max_head, reuse_address=True,
            backlog=1024,
        )  # fmt: skip
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def close(self) -> None:
        """Stop listening, close every connection (keep-alive ones too), wait for handlers."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self.listener is not None:
            self.listener.close()
        for writer in list(self.connections):
            writer.close()
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=2.0)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        over = len(self.connections) >= self.max_connections and not self._make_room()
        conn = self.connections[writer] = _Connection(writer)
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        try:
            await self._serve(conn, reader, writer, over=over)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away, or the server is closing
        finally:
            conn.phase = _GONE
            self.connections.pop(writer, None)
            if task is not None:
                self.tasks.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    def _make_room(self) -> bool:
        """Close the longest-idle connection for a new one; False when none is idle."""
        idle = [conn for conn in self.connections.values() if conn.phase == _IDLE]
        if not idle:
            return False
        self._expire(min(idle, key=lambda conn: conn.since))
        return True

    async def _serve(
        self,
        conn: _Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        over: bool,
    ) -> None:
        phase = _FRESH  # a client that connected has a request on its way: it is not idle yet
        while True:
            conn.enter(phase, self.limits.keep_alive_s)
            phase = _IDLE
            try:
                first = await reader.readexactly(1)
            except asyncio.IncompleteReadError:
                return  # closed between requests (by the client, or for being idle)
            conn.enter(_HEAD, self.limits.head_timeout_s)
            try:
                read = await self._next_request(conn, first, reader, writer)
            except _Refused as exc:
                conn.enter(_BUSY, None)  # answering: no timeout of its own
                await _refuse(reader, writer, exc.status, str(exc), exc.code)
                return
            if read is None:
                continue  # empty lines between requests
            if over:
                writer.write(_error_answer(503, self._busy(), "overloaded", retry_after=True))
                await writer.drain()
                return
            conn.enter(_BUSY, None)
            if not await self._answer(*read, writer):
                return

    async def _next_request(
        self,
        conn: _Connection,
        first: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> tuple[Request, bool] | None:
        """The request whose first byte came, and whether its connection is kept alive."""
        try:
            head = first + await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise _Refused(431, "request head too large", "head_too_large") from None
        if head.startswith(b"\r\n"):  # RFC 9112 §2.2: empty lines before a request are ignored
            head = head.lstrip(b"\r\n")
            if not head:
                return None
        return await self._read_request(conn, head, reader, writer)

    async def _answer(
        self, request: Request, keep_alive: bool, writer: asyncio.StreamWriter
    ) -> bool:
        """Have the handler answer; whether the connection is kept alive after."""
        response = Response(writer, keep_alive=keep_alive)
        try:
            await self.handler(request, response)
        except (ConnectionError, asyncio.IncompleteReadError):
            raise
        except Exception:  # a bug: the client still gets an answer, the log the traceback
            if not response.started:
                message = "the gateway failed on this request (a bug; see the log)"
                writer.write(_error_answer(500, message, "internal_error"))
            raise
        return response.keep_alive

    def _busy(self) -> str:
        return (
            f"the gateway has {self.max_connections} connections open, all busy (its limit); "
            "retry shortly"
        )

    async def _read_request(
        self,
        conn: _Connection,
        head: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> tuple[Request, bool]:
        method, target, version, headers = _parse_head(head)
        length, chunked = _framing(headers, self.limits.max_body)
        if version == "HTTP/1.1" and headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl, for bodies over 1 KiB
        conn.enter(_BODY, self.limits.body_timeout_s)
        if chunked:
            body = await _read_chunked(reader, self.limits)
        else:
            body = await reader.readexactly(length) if length else b""
        tokens = headers.get("connection", "").lower()
        keep_alive = "close" not in tokens if version == "HTTP/1.1" else "keep-alive" in tokens
        return Request(method, target, headers, body), keep_alive

    async def _sweep(self) -> None:
        """Close what overstayed: idle connections silently, unfinished requests with 408."""
        while True:
            await asyncio.sleep(self._tick)
            now = time.monotonic()
            for conn in list(self.connections.values()):
                if conn.deadline is not None and now >= conn.deadline:
                    self._expire(conn)

    def _expire(self, conn: _Connection) -> None:
        phase, conn.phase, conn.deadline = conn.phase, _GONE, None
        self.connections.pop(conn.writer, None)
        if phase in (_HEAD, _BODY):  # the client is waiting for an answer: say why it ends
            part, seconds = (
                ("head", self.limits.head_timeout_s)
                if phase == _HEAD
                else ("body", self.limits.body_timeout_s)
            )
            message = f"request {part} not received within {seconds:g} s"
            conn.writer.write(_error_answer(408, message, "request_timeout"))
        conn.writer.close()  # its task sees the end of its stream and finishes


async def start_server(
    handler: Handler, host: str = "127.0.0.1", port: int = 0, *, limits: Limits | None = None
) -> Server:
    """Listen on ``host:port`` (0: any free port) and serve every connection with ``handler``."""
    server = Server(handler, limits)
    await server.start(host, port)
    return server


def _descriptor_cap(wanted: int) -> int:
    """``wanted``, or a quarter of the process's open-file limit if that is lower."""
    try:
        import resource
    except ImportError:  # not on this platform (Windows)
        return wanted
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft // 4))


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """The request line and headers of a head (ending in CR LF CR LF), validated."""
    if head.translate(None, _PRINTABLE):
        raise _malformed("a byte that is not printable ASCII in the request head")
    pairs = head.count(b"\r\n")
    if head.count(b"\r") != pairs or head.count(b"\n") != pairs:
        raise _malformed("a bare CR or LF in the request head")
    line, _, rest = head[:-4].decode("ascii").partition("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or not _TOKEN(parts[0]) or not parts[1] or "\t" in parts[1]:
        raise _malformed("a malformed request line")
    if parts[2] not in _VERSIONS:
        raise _malformed(f"HTTP version {parts[2]!r} (HTTP/1.1 or HTTP/1.0 only)")
    headers: dict[str, str] = {}
    fields = rest.split("\r\n") if rest else []
    if fields and not _FIELDS(rest + "\r\n"):
        raise _malformed(_field_problem(fields))
    for field in fields:
        name, _, value = field.partition(":")
        name = name.lower()
        if name in headers and name in _FRAMING:
            raise _malformed(f"more than one {_TITLES[name]} header")
        headers[name] = value.strip(" \t")
    return parts[0].upper(), parts[1], parts[2], headers


_TITLES = {"content-length": "Content-Length", "transfer-encoding": "Transfer-Encoding"}


def _field_problem(fields: list[str]) -> str:
    """What is wrong with the first malformed header line."""
    for field in fields:
        name, colon, _ = field.partition(":")
        if not colon:
            return "a header line without a colon"
        if not _TOKEN(name):  # whitespace before the colon, an obs-fold line, an empty name
            return f"header name {name!r} is not a token"
    return "a malformed header line"


def _check_trailer(field: bytes) -> None:
    """A trailer line is a header line: printable ASCII, ``token ":" value``."""
    if field.translate(None, _PRINTABLE) or b"\r" in field or b"\n" in field:
        raise _malformed("a byte that is not printable ASCII in a trailer line")
    text = field.decode("ascii")
    if not _FIELDS(text + "\r\n"):
        raise _malformed(f"trailer: {_field_problem([text])}")


def _framing(headers: dict[str, str], max_body: int) -> tuple[int, bool]:
    """The body's length (0 when chunked) and whether it is chunked."""
    coding = headers.get("transfer-encoding")
    given = headers.get("content-length")
    if coding is not None:
        if given is not None:
            raise _malformed("both Transfer-Encoding and Content-Length")
        if coding.lower() != "chunked":
            raise _malformed(f"Transfer-Encoding {coding!r} (only chunked is supported)")
        return 0, True
    if given is None:
        return 0, False
    if not given.isdigit() or len(given) > 20:  # ASCII digits only: the head is ASCII
        raise _malformed(f"Content-Length {given!r} is not a number of bytes")
    length = int(given)
    if length > max_body:
        raise _Refused(
            413,
            f"request body too large: {length} bytes (the gateway takes at most {max_body})",
            "body_too_large",
        )
    return length, False


async def _read_chunked(reader: asyncio.StreamReader, limits: Limits) -> bytes:
    parts: list[bytes] = []
    total = 0
    try:
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size_text = size_line[:-2].split(b";", 1)[0].rstrip(b" \t")
            if not _CHUNK_SIZE(size_text) or size_line.translate(None, _PRINTABLE):
                raise _malformed("a malformed chunk size")
            size = int(size_text, 16)
            if size == 0:
                trailers = 0
                while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                    trailers += len(line)
                    if trailers > limits.max_head:
                        raise _Refused(431, "request trailers too large", "head_too_large")
                    _check_trailer(line[:-2])
                return b"".join(parts)
            total += size
            if total > limits.max_body:
                raise _Refused(
                    413,
                    f"request body too large: over {limits.max_body} bytes (the gateway takes "
                    f"at most {limits.max_body})",
                    "body_too_large",
                )
            data = await reader.readexactly(size + 2)
            if data[-2:] != b"\r\n":
                raise _malformed("a chunk longer than its size")
            parts.append(data[:-2])
    except asyncio.LimitOverrunError:
        raise _malformed("a chunk line too long") from None


def _error_answer(status: int, message: str, code: str, *, retry_after: bool = False) -> bytes:
    body = error_body(message, code)
    extra = "retry-after: 1\r\n" if retry_after else "x-should-retry: false\r\n"
    return (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
        f"{extra}content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )


async def _refuse(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, message: str, code: str
) -> None:
    """Answer with an error, then read and drop what the client still sends, for a while.

    Closing with unread data in the socket would reset the connection, and a client still
    sending its body (a 413) would see the reset instead of the answer.
    """
    writer.write(_error_answer(status, message, code))
    with contextlib.suppress(ConnectionError, OSError, TimeoutError):
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(LINGER_S):
            while await reader.read(1 << 16):
                pass
