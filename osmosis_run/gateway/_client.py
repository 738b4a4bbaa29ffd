"""The gateway's client for chat completions: HTTP/1.1 keep-alive on asyncio streams.

Every model call passes through here, in the process that runs the workflows; httpx spends
about ten times the CPU per request that this does (573 against 55 microseconds on the
development machine), which at hundreds of calls a second is the difference between a gateway
that costs nothing and one that slows the run. It does exactly what the hot path needs: POST
with a JSON body, a pool of keep-alive connections (plain or TLS), ``Content-Length`` and
chunked answers, read whole or as they arrive. Everything else the gateway sends (the
preflight, other ``/v1/...`` paths) goes through httpx. Proxies from the environment
(``HTTPS_PROXY``) are not used for chat completions.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable
from urllib.parse import urlsplit

__all__ = ["UpstreamClient", "UpstreamError", "UpstreamReply"]

_HEAD_LIMIT = 1 << 20


class UpstreamError(Exception):
    """The upstream could not be reached, timed out, or dropped the connection.

    Attributes:
        kind: ``connect``, ``timeout`` or ``dropped``.
    """

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


CLOSE_WAIT_S = 1.0  # how long aclose waits for each connection to be closed


class _Connection:
    __slots__ = ("reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reused = False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class UpstreamReply:
    """An answer: status and lower-cased headers now, the body read whole or chunk by chunk."""

    def __init__(
        self,
        client: UpstreamClient,
        connection: _Connection,
        status: int,
        headers: dict[str, str],
        timeout: float,
    ) -> None:
        self._client = client
        self._connection: _Connection | None = connection
        self.status_code = status
        self.headers = headers
        self._timeout = timeout
        self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        length = headers.get("content-length")
        self._left = int(length) if length is not None and not self._chunked else None
        self._keep = headers.get("connection", "").lower() != "close" and (
            self._chunked or self._left is not None
        )

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives."""
        connection = self._connection
        if connection is None:
            return
        if self._chunked:
            parts = self._chunks(connection.reader)
        elif self._left is not None:
            parts = self._sized(connection.reader)
        else:  # the body ends with the connection
            parts = self._until_eof(connection.reader)
        try:
            async for data in parts:
                yield data
        except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
            self._drop()
            raise UpstreamError("dropped", "the connection dropped") from exc
        except BaseException:
            self._drop()
            raise
        self._release()

    async def _chunks(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while True:
            line = await self._read(reader.readuntil(b"\r\n"))
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await self._read(reader.readuntil(b"\r\n"))) != b"\r\n":
                    pass  # trailers
                return
            data = await self._read(reader.readexactly(size))
            await self._read(reader.readexactly(2))
            yield data

    async def _sized(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        left = self._left or 0
        while left > 0:
            data = await self._read(reader.read(min(left, 1 << 16)))
            if not data:
                raise ConnectionError("the body ended early")
            left -= len(data)
            yield data

    async def _until_eof(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while data := await self._read(reader.read(1 << 16)):
            yield data

    async def aread(self) -> bytes:
        """The whole body."""
        return b"".join([part async for part in self.aiter_bytes()])

    async def aclose(self) -> None:
        """Done with the answer: an unread body means the connection cannot be reused."""
        self._drop()

    async def _read(self, awaitable: Awaitable[bytes]) -> bytes:
        try:
            async with asyncio.timeout(self._timeout):
                data = await awaitable
        except TimeoutError:
            raise UpstreamError("timeout", "timed out") from None
        return data

    def _release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            if self._keep:
                self._client.idle.append(connection)
            else:
                connection.close()

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


class UpstreamClient:
    """POSTs to one upstream (``http://`` or ``https://``) over pooled keep-alive connections.

    Args:
        base: the upstream's base URL (``http://host:8000/v1``).
        headers: sent with every request (the provider key).
        connect_timeout_s: how long a new connection may take.
        tls: the TLS context of an ``https://`` upstream (default: the system's trust store).
    """

    def __init__(
        self,
        base: str,
        *,
        headers: dict[str, str],
        connect_timeout_s: float = 10.0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = parts.path.rstrip("/")
        self.tls = (tls or ssl.create_default_context()) if parts.scheme == "https" else None
        netloc = parts.netloc.rpartition("@")[2]
        fixed = {"host": netloc, "user-agent": "osmosis-run-gateway", **headers}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[_Connection] = []

    async def post(self, path: str, body: bytes, *, seconds: float) -> UpstreamReply:
        """POST ``body`` (JSON) to ``<base>/<path>``; return once the status and headers are in.

        A kept-alive connection the upstream closed meanwhile is replaced once, transparently.

        Raises:
            UpstreamError: no connection, no answer within ``seconds``, or a dropped connection.
        """
        head = (
            f"POST {self.path}/{path} HTTP/1.1\r\n{self._fixed}content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode("latin-1")
        while True:
            connection = await self._connection()
            try:
                connection.writer.write(head + body)
                async with asyncio.timeout(seconds):
                    status, headers = await _read_head(connection.reader)
            except TimeoutError:
                connection.close()
                raise UpstreamError("timeout", "timed out") from None
            except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
                connection.close()
                if connection.reused:  # closed while idle: try a fresh connection
                    continue
                raise UpstreamError("dropped", "the connection dropped") from exc
            except BaseException:
                connection.close()
                raise
            return UpstreamReply(self, connection, status, headers, seconds)

    async def _connection(self) -> _Connection:
        while self.idle:
            connection = self.idle.pop()
            if not connection.writer.is_closing() and not connection.reader.at_eof():
                connection.reused = True
                return connection
            connection.close()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=self.tls,
                    server_hostname=self.host if self.tls else None,
                    limit=_HEAD_LIMIT,
                )
        except TimeoutError:
            raise UpstreamError("connect", "cannot connect (timed out)") from None
        except ConnectionRefusedError:
            raise UpstreamError("connect", "cannot connect (connection refused)") from None
        except (OSError, ssl.SSLError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise UpstreamError("connect", f"cannot connect ({reason})") from None
        return _Connection(reader, writer)

    async def aclose(self) -> None:
        """Close the idle connections, and wait until they are (a TLS close takes a round trip:
        a loop that ends before it would leave the transport to the garbage collector)."""
        idle, self.idle = list(self.idle), type(self.idle)()
        for connection in idle:
            connection.close()
        for connection in idle:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.writer.wait_closed(), CLOSE_WAIT_S)


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    while True:
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw[:-4].decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if status != 100:  # a 100 Continue is followed by the real answer
            return status, headers
