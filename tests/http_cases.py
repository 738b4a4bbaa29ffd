"""Raw HTTP/1.1 requests a careful listener answers or refuses, and a helper that sends one.

Any listener can be run on the table: ``outcome(address, case.request(target))`` sends one
case on a fresh connection and says what came back. ``Target`` says where the requests go on
that listener (a path that answers GET, one that takes a small POST body, headers it needs),
so the same cases run on ``osmosis-run serve``, on uvicorn's own protocols and on the gateway.

``REFUSED`` means a 4xx and a closed connection (or a close with no answer at all): what h11
and httptools do with a request they cannot parse. ``ANSWERED`` means the request reached the
app and was answered (any status; the connection may stay open).
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

Expected = Literal["answered", "refused"]
ANSWERED: Final = "answered"
REFUSED: Final = "refused"


@dataclass(frozen=True)
class Target:
    """Where a listener's raw requests go."""

    get: bytes = b"/health"  # a path that answers GET
    post: bytes = b"/rollout/cancel"  # a path that answers a POST of ``body``
    body: bytes = b'{"all": true}'
    headers: bytes = b"Content-Type: application/json\r\n"  # sent with every POST


@dataclass(frozen=True)
class Outcome:
    """What a listener did with one request: its status (None: none came) and the close."""

    status: int | None
    closed: bool
    head: bytes = b""
    body: bytes = b""

    @property
    def kind(self) -> str:
        """``refused`` (a 4xx, then the close), ``answered``, ``dropped`` (closed with no
        answer) or ``no answer`` (nothing within the timeout)."""
        if self.status is None:
            return "dropped" if self.closed else "no answer"
        return REFUSED if self.closed and 400 <= self.status < 500 else ANSWERED


@dataclass(frozen=True)
class Case:
    """A raw request, built for a target, and what a careful listener does with it."""

    name: str
    build: Callable[[Target], bytes]
    expected: Expected

    def request(self, target: Target) -> bytes:
        return self.build(target)


def get(target: Target, *headers: bytes, line: bytes | None = None) -> bytes:
    """A GET of the target's path (or ``line`` as the request line), with ``headers``."""
    first = b"GET " + target.get + b" HTTP/1.1" if line is None else line
    return b"\r\n".join([first, b"Host: 127.0.0.1", *headers]) + b"\r\n\r\n"


def post(
    target: Target,
    *headers: bytes,
    body: bytes | None = None,
    length: bool = True,
    version: bytes = b"HTTP/1.1",
    path: bytes | None = None,
) -> bytes:
    """A POST of the target's body (to ``path``, else the target's), with ``headers`` and
    (unless not ``length``) its length."""
    data = target.body if body is None else body
    lines = [b"POST " + (target.post if path is None else path) + b" " + version]
    lines.append(b"Host: 127.0.0.1")
    lines += [line for line in target.headers.split(b"\r\n") if line]
    lines += headers
    if length:
        lines.append(b"Content-Length: %d" % len(data))
    return b"\r\n".join(lines) + b"\r\n\r\n" + data


def chunked(target: Target, *headers: bytes, chunks: bytes | None = None) -> bytes:
    """A POST of the target's body in two chunks (or ``chunks`` as the raw body)."""
    body = target.body
    whole = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (5, body[:5], len(body) - 5, body[5:])
    te = headers or (b"Transfer-Encoding: chunked",)
    return post(target, *te, body=whole if chunks is None else chunks, length=False)


def length_of(target: Target) -> bytes:
    """The target's body length, as a Content-Length value."""
    return b"%d" % len(target.body)


def _chunks(target: Target, tail: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(target.body), target.body) + tail


