"""The one HTTP/1.1 client: keep-alive connections to one origin, plain or TLS.

``eval --server``'s requests to a rollout server and the gateway's to the model upstream go
through it. Each connection is an ``asyncio.Protocol`` whose answers are parsed by httptools
(llhttp, the parser uvicorn and Node.js use), so a malformed answer (a bad status line, a
duplicate or conflicting ``Content-Length``, ``Content-Length`` beside ``Transfer-Encoding``, a
bad chunk, bytes nobody asked for) is a ``TransportError`` naming what was wrong, never a
silent misread. Bodies are framed by ``Content-Length``, chunked, or run to the end of the
connection, and are read whole (``request``) or as they arrive (``send``, then
``Reply.aiter_bytes``). Against httpx it spends a fraction of the CPU per request (the README's
benchmark notes give the figures), which is what a run of trivial rollouts and a gateway at
hundreds of calls a second are made of.

Proxies are not its business: ``proxy_for`` says whether the environment names one for a URL,
and ``Proxied`` sends the same requests through httpx, which speaks them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import urlsplit

import httptools

if TYPE_CHECKING:
    import httpx

__all__ = ["Client", "Proxied", "Reply", "Response", "TransportError", "proxy_for"]

Kind = Literal["connect", "timeout", "dropped", "protocol"]

MAX_HEAD_BYTES = 1 << 20  # an answer's status line and headers, at most
PAUSE_AT_BYTES = 1 << 20  # a streamed body buffered past this stops reading until it is read
CLOSE_WAIT_S = 1.0  # how long aclose waits for each connection to be closed (a TLS round trip)
# Sent again on a fresh connection when a reused one closes before any answer; a POST is not
# (the server may have acted on it): its caller's retry policy decides.
_REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})


class TransportError(Exception):
    """No usable answer: no connection, no answer in time, a dropped connection, not HTTP/1.1.

    Attributes:
        kind: ``connect``, ``timeout``, ``dropped`` or ``protocol``.
    """

    def __init__(self, kind: Kind, message: str) -> None:
        super().__init__(message)
        self.kind: Kind = kind


class _Stop(Exception):
    """Raised in a parser callback to stop parsing (the connection's error says why)."""


class _Connection(asyncio.Protocol):
    """One connection: one request at a time, its answer parsed as the bytes arrive."""

    def __init__(self, max_head_bytes: int) -> None:
        self.max_head_bytes = max_head_bytes
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.reused = False
        self.waiting = False  # a request was sent and its answer is not complete
        self.no_body = False  # the request was a HEAD: its answer's length is not its body's
        self.answered = False  # a byte of the answer arrived
        self.status = 0
        self.fields: list[tuple[bytes, bytes]] = []
        self.headers: dict[str, str] | None = None  # set when the head is complete
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.complete = False
        self.until_eof = False
        self.error: TransportError | None = None
        self.head_bytes = 0
        self.gone: asyncio.Future[None] | None = None  # done when the connection is lost
        self._wake: asyncio.Future[None] | None = None
        self._paused = False

    # asyncio's side ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)  # uvloop's is not a subclass
        self.gone = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        if not self.waiting:
            self._fail("protocol", "not a valid HTTP/1.1 answer (bytes before any request)")
            return
        self.answered = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:  # the first error stands (a _Stop's cause)
            self._fail("protocol", f"not a valid HTTP/1.1 answer ({exc})")
            return
        if self.headers is None and self.error is None:  # a head still coming in
            self.head_bytes += len(data)
            if self.head_bytes > self.max_head_bytes:
                self._too_large()

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002
        self._ended()
        if self.gone is not None and not self.gone.done():
            self.gone.set_result(None)

    # httptools' side -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # a second answer to one request
            self._fail("protocol", "not a valid HTTP/1.1 answer (bytes after the answer)")
            raise _Stop
        self.fields = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name, value))

    def on_headers_complete(self) -> None:
        if sum(len(name) + len(value) + 4 for name, value in self.fields) > self.max_head_bytes:
            self._too_large()
            raise _Stop
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # 100 Continue: the answer follows
            return
        headers: dict[str, str] = {}
        for raw, value in self.fields:
            name = raw.decode("latin-1").lower()
            text = value.decode("latin-1")
            headers[name] = f"{headers[name]}, {text}" if name in headers else text
        self.status = status
        self.until_eof = "content-length" not in headers and "chunked" not in headers.get(
            "transfer-encoding", ""
        )
        self.headers = headers
        if self.no_body:  # complete now; the parser would wait for the length it names
            self.complete = self.until_eof = True  # (so the connection is not reused)
        self._wakeup()

    def on_body(self, body: bytes) -> None:
        if self.no_body:
            return
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > PAUSE_AT_BYTES and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wakeup()

    def on_message_complete(self) -> None:
        if self.headers is None:  # the end of a 100 Continue
            return
        self.complete = True
        self._wakeup()

    # the client's side ---------------------------------------------------------------------

    def begin(self, data: bytes, *, no_body: bool) -> None:
        """Send a request; its answer is awaited with ``head`` and ``body``."""
        assert self.transport is not None
        self.waiting, self.answered, self.complete, self.no_body = True, False, False, no_body
        self.headers, self.head_bytes = None, 0
        self.transport.write(data)

    async def head(self) -> None:
        """Until the answer's status and headers are in."""
        while self.headers is None:
            await self._wait()

    async def body(self) -> bytes | None:
        """The body's next bytes; None at its end."""
        while not self.chunks:
            if self.complete:
                return None
            await self._wait()
        data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks.clear()
        self.buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def reusable(self) -> bool:
        """Whether the answer was read to its end and the connection may carry another."""
        headers = self.headers or {}
        return (
            self.complete
            and not self.closed
            and not self.until_eof
            and self.status != 101
            and self.parser.get_http_version() == "1.1"
            and "close" not in headers.get("connection", "").lower()
        )

    def idle(self) -> None:
        self.waiting = False

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def _wait(self) -> None:
        if self.error is not None:
            raise self.error
        self._wake = asyncio.get_running_loop().create_future()
        try:
            await self._wake
        finally:
            self._wake = None
        if self.error is not None and not self.complete:
            raise self.error

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _ended(self) -> None:
        self.closed = True
        if not self.waiting or self.complete:
            return
        if self.headers is not None and self.until_eof:
            self.complete = True  # the body ran to the end of the connection, as framed
        elif self.error is None:
            self.error = TransportError("dropped", "the connection dropped")
        self._wakeup()

    def _too_large(self) -> None:
        self._fail("protocol", f"the answer's head is over {self.max_head_bytes} bytes")

    def _fail(self, kind: Kind, message: str) -> None:
        if self.error is None:
            self.error = TransportError(kind, message)
        self.complete = False
        self.close()
        self._wakeup()


