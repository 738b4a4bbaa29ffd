"""The HTTP/1.1 listener that ``osmosis-run serve`` and the model gateway speak through.

One connection protocol (``asyncio.Protocol``) holds the parsing, the framing, the limits and
the connection management; two fronts hand its requests on:

- ``UvicornProtocol``: a drop-in for uvicorn's own protocols (``uvicorn.Config(http=...)``:
  the same constructor, server state and graceful shutdown), serving the ASGI app. What serve
  runs.
- ``Listener``: a loopback server calling a ``Handler(Request, Response)`` with the whole
  request body; the response is whole (``send``) or streamed (``start``, ``write``, ``end``).
  What the gateway runs: no ASGI messages on every model call.

Why not uvicorn's httptools protocol: it parses every pipelined request it is sent before
answering the first, so a client that pipelines and never reads grows the server without bound
(~5 MB of pipelined GETs never read: 337 MB RSS, where this protocol stays at 47 MB; the
README's serve section has the table). Here requests are answered in order, and reading pauses
while a pipelined one waits its turn. A response given whole goes out in one write, head and
body together.

What it speaks: HTTP/1.1 and 1.0; bodies by ``Content-Length`` or chunked;
``Expect: 100-continue``; ``Connection: close`` either way; responses with a length, chunked,
or (HTTP/1.0, ASGI) until close. No WebSocket upgrade.

What it refuses, at least everything both h11 and httptools refuse (tests/http_cases.py), each
with a one-line JSON error and the close: 400 for a malformed request line (anything but
printable ASCII in the target included), header line (no colon, a name that is not a token,
whitespace before the colon, obs-fold, a control byte in a value, a bare LF), chunk or
trailer, for more than one ``Content-Length`` or ``Host``, a length that is not 1 to 18
digits, ``Transfer-Encoding`` other than exactly ``chunked`` (or beside a length, or in
HTTP/1.0); 431 for a head over ``Limits.max_head``; 413 for a body over ``Limits.max_body``,
from the length in the head, or from the chunk size that passes it; 408 for a request that does
not arrive in time. After a refusal what the client still sends is read and dropped for
``LINGER_S``, so that it reads the answer, not a reset.

What a connection may hold (``Limits``): between requests it is closed after ``keep_alive_s``
(one that never sends a byte, after the shorter of that and ``head_timeout_s``); a request's
head must arrive within ``head_timeout_s`` of its first byte, its body within
``body_timeout_s`` of the head; while the app has a request (a long poll, a model call) no
clock runs. At most ``max_connections`` are open, and never more
than a quarter of the process's open-file limit (the rollouts' own connections and files live
in the same process): past it a new connection makes room by closing the longest-idle one (no
request in the app; an idle connection may be closed at any time, RFC 9112 §9.5, and its client
reconnects), and when none is idle its request gets 503 with ``retry-after: 1`` and the close.

It parses with its own code (standard library only) rather than httptools' parser: llhttp
cannot stop between two pipelined requests (what bounds memory here), reports no chunk sizes
(the 413 before a chunk's data is read) and has no head limit (the 431), and parsing is not
where the time goes (a W8 head: 5.0 us here, 1.2 us in httptools, of ~700 us of server CPU a
rollout; the README's serve section).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import itertools
import json
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol, cast
from urllib.parse import unquote

__all__ = [
    "LINGER_S",
    "ErrorBody",
    "Handler",
    "Limits",
    "Listener",
    "Request",
    "Response",
    "ServerState",
    "UvicornProtocol",
    "detail_body",
]

LINGER_S = 2.0
_HIGH_WATER = 65536  # buffered request bytes before reading pauses (uvicorn's limit)
_TOKEN = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([\x21-\x7e]+) HTTP/1\.([01])")
_HEADER_NAME = re.compile(_TOKEN)
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_BARE_LF = re.compile(rb"(?<!\r)\n")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[\t\x20-\x7e\x80-\xff]*)?")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_MAX_LENGTH_DIGITS = 18  # an int64; any real body is far below
_MAX_LINE = 16 * 1024  # a chunk size or trailer line
# A connection's clock: between requests (the keep-alive), a request's head arriving, its body
# arriving, the app has the request (none), a refusal's rest being dropped (the linger).
_IDLE, _HEAD, _BODY, _BUSY, _LINGER = range(5)
# Orders connections by when their app last had a request (a clock may read the same twice).
_idle_order = itertools.count()
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one listener's connections may hold (the README documents serve's and the
    gateway's)."""

    keep_alive_s: float = 5.0  # a connection with no request under way, then closed
    head_timeout_s: float = 30.0  # from a request's first byte (or the accept) to its head's end
    body_timeout_s: float = 30.0  # from the head's end to the body's
    max_connections: int = 1024  # open at once (and at most a quarter of NOFILE)
    max_head: int = 16 * 1024  # bytes of request line and headers (h11's default)
    max_body: int = 32 * 1024 * 1024  # bytes of one request's body