CASES: list[Case] = [
    # Answered: what a careful server still takes.
    Case("a GET", get, ANSWERED),
    Case("a POST with a Content-Length", post, ANSWERED),
    Case("a chunked POST", chunked, ANSWERED),
    Case("chunked in another case", lambda t: chunked(t, b"Transfer-Encoding: Chunked"), ANSWERED),
    Case(
        "a chunk extension and a trailer",
        lambda t: chunked(
            t, chunks=b"%x;ext=1\r\n%s\r\n0\r\nX-T: y\r\n\r\n" % (len(t.body), t.body)
        ),
        ANSWERED,
    ),
    Case("an HTTP/1.0 GET", lambda t: get(t, line=b"GET " + t.get + b" HTTP/1.0"), ANSWERED),
    Case("a blank line before the request", lambda t: b"\r\n" + get(t), ANSWERED),
    Case("whitespace around a value", lambda t: get(t, b"X-Note: \t a b \t"), ANSWERED),
    Case("obs-text in a value", lambda t: get(t, b"X-Note: caf\xc3\xa9"), ANSWERED),
    Case(
        "an absolute-form target",
        lambda t: get(t, line=b"GET http://x" + t.get + b" HTTP/1.1"),
        ANSWERED,
    ),
    # The request line.
    Case("not a request line", lambda t: get(t, line=b"NOT A REQUEST"), REFUSED),
    Case("HTTP/2.0", lambda t: get(t, line=b"GET " + t.get + b" HTTP/2.0"), REFUSED),
    Case("HTTP/1.2", lambda t: get(t, line=b"GET " + t.get + b" HTTP/1.2"), REFUSED),
    Case("a lower-case version", lambda t: get(t, line=b"GET " + t.get + b" http/1.1"), REFUSED),
    Case("no version", lambda t: get(t, line=b"GET " + t.get), REFUSED),
    Case("two spaces", lambda t: get(t, line=b"GET  " + t.get + b" HTTP/1.1"), REFUSED),
    Case("a non-ASCII target", lambda t: get(t, line=b"GET " + t.get + b"\xff HTTP/1.1"), REFUSED),
    Case("a UTF-8 target", lambda t: get(t, line=b"GET /caf\xc3\xa9 HTTP/1.1"), REFUSED),
    Case("a control byte in the target", lambda t: get(t, line=b"GET /a\x01b HTTP/1.1"), REFUSED),
    Case("a NUL in the target", lambda t: get(t, line=b"GET /a\x00b HTTP/1.1"), REFUSED),
    Case(
        "a separator in the method", lambda t: get(t, line=b"G(T " + t.get + b" HTTP/1.1"), REFUSED
    ),
    # Header lines.
    Case("a header without a colon", lambda t: get(t, b"NoColon"), REFUSED),
    Case("a space before the colon", lambda t: get(t, b"X-Note : x"), REFUSED),
    Case("a space in a header name", lambda t: get(t, b"Bad Header: x"), REFUSED),
    Case("an empty header name", lambda t: get(t, b": x"), REFUSED),
    Case("a non-ASCII header name", lambda t: get(t, b"X-N\xc3\xa9: x"), REFUSED),
    Case("obs-fold", lambda t: get(t, b"X-Note: a", b" folded"), REFUSED),
    Case("obs-fold with a tab", lambda t: get(t, b"X-Note: a", b"\tfolded"), REFUSED),
    Case("a NUL in a value", lambda t: get(t, b"X-Note: a\x00b"), REFUSED),
    Case("a control byte in a value", lambda t: get(t, b"X-Note: a\x01b"), REFUSED),
    Case("a bare CR in a value", lambda t: get(t, b"X-Note: a\rb"), REFUSED),
    Case("a bare LF in a header line", lambda t: get(t, b"X-Note: a\nX-Other: b"), REFUSED),
    Case(
        "bare LF line endings",
        lambda t: b"GET " + t.get + b" HTTP/1.1\nHost: 127.0.0.1\n\n",
        REFUSED,
    ),
    Case("a DEL in a value", lambda t: get(t, b"X-Note: a\x7fb"), REFUSED),
    Case("a tab before the colon", lambda t: get(t, b"X-Note\t: x"), REFUSED),
    Case("a DEL in the target", lambda t: get(t, line=b"GET /a\x7fb HTTP/1.1"), REFUSED),
    Case(
        "a bare LF after the request line",
        lambda t: get(t, line=b"GET " + t.get + b" HTTP/1.1\nX-A: b"),
        REFUSED,
    ),
    Case("a head ended by CRLF LF", lambda t: get(t)[:-2] + b"\n", REFUSED),
    Case("no Host in HTTP/1.1", lambda t: b"GET " + t.get + b" HTTP/1.1\r\n\r\n", ANSWERED),
    Case("two Hosts", lambda t: get(t, b"Host: other"), REFUSED),
    Case(
        "a head larger than 64 KiB",
        lambda t: get(t, b"X-Big: " + b"a" * 70_000),
        REFUSED,
    ),
    Case(
        "a target longer than 64 KiB",
        lambda t: get(t, line=b"GET /" + b"a" * 70_000 + b" HTTP/1.1"),
        REFUSED,
    ),
    # Content-Length.
    Case(
        "two equal Content-Lengths", lambda t: post(t, b"Content-Length: " + length_of(t)), REFUSED
    ),
    Case("two differing Content-Lengths", lambda t: post(t, b"Content-Length: 1"), REFUSED),
    Case(
        "a Content-Length list",
        lambda t: post(t, b"Content-Length: %s, %s" % (length_of(t), length_of(t)), length=False),
        REFUSED,
    ),
    Case(
        "a signed Content-Length",
        lambda t: post(t, b"Content-Length: +" + length_of(t), length=False),
        REFUSED,
    ),
    Case(
        "a negative Content-Length", lambda t: post(t, b"Content-Length: -1", length=False), REFUSED
    ),
    Case("a hex Content-Length", lambda t: post(t, b"Content-Length: 0x10", length=False), REFUSED),
    Case("an empty Content-Length", lambda t: post(t, b"Content-Length:", length=False), REFUSED),
    Case(
        "a Content-Length with junk",
        lambda t: post(t, b"Content-Length: " + length_of(t) + b"x", length=False),
        REFUSED,
    ),
    Case(
        "a Content-Length with a space inside",
        lambda t: post(t, b"Content-Length: 1 3", length=False),
        REFUSED,
    ),
    Case(
        "a 5,000-digit Content-Length",
        lambda t: post(t, b"Content-Length: " + b"9" * 5000, length=False, body=b""),
        REFUSED,
    ),
    # Transfer-Encoding, and both framings at once (smuggling).
    Case(
        "Content-Length then Transfer-Encoding",
        lambda t: chunked(t, b"Content-Length: 3", b"Transfer-Encoding: chunked"),
        REFUSED,
    ),
    Case(
        "Transfer-Encoding then Content-Length",
        lambda t: chunked(t, b"Transfer-Encoding: chunked", b"Content-Length: 3"),
        REFUSED,
    ),
    Case(
        "chunked, identity", lambda t: chunked(t, b"Transfer-Encoding: chunked, identity"), REFUSED
    ),
    Case("gzip, chunked", lambda t: chunked(t, b"Transfer-Encoding: gzip, chunked"), REFUSED),
    Case("identity", lambda t: post(t, b"Transfer-Encoding: identity"), REFUSED),
    Case("not quite chunked", lambda t: chunked(t, b"Transfer-Encoding: xchunked"), REFUSED),
    Case(
        "two Transfer-Encodings",
        lambda t: chunked(t, b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"),
        REFUSED,
    ),
    Case(
        "chunked in HTTP/1.0",
        lambda t: post(
            t,
            b"Transfer-Encoding: chunked",
            length=False,
            version=b"HTTP/1.0",
            body=_chunks(t, b"0\r\n\r\n"),
        ),
        REFUSED,
    ),
    # Chunks.
    Case("a chunk size that is not hex", lambda t: chunked(t, chunks=b"zz\r\n"), REFUSED),
    Case(
        "a chunk size of 17 hex digits",
        lambda t: chunked(t, chunks=b"1" + b"0" * 16 + b"\r\n"),
        REFUSED,
    ),
    Case("a negative chunk size", lambda t: chunked(t, chunks=b"-1\r\n"), REFUSED),
    Case(
        "a chunk without its CRLF", lambda t: chunked(t, chunks=b"2\r\nabcd\r\n0\r\n\r\n"), REFUSED
    ),
    Case(
        "a chunk size with a space",
        lambda t: chunked(t, chunks=_chunks(t, b"0 \r\n\r\n")),
        ANSWERED,
    ),
    Case(
        "a chunk size line ended by LF",
        lambda t: chunked(t, chunks=b"%x\n%s\r\n0\r\n\r\n" % (len(t.body), t.body)),
        REFUSED,
    ),
    Case(
        "chunk data ended by LF",
        lambda t: chunked(t, chunks=b"%x\r\n%s\n0\r\n\r\n" % (len(t.body), t.body)),
        REFUSED,
    ),
    Case(
        "a chunk extension with a NUL",
        lambda t: chunked(t, chunks=b"%x;a=\x00\r\n%s\r\n0\r\n\r\n" % (len(t.body), t.body)),
        REFUSED,
    ),
    Case(
        "a trailer line with a space in its name",
        lambda t: chunked(t, chunks=_chunks(t, b"0\r\nBad Name: x\r\n\r\n")),
        REFUSED,
    ),
    Case(
        "a trailer line without a colon",
        lambda t: chunked(t, chunks=_chunks(t, b"0\r\nNoColon\r\n\r\n")),
        REFUSED,
    ),
]


def outcome(address: tuple[str, int], request: bytes, *, timeout: float = 3.0) -> Outcome:
    """Send ``request`` on a new connection; read one response, then (after a refusal) the close.

    A listener that refuses (400, 408, 411, 413, 414, 431, or a 4xx saying ``connection:
    close``) has ``timeout`` seconds to close; one that answers nothing, to close or answer.
    """
    with socket.create_connection(address, timeout=timeout) as sock:
        with contextlib.suppress(OSError):  # a listener may refuse before it all went out
            sock.sendall(request)
        reader = _Reader(sock, time.monotonic() + timeout)
        head = reader.until(b"\r\n\r\n")
        if head is None:
            return Outcome(None, reader.closed)
        status, headers = _parse_head(head)
        body = reader.body(headers)
        closed = reader.closed
        if not closed and _refusal(status, headers):
            closed = reader.wait_close()
        return Outcome(status, closed, head, body or b"")


def _refusal(status: int, headers: dict[bytes, bytes]) -> bool:
    """Whether the answer looks like a refusal: then the listener has to close."""
    framing = status in (400, 408, 411, 413, 414, 431)
    return status >= 400 and (framing or headers.get(b"connection", b"").lower() == b"close")


def _parse_head(head: bytes) -> tuple[int, dict[bytes, bytes]]:
    status_line, *lines = head.split(b"\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers


class _Reader:
    """Bytes from a socket until a deadline; ``closed`` once the peer closed (or reset)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.data = b""
        self.closed = False

    def _more(self) -> bool:
        left = self.deadline - time.monotonic()
        if self.closed or left <= 0:
            return False
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return False
        except OSError:  # a reset: closed
            chunk = b""
        if not chunk:
            self.closed = True
            return False
        self.data += chunk
        return True

    def until(self, marker: bytes) -> bytes | None:
        """What comes before ``marker`` (taken off the buffer), or None at a close or timeout."""
        while marker not in self.data:
            if not self._more():
                return None
        taken, _, self.data = self.data.partition(marker)
        return taken

    def wait_close(self) -> bool:
        """Whether the peer closes before the deadline (whatever else it sends)."""
        while self._more():
            pass
        return self.closed

    def take(self, size: int) -> bytes | None:
        while len(self.data) < size:
            if not self._more():
                return None
        taken, self.data = self.data[:size], self.data[size:]
        return taken

    def body(self, headers: dict[bytes, bytes]) -> bytes | None:
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = b""
            while (size_line := self.until(b"\r\n")) is not None:
                size = int(size_line.split(b";")[0], 16)
                piece = self.take(size + 2)
                if piece is None:
                    return None
                body += piece[:size]
                if size == 0:
                    return body
            return None
        return self.take(int(headers.get(b"content-length", b"0")))