class Reply:
    """An answer: its status and lower-cased headers now, its body read whole or as it arrives.

    Attributes:
        status_code: the answer's status.
        headers: its headers, names lower-cased (a repeated one joined with ``", "``).
    """

    __slots__ = ("_client", "_connection", "_timeout_s", "headers", "status_code")

    def __init__(self, client: Client, connection: _Connection, timeout_s: float | None) -> None:
        self._client = client
        self._connection: _Connection | None = connection
        self._timeout_s = timeout_s
        self.status_code = connection.status
        self.headers: dict[str, str] = connection.headers or {}

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives; each wait is bounded by the request's ``timeout_s``.

        Raises:
            TransportError: nothing arrived in time, the connection dropped, or the body is not
                valid HTTP/1.1 (a bad chunk).
        """
        while (data := await self._next()) is not None:
            yield data

    async def aread(self) -> bytes:
        """The whole body (see ``aiter_bytes``)."""
        parts = []
        while (data := await self._next()) is not None:
            parts.append(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def aclose(self) -> None:
        """Done with the answer: a body not read to its end closes the connection."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    async def _next(self) -> bytes | None:
        connection = self._connection
        if connection is None:
            return None
        try:
            if self._timeout_s is None or connection.chunks or connection.complete:
                data = await connection.body()  # no wait, or no limit: no timer
            else:
                async with asyncio.timeout(self._timeout_s):
                    data = await connection.body()
        except TimeoutError:
            self._drop()
            seconds = _seconds(self._timeout_s or 0)
            raise TransportError("timeout", f"nothing received for {seconds} s") from None
        except BaseException:
            self._drop()
            raise
        if data is None:
            self._connection = None
            self._client.release(connection)
        return data

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