ErrorBody = Callable[[str, str], bytes]
"""A refusal's JSON body, from its reason and code (``bad_request``, ``body_too_large``...)."""


def detail_body(reason: str, _code: str) -> bytes:
    """``{"detail": reason}``: FastAPI's error shape, serve's."""
    return json.dumps({"detail": reason}, separators=(",", ":")).encode()


class ServerState(Protocol):
    """What the connections of one server share (uvicorn's ``ServerState`` has it)."""

    total_requests: int
    connections: set[Any]
    tasks: set[asyncio.Task[None]]
    default_headers: list[tuple[bytes, bytes]]


@dataclass
class _State:
    total_requests: int = 0
    connections: set[Any] = field(default_factory=set)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    default_headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


_STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}


class _Refused(Exception):
    """The request cannot be taken: answer ``status`` with ``reason`` and close."""

    def __init__(self, status: int, reason: str, code: str = "bad_request") -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.code = code


def _invalid(what: str) -> _Refused:
    return _Refused(400, f"invalid HTTP request: {what}")


def _size(count: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale} {unit}"
    return f"{count} bytes"


def _too_large(limit: int) -> _Refused:
    size = _size(limit)
    exact = "" if size.endswith(" bytes") else f" ({limit} bytes)"
    return _Refused(413, f"request body over the {size} limit{exact}", "body_too_large")


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: parsing, framing, clocks and the connection limit.

    ``_cycle`` (the front's) turns a parsed head into the request the app or handler gets.
    """

    refusal_level: ClassVar[int] = logging.WARNING  # how a refusal is logged

    def __init__(
        self,
        state: ServerState,
        limits: Limits,
        loop: asyncio.AbstractEventLoop,
        logger: logging.Logger,
        *,
        error_body: ErrorBody = detail_body,
        error_headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        self.loop = loop
        self.logger = logger
        self.error_body = error_body
        self.error_headers = error_headers
        self.keep_alive_s = limits.keep_alive_s
        self.head_timeout = limits.head_timeout_s
        self.body_timeout = limits.body_timeout_s
        self.max_head = limits.max_head
        self.max_body = limits.max_body
        self.max_connections = _descriptor_cap(limits.max_connections)
        self.server_state = state
        self.connections: set[Any] = state.connections
        self.tasks: set[asyncio.Task[None]] = state.tasks
        self.transport: asyncio.Transport | None = None
        self.server: tuple[str, int] | None = None
        self.client: tuple[str, int] | None = None
        self.scheme = "http"
        self.buffer = bytearray()
        self.cycle: _Cycle | None = None  # the request being answered
        self.reading_body: _Cycle | None = None  # the request whose body is arriving
        self.chunks: _Chunks | None = None
        self.phase = _HEAD
        self.deadline = 0.0  # when the phase's clock runs out
        self.timer: asyncio.TimerHandle | None = None  # fires at or before the deadline
        self.idle_since = 0  # when the app last had a request of it, in _idle_order
        self.over_limit = False  # opened past the connection limit with none idle to close
        self.read_paused = False
        self.write_paused = False
        self.writable: asyncio.Future[None] | None = None
        self.closed = False

    def _cycle(self, head: _Head) -> _Cycle:
        raise NotImplementedError

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Register the connection with the server; past the limit, make room for it."""
        # A stream transport (uvloop's is not an asyncio.Transport subclass, only alike).
        self.connections.add(self)
        self.transport = transport = cast(asyncio.Transport, transport)
        self.server = _address(transport.get_extra_info("sockname"))
        self.client = _address(transport.get_extra_info("peername"))
        if transport.get_extra_info("sslcontext") is not None:
            self.scheme = "https"
        self.idle_since = next(_idle_order)
        # Idle until its first byte, and at most as long as a head may take to arrive.
        self._arm(_IDLE, self.loop.time() + min(self.keep_alive_s, self.head_timeout))
        if len(self.connections) > self.max_connections:
            self.over_limit = not self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        """The client went away: a request in progress sees it disconnected."""
        self.connections.discard(self)
        self.closed = True
        self._disarm()
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
        phase = self.phase
        if phase == _IDLE:  # the first byte of the next request: its clock starts
            self._arm(_HEAD, self.loop.time() + self.head_timeout)
        elif phase == _LINGER:
            return  # the rest of a refused request, dropped
        self.buffer += data
        try:
            self._parse()
        except _Refused as refusal:
            self._refuse(refusal)

    def pause_writing(self) -> None:
        """The transport's buffer is full: responses wait."""
        self.write_paused = True

    def resume_writing(self) -> None:
        """The transport drained."""
        self._resume_writing()

    # -- the server's interface -------------------------------------------------------------

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
        """Start the next request if its head is all here (True), else wait (False).

        Raises:
            _Refused: the head is malformed or too large, its body too large, or the server
                has no room for this connection.
        """
        buffer = self.buffer
        while buffer[:2] == b"\r\n":  # blank lines before a request are allowed
            del buffer[:2]
        end = buffer.find(b"\r\n\r\n")
        if end < 0 or end > self.max_head:
            self._check_partial_head()
            return False
        head = _Head(bytes(buffer[:end]))
        del buffer[: end + 4]
        if self.over_limit:
            self._claim_room()
        length = head.length
        if length is not None and length > self.max_body:
            raise _too_large(self.max_body)
        cycle = self._cycle(head)
        if head.chunked:
            self.chunks = _Chunks(self.max_body)
            self.reading_body = cycle
        elif length:
            cycle.remaining = length
            self.reading_body = cycle
        else:
            cycle.more_body = False
        if self.reading_body is cycle:
            self._arm(_BODY, self.loop.time() + self.body_timeout)
        else:
            self.phase = _BUSY  # all of it is here: no clock while the app has it
        self.cycle = cycle
        cycle.begin()
        return True

    def _check_partial_head(self) -> None:
        """Refuse a head that is already too large, or that could never end (a bare LF)."""
        if len(self.buffer) > self.max_head:
            raise _Refused(
                431, f"request head over the {_size(self.max_head)} limit", "head_too_large"
            )
        if _BARE_LF.search(self.buffer) is not None:
            raise _invalid("a line ends in a bare LF (HTTP/1.1 lines end in CRLF)")

    def _claim_room(self) -> None:
        """Opened past the connection limit: room may have been made since the accept."""
        if len(self.connections) > self.max_connections and not self._make_room():
            raise _Refused(
                503,
                f"the server has {self.max_connections} connections open, all busy "
                "(its limit); retry",
                "overloaded",
            )
        self.over_limit = False

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
            if cycle.complete:  # answered before its body was in: now between requests
                self._between()
            else:
                self.phase = _BUSY
        elif cycle.streams_body and len(cycle.body) > _HIGH_WATER:
            self._pause_reading()  # the app reads it first (``receive`` resumes reading)
        return done

    def _refuse(self, refusal: _Refused) -> None:
        """Answer the refusal (unless a response has begun), then close."""
        status = refusal.status
        self.logger.log(
            self.refusal_level, "Refused an HTTP request (%d): %s", status, refusal.reason
        )
        started = False
        for cycle in (self.cycle, self.reading_body):
            if cycle is not None:
                started = started or cycle.started
                if not cycle.complete:
                    cycle.disconnect()  # the request in progress cannot be answered now
        transport = self.transport
        if started or transport is None or transport.is_closing():
            self._close()
            return
        transport.write(self._error(status, refusal.reason, refusal.code))
        if not transport.can_write_eof():
            self._close()
            return
        # Half-close, and drop what still comes for a while: closing with unread bytes would
        # reset the connection, and a client still sending its body would lose the answer.
        transport.write_eof()
        self.buffer.clear()
        self.reading_body = self.chunks = None
        self._resume_reading()
        self._arm(_LINGER, self.loop.time() + LINGER_S)

    def _error(self, status: int, reason: str, code: str) -> bytes:
        """A whole error response that closes the connection."""
        body = self.error_body(reason, code)
        head = [_STATUS_LINES[status]]
        head += [b"%s: %s\r\n" % pair for pair in self.server_state.default_headers]
        if status == 503:
            head.append(b"retry-after: 1\r\n")
        else:
            head += [b"%s: %s\r\n" % pair for pair in self.error_headers]
        head.append(
            b"content-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
        )
        return b"".join(head) + body

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
        if self.reading_body is None:
            self._between()
        if self.buffer:
            try:
                self._parse()
            except _Refused as refusal:
                self._refuse(refusal)

    # -- clocks and limits ----------------------------------------------------------------

    def _between(self) -> None:
        """The app has no request of this connection: the keep-alive clock runs, or the next
        request's if it has begun to arrive."""
        self.idle_since = next(_idle_order)
        now = self.loop.time()
        if self.buffer:
            self._arm(_HEAD, now + self.head_timeout)
        else:
            self._arm(_IDLE, now + self.keep_alive_s)

    def _arm(self, phase: int, deadline: float) -> None:
        """Enter ``phase``, its clock running out at ``deadline``.

        One timer per connection, moved only when a deadline comes sooner: a timer that fires
        early re-arms itself for the deadline, so requests in quick succession cost no timer.
        """
        self.phase = phase
        self.deadline = deadline
        timer = self.timer
        if timer is not None:
            if timer.when() <= deadline:
                return
            timer.cancel()
        self.timer = self.loop.call_at(deadline, self._clock, deadline)

    def _clock(self, when: float) -> None:
        self.timer = None
        phase = self.phase
        if phase == _BUSY or self.closed:
            return
        if self.deadline > when:
            self.timer = self.loop.call_at(self.deadline, self._clock, self.deadline)
        elif phase in (_IDLE, _LINGER):
            self._close()  # the keep-alive, or the linger, is over
        elif phase == _BODY:
            reason = f"the request body did not arrive within {self.body_timeout:g} s of its head"
            self._refuse(_Refused(408, reason, "request_timeout"))
        elif not self.buffer and self.cycle is None:
            self._close()  # connected and never asked: nothing to answer
        else:
            reason = f"the request head did not arrive within {self.head_timeout:g} s"
            self._refuse(_Refused(408, reason, "request_timeout"))

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _make_room(self) -> bool:
        """Close the longest-idle other connection (none of its requests in the app); False
        when there is none."""
        idle = [
            connection
            for connection in self.connections
            if connection is not self
            and isinstance(connection, _Connection)
            and not connection.closed
            and (
                connection.phase == _LINGER
                or (connection.cycle is None and connection.reading_body is None)
            )
        ]
        if not idle:
            return False
        min(idle, key=_idle_since)._evict()
        return True

    def _evict(self) -> None:
        self.connections.discard(self)  # now: the next accept counts without it
        self.closed = True
        self._disarm()
        if self.transport is not None:
            self.transport.close()

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

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(work)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)


