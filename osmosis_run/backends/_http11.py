"""A lean HTTP/1.1 keep-alive client for the rollout protocol's hot path, on asyncio streams.

Every rollout of ``eval --server`` costs at least two requests (``POST /rollout``, then a long
poll or two); through httpx each costs about 0.7 ms of CPU here (httpx, httpcore, anyio and h11),
which made the client, not the server, the bottleneck of a run of trivial rollouts. This module
speaks just what those requests need: a JSON body out, a ``Content-Length`` or chunked body back,
keep-alive connections reused from a pool. It serves plain ``http://`` URLs without a proxy; the
rest (TLS, proxies, ``GET /health``, cancels) goes through httpx. Its answers are
``httpx.Response`` objects and its failures ``httpx.TransportError`` subclasses, so that callers
handle both paths alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx

__all__ = ["Http11Pool", "usable_for"]

_MAX_HEAD = 64 * 1024


def usable_for(url: str, environ: Mapping[str, str]) -> bool:
    """Whether ``url`` is plain http with no proxy configured for it (else: httpx)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    proxies = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")
    return not any(environ.get(name) for name in proxies)


class Http11Pool:
    """Keep-alive connections to one ``http://host:port[/prefix]``, opened as needed.

    Args:
        url: the base URL (plain http).
        headers: sent with every request (the Bearer key).
        keep: idle connections kept at most.
    """

    def __init__(self, url: str, *, headers: Mapping[str, str], keep: int) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        authority = parts.netloc.rpartition("@")[2]
        fixed = {"Host": authority, "Accept": "application/json", **headers}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self.keep = keep
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def request(
        self,
        method: str,
        path: str,
        *,
        content: bytes = b"",
        headers: Mapping[str, str] | None = None,
        within_s: float,
    ) -> httpx.Response:
        """Send one request; a reused connection the server closed meanwhile is retried once.

        Raises:
            httpx.ConnectError: the server cannot be reached.
            httpx.ReadTimeout: no whole answer within ``within_s`` seconds.
            httpx.ReadError: the connection broke, or the answer is not HTTP/1.1.
        """
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        kind = "Content-Type: application/json\r\n" if content else ""
        head = (
            f"{method} {self.prefix}{path} HTTP/1.1\r\n{self._head}{extra}{kind}"
            f"Content-Length: {len(content)}\r\n\r\n"
        ).encode("latin-1")
        try:
            async with asyncio.timeout(within_s):
                while True:
                    reused = bool(self._idle)
                    reader, writer = self._idle.pop() if reused else await self._connect()
                    try:
                        return await self._exchange(reader, writer, head + content)
                    except (ConnectionError, asyncio.IncompleteReadError) as exc:
                        writer.close()
                        if not reused:
                            raise httpx.ReadError(f"the connection broke: {exc!r}") from None
                    except ValueError as exc:  # a chunk size that is not hexadecimal
                        writer.close()
                        raise httpx.ReadError(f"not an HTTP/1.1 answer: {exc}") from None
                    except BaseException:
                        writer.close()
                        raise
        except TimeoutError:
            raise httpx.ReadTimeout(f"no answer within {within_s:g}s") from None

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            return await asyncio.open_connection(self.host, self.port, limit=_MAX_HEAD)
        except OSError as exc:  # "Connection refused", not asyncio's "Connect call failed (...)"
            reason = os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__
            raise httpx.ConnectError(reason) from None

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
    ) -> httpx.Response:
        writer.write(data)
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise httpx.ReadError("the answer's head is too large") from None
        status, fields = _head(raw)
        body = await _body(reader, fields)
        if fields.get("connection", "").lower() == "close" or len(self._idle) >= self.keep:
            writer.close()
        else:
            self._idle.append((reader, writer))
        return httpx.Response(status, headers=list(fields.items()), content=body)

    async def aclose(self) -> None:
        """Close the idle connections."""
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def _head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest.partition(" ")[0]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise httpx.ReadError(f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return int(code), fields


async def _body(reader: asyncio.StreamReader, fields: dict[str, str]) -> bytes:
    if "chunked" in fields.get("transfer-encoding", "").lower():
        chunks: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                    pass
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = fields.get("content-length")
    if length is not None and length.isdigit():
        return await reader.readexactly(int(length))
    fields["connection"] = "close"  # the body runs to the end of the connection
    return await reader.read()
