"""The one event-loop factory (eventloop.py): asyncio's loop, or uvloop's when asked for and
installed; what the commands do runs on either."""

from __future__ import annotations

import asyncio
import sys

import pytest

from osmosis_run.eventloop import new_event_loop


async def _round_trip() -> bytes:
    """A loopback server and client, a timer and a worker thread: what the commands use."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"ping\n")
    answer = await reader.readline()
    writer.close()
    server.close()
    await server.wait_closed()
    await asyncio.sleep(0.01)
    return answer + await asyncio.to_thread(lambda: b"!")


def test_a_fast_loop_is_uvloop_where_uvloop_is_installed() -> None:
    uvloop = pytest.importorskip("uvloop")
    loop = new_event_loop(fast=True)
    try:
        assert isinstance(loop, uvloop.Loop)
        assert loop.run_until_complete(_round_trip()) == b"ping\n!"
    finally:
        loop.close()


def test_a_fast_loop_without_uvloop_is_asyncios_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    loop, default = new_event_loop(fast=True), asyncio.new_event_loop()
    try:
        assert type(loop) is type(default)
        assert loop.run_until_complete(_round_trip()) == b"ping\n!"
    finally:
        loop.close()
        default.close()


def test_a_loop_not_asked_to_be_fast_is_asyncios_own() -> None:
    loop, default = new_event_loop(), asyncio.new_event_loop()
    try:
        assert type(loop) is type(default)
    finally:
        loop.close()
        default.close()