def _idle_since(connection: _Connection) -> int:
    return connection.idle_since


def _descriptor_cap(limit: int) -> int:
    """``limit``, held to a quarter of the open-file limit: past that, accepting would fail."""
    try:
        import resource
    except ImportError:  # not on Windows
        return limit
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(1, min(limit, soft // 4))


class _Head:
    """A request's line and headers, parsed and checked.

    Raises:
        _Refused: a malformed request line or header, conflicting or invalid framing.
    """

    __slots__ = (
        "chunked",
        "close",
        "expect_continue",
        "headers",
        "http_10",
        "length",
        "method",
        "seen_host",
        "target",
    )

    def __init__(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        matched = _REQUEST_LINE.fullmatch(lines[0])
        if matched is None:
            raise _invalid("the request line is not METHOD TARGET HTTP/1.x in printable ASCII")
        method, self.target, minor = matched.groups()
        self.method = method.decode("ascii")
        self.http_10 = minor == b"0"
        self.headers: list[tuple[bytes, bytes]] = []
        self.length: int | None = None
        self.chunked = self.close = self.expect_continue = self.seen_host = False
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or _HEADER_NAME.fullmatch(name) is None:
                # also obsolete line folding (a leading space or tab), and a bare LF
                raise _invalid("a header line is not NAME: VALUE with NAME a token")
            value = value.strip(b" \t")
            if _BAD_VALUE.search(value) is not None:
                raise _invalid("a header value holds a control byte")
            name = name.lower()
            self._take(name, value)
            self.headers.append((name, value))
        if self.chunked and self.length is not None:
            raise _invalid("both Content-Length and Transfer-Encoding")
        if self.chunked and self.http_10:
            raise _invalid("Transfer-Encoding in an HTTP/1.0 request")

    def _take(self, name: bytes, value: bytes) -> None:
        """Note what a header says about framing and the connection."""
        if name == b"content-length":
            self._length(value)
        elif name == b"transfer-encoding":
            self._coding(value)
        elif name == b"connection":
            self.close = self.close or b"close" in _tokens(value)
        elif name == b"expect" and value.lower() == b"100-continue":
            self.expect_continue = True
        elif name == b"host":
            if self.seen_host:
                raise _invalid("more than one Host")
            self.seen_host = True

    def _length(self, value: bytes) -> None:
        if self.length is not None:
            raise _invalid("more than one Content-Length")
        if not value.isdigit() or len(value) > _MAX_LENGTH_DIGITS:
            raise _invalid(f"Content-Length is not 1 to {_MAX_LENGTH_DIGITS} digits")
        self.length = int(value)

    def _coding(self, value: bytes) -> None:
        if self.chunked:
            raise _invalid("more than one Transfer-Encoding")
        if value.lower() != b"chunked":
            raise _invalid("Transfer-Encoding is not chunked")
        self.chunked = True

    @property
    def keep_alive(self) -> bool:
        """HTTP/1.0 connections close after one response, as h11 has them."""
        return not (self.close or self.http_10)


def _tokens(value: bytes) -> list[bytes]:
    return [token.strip().lower() for token in value.split(b",")]


class _Chunks:
    """A chunked request body, decoded as it arrives, at most ``limit`` bytes of it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0  # bytes the chunk sizes so far announced
        self.left = 0  # bytes of the current chunk still to come
        self.state = "size"  # size, data, crlf (after a chunk's data), trailer

    def feed(self, buffer: bytearray, cycle: _Cycle) -> bool:
        """Move what ``buffer`` holds into ``cycle``; True at the end of the body.

        Raises:
            _Refused: a malformed chunk, or one past the limit.
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
                if len(buffer) > _MAX_LINE:
                    raise _invalid("a chunk size or trailer line over 16 KiB")
                return False
            line = bytes(buffer[:end])
            del buffer[: end + 2]
            if self._line(line):
                return True

    def _line(self, line: bytes) -> bool:
        """Take a chunk's size line, the end of its data, or a trailer line; True at the end."""
        if self.state == "crlf":
            if line:
                raise _invalid("chunk data not followed by CRLF")
            self.state = "size"
        elif self.state == "size":
            matched = _CHUNK_SIZE.fullmatch(line)
            if matched is None:
                raise _invalid("a chunk size line is not HEX[;extensions]")
            self.left = int(matched.group(1), 16)
            self.total += self.left
            if self.total > self.limit:
                raise _too_large(self.limit)  # before its data is read
            self.state = "data" if self.left else "trailer"
        elif not line:  # the blank line that ends the trailer
            return True
        else:
            name, colon, value = line.partition(b":")
            if not colon or _HEADER_NAME.fullmatch(name) is None:
                raise _invalid("a trailer line is not NAME: VALUE with NAME a token")
            if _BAD_VALUE.search(value.strip(b" \t")) is not None:
                raise _invalid("a trailer value holds a control byte")
        return False


class _Cycle:
    """One request and its response: the body as it arrives, and how the answer went."""

    streams_body: ClassVar[bool] = True  # the app reads the body as it arrives

    def __init__(self, connection: _Connection, head: _Head) -> None:
        self.connection = connection
        self.keep_alive = head.keep_alive
        self.expect_continue = head.expect_continue
        self.body = bytearray()
        self.more_body = True  # more of the body is to come from the client
        self.handed = False  # the whole body was given to the app
        self.remaining = 0
        self.disconnected = False
        self.started = False
        self.complete = False
        self.waiter: asyncio.Future[None] | None = None

    def begin(self) -> None:
        """The head is in: the app or handler gets the request."""
        raise NotImplementedError

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

    async def wait(self) -> None:
        """Until more of the body arrives, the client goes, or the response completes."""
        self.waiter = self.connection.loop.create_future()
        await self.waiter

    def finish(self) -> None:
        """The whole response is out."""
        self.complete = True
        self.wake()
        self.connection.response_complete(self)


# -- serve: uvicorn and ASGI --------------------------------------------------------------


class UvicornProtocol(_Connection):
    """One connection, served to the ASGI app (uvicorn's protocol interface).

    Args:
        config: uvicorn's ``Config`` (loaded here if it is not yet); its keep-alive is
            ``timeout_keep_alive``, its head limit ``h11_max_incomplete_event_size``.
        server_state: uvicorn's ``ServerState``: its connections, tasks and default headers.
        app_state: the lifespan's state, copied into each request's scope.

    Its other ``Limits`` are a class attribute, as uvicorn constructs the protocol itself:
    serve ``UvicornProtocol.limited(Limits(...))`` for others than the defaults.
    """

    limits: ClassVar[Limits] = Limits()

    @classmethod
    def limited(cls, limits: Limits) -> type[UvicornProtocol]:
        """This protocol under ``limits``, for ``uvicorn.Config(http=...)`` (it takes a class)."""
        return cast("type[UvicornProtocol]", type(cls.__name__, (cls,), {"limits": limits}))

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        limits = replace(
            self.limits,
            keep_alive_s=config.timeout_keep_alive,
            max_head=config.h11_max_incomplete_event_size or self.limits.max_head,
        )
        super().__init__(
            server_state,
            limits,
            _loop or asyncio.get_event_loop(),
            logging.getLogger("uvicorn.error"),
        )
        self.config = config
        self.app = config.loaded_app
        self.access_logger = logging.getLogger("uvicorn.access")
        self.access_log = self.access_logger.hasHandlers()
        self.root_path: str = config.root_path
        self.asgi = {"version": config.asgi_version, "spec_version": "2.3"}
        self.limit_concurrency: int | None = config.limit_concurrency
        self.app_state = app_state

    def _cycle(self, head: _Head) -> _Cycle:
        raw_path, _, query = head.target.partition(b"?")
        path = raw_path.decode("ascii")
        if "%" in path:
            path = unquote(path)
        scope = {
            "type": "http",
            "asgi": self.asgi,
            "http_version": "1.0" if head.http_10 else "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": head.method,
            "root_path": self.root_path,
            "path": self.root_path + path,
            "raw_path": self.root_path.encode("ascii") + raw_path,
            "query_string": query,
            "headers": head.headers,
            "state": self.app_state.copy(),
        }
        app: Callable[..., Any] = self.app
        if self.limit_concurrency is not None and (
            len(self.connections) >= self.limit_concurrency
            or len(self.tasks) >= self.limit_concurrency
        ):
            self.logger.warning("Exceeded concurrency limit.")
            app = _service_unavailable
        return _AsgiCycle(self, head, scope, app)


class _AsgiCycle(_Cycle):
    """One request and its response, as ASGI messages."""

    def __init__(
        self,
        connection: UvicornProtocol,
        head: _Head,
        scope: dict[str, Any],
        app: Callable[..., Any],
    ) -> None:
        super().__init__(connection, head)
        self.uvicorn = connection
        self.scope = scope
        self.app = app
        self.head = b""
        self.length: int | None = None  # response bytes still due, when a length was given
        self.chunked = False

    def begin(self) -> None:
        self.connection._spawn(self.run())

    async def run(self) -> None:
        connection = self.connection
        try:
            result = await self.app(self.scope, self.receive, self.send)
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
            await self.wait()
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
        self.finish()

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
        connection, scope = self.uvicorn, self.scope
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
        connection = self.uvicorn
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


# -- the gateway: a handler per request -----------------------------------------------------


@dataclass(slots=True)
class Request:
    """One request: method, target (path and query), lower-cased headers and the whole body."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes


class Response:
    """How a handler answers: ``send`` a whole body, or ``start`` then ``write`` then ``end``.

    Set ``keep_alive`` to False to close the connection after the answer. Writing to a client
    that has gone raises ``ConnectionResetError``.
    """

    __slots__ = ("_chunked", "_cycle", "keep_alive")

    def __init__(self, cycle: _HandlerCycle) -> None:
        self._cycle = cycle
        self._chunked = False
        self.keep_alive = cycle.keep_alive

    @property
    def started(self) -> bool:
        """Whether the answer has begun (its head is out)."""
        return self._cycle.started

    def _head(self, status: int, headers: Iterable[tuple[str, str]], framing: bytes) -> bytes:
        head = [_STATUS_LINES.get(status) or _status_line(status)]
        head += [f"{name}: {value}\r\n".encode("latin-1") for name, value in headers]
        head.append(framing)
        if not self.keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        return b"".join(head)

    async def _write(self, data: bytes) -> None:
        cycle = self._cycle
        connection = cycle.connection
        if cycle.disconnected or connection.transport is None:
            raise ConnectionResetError("the client closed the connection")
        connection.transport.write(data)
        if connection.write_paused:
            await connection.drain()

    async def send(self, status: int, headers: Iterable[tuple[str, str]], body: bytes) -> None:
        """Answer with a whole body, in one write."""
        self._cycle.started = True
        framing = b"content-length: %d\r\n" % len(body)
        await self._write(self._head(status, headers, framing) + body)
        self._end()

    async def start(self, status: int, headers: Iterable[tuple[str, str]]) -> None:
        """Start a streamed (chunked) answer."""
        self._cycle.started = True
        self._chunked = True
        await self._write(self._head(status, headers, b"transfer-encoding: chunked\r\n"))

    async def write(self, data: bytes) -> None:
        """Send one chunk of a streamed answer, at once."""
        if data:
            await self._write(b"%x\r\n%b\r\n" % (len(data), data))

    async def end(self) -> None:
        """End a streamed answer."""
        if self._chunked:
            await self._write(b"0\r\n\r\n")
            self._end()

    def _end(self) -> None:
        cycle = self._cycle
        cycle.keep_alive = cycle.keep_alive and self.keep_alive
        if not cycle.complete:
            cycle.finish()


Handler = Callable[[Request, Response], Awaitable[None]]


class _HandlerProtocol(_Connection):
    """One connection of a ``Listener``: each request, body and all, to its handler."""

    refusal_level = logging.DEBUG  # a library's listener: the client got the reason

    def __init__(self, listener: Listener, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(
            listener.state,
            listener.limits,
            loop,
            listener.logger,
            error_body=listener.error_body,
            error_headers=listener.error_headers,
        )
        self.handler = listener.handler

    def _cycle(self, head: _Head) -> _Cycle:
        return _HandlerCycle(self, head)


class _HandlerCycle(_Cycle):
    """One request, handed whole to the handler."""

    streams_body = False

    def __init__(self, connection: _HandlerProtocol, head: _Head) -> None:
        super().__init__(connection, head)
        self.handler = connection.handler
        self.head = head

    def begin(self) -> None:
        connection = self.connection
        if self.expect_continue and self.more_body and connection.transport is not None:
            connection.transport.write(_CONTINUE)  # curl waits for it, for bodies over 1 KiB
        self.connection._spawn(self.run())

    async def run(self) -> None:
        while self.more_body and not self.disconnected:
            await self.wait()
        if self.disconnected:
            return
        head = self.head
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in head.headers}
        request = Request(head.method, head.target.decode("ascii"), headers, bytes(self.body))
        self.body = bytearray()
        response = Response(self)
        try:
            await self.handler(request, response)
        except ConnectionError:
            pass  # the client went away
        except Exception:  # a bug: the client still gets an answer, the log the traceback
            self.connection.logger.exception("The handler failed on %s", request.target)
            self._failed(response)
            return
        if not self.complete:  # returned without answering, or mid-stream
            self._failed(response)

    def _failed(self, response: Response) -> None:
        connection = self.connection
        transport = connection.transport
        if not response.started and not self.disconnected and transport is not None:
            reason = "the server failed on this request (a bug; see the log)"
            transport.write(connection._error(500, reason, "internal_error"))
        connection._close()


class Listener:
    """A listening server that hands each request to ``handler``.

    Args:
        handler: answers each request.
        limits: timeouts, the connection limit and the size limits.
        error_body: a refusal's JSON body, from its reason and code.
        error_headers: sent with every refusal (but a 503's, which says ``retry-after: 1``).
        logger: where refusals (warnings) and the handler's failures (errors) go.
    """

    def __init__(
        self,
        handler: Handler,
        limits: Limits | None = None,
        *,
        error_body: ErrorBody = detail_body,
        error_headers: tuple[tuple[bytes, bytes], ...] = (),
        logger: logging.Logger = _log,
    ) -> None:
        self.handler = handler
        self.limits = limits or Limits()
        self.error_body = error_body
        self.error_headers = error_headers
        self.logger = logger
        self.state = _State()
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The port it listens on."""
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> Listener:
        """Listen on ``host:port`` (0: any free port)."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: _HandlerProtocol(self, loop), host, port, reuse_address=True, backlog=1024
        )
        return self

    async def close(self, *, timeout_s: float = 2.0) -> None:
        """Stop listening, close every connection (keep-alive ones too), wait for handlers."""
        if self.server is not None:
            self.server.close()
        for connection in list(self.state.connections):
            connection.shutdown()
        if self.state.tasks:
            await asyncio.wait(set(self.state.tasks), timeout=timeout_s)
        for connection in list(self.state.connections):
            connection._close()
        if self.server is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self.server.wait_closed()