class Response:
    """A whole answer: status, lower-cased headers and body.

    Attributes:
        status_code: the answer's status.
        headers: its headers, names lower-cased.
        content: its body.
    """

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        """The body as text (UTF-8, undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body parsed as JSON.

        Raises:
            ValueError: it is not JSON.
        """
        return json.loads(self.content)


class Client:
    """Requests to one ``http://`` or ``https://`` origin over pooled keep-alive connections.

    Args:
        url: the base URL (``http://host:port[/prefix]``); request paths are appended to it.
        headers: sent with every request (a key, ``accept-encoding``).
        keep: idle connections kept at most.
        connect_timeout_s: how long a new connection may take.
        tls: the TLS context of an ``https://`` URL (default: the system's trust store).
        max_head_bytes: the largest status line and headers an answer may have.

    Raises:
        ValueError: ``url`` is not an http(s) URL with a host.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        keep: int = 1024,
        connect_timeout_s: float = 10.0,
        tls: ssl.SSLContext | None = None,
        max_head_bytes: int = MAX_HEAD_BYTES,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.tls = (tls or ssl.create_default_context()) if parts.scheme == "https" else None
        fixed = {"host": parts.netloc.rpartition("@")[2], **(headers or {})}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self.keep = keep
        self.connect_timeout_s = connect_timeout_s
        self.max_head_bytes = max_head_bytes
        self.idle: list[_Connection] = []

    async def send(
        self,
        method: str,
        path: str,
        *,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None,
    ) -> Reply:
        """Send a request to ``<url><path>``; return once the answer's status and headers are in.

        A kept-alive connection the server closed while idle is replaced; one that closes as it
        is reused, before any answer, is replaced and the request sent again if it is
        idempotent (``GET``, ``PUT``...), as Go's net/http does. ``timeout_s`` bounds the wait
        for the head, then each wait of the body's (None: no bound).

        Raises:
            TransportError: no connection, no answer within ``timeout_s``, a dropped
                connection, or an answer that is not valid HTTP/1.1.
        """
        data = self._head(method, path, body, headers) + body
        while True:
            connection = self._reused() or await self._connect()
            try:
                connection.begin(data, no_body=method == "HEAD")
                if timeout_s is None:
                    await connection.head()
                else:
                    async with asyncio.timeout(timeout_s):
                        await connection.head()
            except TimeoutError:
                connection.close()
                seconds = _seconds(timeout_s or 0)
                raise TransportError("timeout", f"no answer within {seconds} s") from None
            except TransportError:
                connection.close()
                if connection.reused and not connection.answered and method in _REPLAYABLE:
                    continue  # closed as it was reused: a fresh connection (as Go's net/http)
                raise
            except BaseException:
                connection.close()
                raise
            return Reply(self, connection, timeout_s)

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        timeout_s: float,
    ) -> Response:
        """Send a request and read its whole answer, all within ``timeout_s``.

        Raises:
            TransportError: as ``send``, or the body broke off.
        """
        try:
            async with asyncio.timeout(timeout_s):
                reply = await self.send(method, path, body=body, headers=headers, timeout_s=None)
                content = await reply.aread()
        except TimeoutError:
            raise TransportError("timeout", f"no answer within {_seconds(timeout_s)} s") from None
        return Response(reply.status_code, reply.headers, content)

    def release(self, connection: _Connection) -> None:
        """Take back a connection whose answer was read to its end."""
        if connection.reusable() and len(self.idle) < self.keep:
            connection.idle()
            self.idle.append(connection)
        else:
            connection.close()

    async def aclose(self) -> None:
        """Close the idle connections, and wait until they are (a TLS close takes a round trip:
        a loop that ends before it would leave the transport to the garbage collector)."""
        idle, self.idle = self.idle, []
        for connection in idle:
            connection.close()
        for connection in idle:
            if connection.gone is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(connection.gone), CLOSE_WAIT_S)

    def _head(
        self, method: str, path: str, body: bytes, headers: Mapping[str, str] | None
    ) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()) if headers else ""
        kind = "content-type: application/json\r\n" if body and "content-type" not in extra else ""
        return (
            f"{method} {self.prefix}{path} HTTP/1.1\r\n{self._fixed}{extra}{kind}"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode("latin-1")

    def _reused(self) -> _Connection | None:
        while self.idle:
            connection = self.idle.pop()
            if not connection.closed:
                connection.reused = True
                return connection
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, connection = await loop.create_connection(
                    lambda: _Connection(self.max_head_bytes),
                    self.host,
                    self.port,
                    ssl=self.tls,
                    server_hostname=self.host if self.tls else None,
                )
        except TimeoutError:
            raise TransportError("connect", "timed out") from None
        except ConnectionRefusedError:
            raise TransportError("connect", "connection refused") from None
        except OSError as exc:  # ssl.SSLError too
            reason = exc.strerror if isinstance(exc.strerror, str) and exc.strerror else str(exc)
            raise TransportError("connect", reason.lower() or type(exc).__name__) from None
        return connection


def _seconds(seconds: float) -> str:
    return f"{round(seconds, 2):g}"


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP_PROXY``, ``ALL_PROXY``... unless
    ``NO_PROXY`` covers its host), or None."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.netloc):
        return None
    return proxy


class Proxied:
    """``Client.request`` through the proxy the environment names, by httpx (which speaks
    CONNECT, SOCKS and ``NO_PROXY``).

    Args:
        url: the base URL.
        headers: sent with every request.
        connect_timeout_s: how long a new connection may take.
    """

    def __init__(
        self, url: str, *, headers: Mapping[str, str] | None = None, connect_timeout_s: float = 10.0
    ) -> None:
        import httpx  # only behind a proxy

        self._httpx = httpx
        self._client = httpx.AsyncClient(
            base_url=url,
            headers=dict(headers or {}),
            limits=httpx.Limits(max_connections=None),
            timeout=httpx.Timeout(None, connect=connect_timeout_s),
            follow_redirects=False,
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        timeout_s: float,
    ) -> Response:
        """As ``Client.request``."""
        sent = dict(headers or {})
        if body:
            sent.setdefault("content-type", "application/json")
        try:
            reply = await self._client.request(
                method, path, content=body or None, headers=sent, timeout=timeout_s
            )
        except self._httpx.TransportError as exc:
            raise _from_httpx(self._httpx, exc) from None
        return Response(reply.status_code, dict(reply.headers.items()), reply.content)

    async def aclose(self) -> None:
        """Close the connections."""
        await self._client.aclose()


def _from_httpx(module: Any, exc: httpx.TransportError) -> TransportError:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, module.ConnectError | module.ConnectTimeout | module.ProxyError):
        return TransportError("connect", text)
    if isinstance(exc, module.TimeoutException):
        return TransportError("timeout", text)
    if isinstance(exc, module.RemoteProtocolError):
        return TransportError("protocol", text)
    return TransportError("dropped", text)
