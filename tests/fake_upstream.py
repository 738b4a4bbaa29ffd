"""A scriptable OpenAI-compatible upstream on loopback, for the gateway's tests and benchmarks.

    with serve_upstream(api_key="sk-upstream-secret") as up:
        up.script([Reply(status=429, retry_after=0.05), Reply()])   # then the default
        ...  # point the gateway at up.url ("http://127.0.0.1:PORT/v1")
    assert up.total_tokens == ...  # its own count of the tokens it billed

It runs on asyncio streams in a thread of its own (or as a process:
``python -m tests.fake_upstream --port 0 --delay 0.2``, printing its URL), and answers
``POST /v1/chat/completions`` (JSON with ``usage``, or SSE whose last chunk carries the usage
when ``stream_options.include_usage`` is set), ``GET /v1/models``, and 404 elsewhere. Each
request takes the next scripted ``Reply`` (429 with or without Retry-After, 500, a delay, a
dropped connection, a stream with pauses between chunks), then ``default``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Reply", "Upstream", "serve_upstream"]


@dataclass
class Reply:
    """How to answer one request."""

    status: int = 200
    content: str | None = None  # None: echo the last message
    delay: float = 0.0  # seconds before answering
    retry_after: float | None = None
    drop: bool = False  # close the connection without an answer
    chunk_delay: float = 0.0  # between SSE chunks
    drop_mid_stream: bool = False


@dataclass
class Seen:
    """One request the upstream received."""

    method: str
    path: str
    body: Any
    authorization: str | None
    at: float


@dataclass
class Upstream:
    """The running upstream: its URL, what it received and what it billed."""

    url: str = ""
    api_key: str | None = None
    default: Reply = field(default_factory=Reply)
    requests: list[Seen] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    stream_chunks_sent: list[float] = field(default_factory=list)
    _script: deque[Reply] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def script(self, replies: list[Reply]) -> None:
        """Answer the next requests with these, in order."""
        with self._lock:
            self._script.extend(replies)

    def next_reply(self) -> Reply:
        with self._lock:
            return self._script.popleft() if self._script else self.default

    def chat_requests(self) -> list[Seen]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]


def _tokens(text: str) -> int:
    return len(text.split())


def _completion(body: dict[str, Any], content: str) -> tuple[dict[str, Any], dict[str, int]]:
    prompt = sum(_tokens(str(m.get("content", ""))) for m in body.get("messages", []))
    usage = {"prompt_tokens": prompt, "completion_tokens": _tokens(content)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return {
        "id": "chatcmpl-up",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "up-model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }, usage


async def _serve_connection(
    up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
            body_raw = await reader.readexactly(int(headers.get("content-length") or 0))
            try:
                body = json.loads(body_raw) if body_raw else None
            except ValueError:
                body = None
            auth = headers.get("authorization")
            up.requests.append(Seen(method, path, body, auth, time.monotonic()))
            if not await _answer(up, writer, method, path, body, auth):
                return
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _send(writer: asyncio.StreamWriter, status: int, payload: Any, extra: str = "") -> None:
    data = json.dumps(payload).encode()
    writer.write(
        f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{extra}"
        f"content-length: {len(data)}\r\n\r\n".encode()
        + data
    )
    await writer.drain()


async def _answer(
    up: Upstream, writer: asyncio.StreamWriter, method: str, path: str, body: Any, auth: str | None
) -> bool:
    if up.api_key is not None and auth != f"Bearer {up.api_key}":
        token = (auth or "").removeprefix("Bearer ")
        await _send(writer, 401, {"error": {"message": f"Incorrect API key provided: {token}"}})
        return True
    if method == "GET" and path == "/v1/models":
        await _send(
            writer, 200, {"object": "list", "data": [{"id": "up-model", "object": "model"}]}
        )
        return True
    if method != "POST" or path != "/v1/chat/completions" or not isinstance(body, dict):
        await _send(writer, 404, {"error": {"message": f"no route {method} {path}"}})
        return True
    reply = up.next_reply()
    up.in_flight += 1
    up.peak_in_flight = max(up.peak_in_flight, up.in_flight)
    try:
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.drop:
            return False
        if reply.status != 200:
            extra = (
                f"retry-after: {reply.retry_after:g}\r\n" if reply.retry_after is not None else ""
            )
            message = {429: "Rate limit reached", 500: "The server had an error"}
            await _send(
                writer,
                reply.status,
                {"error": {"message": message.get(reply.status, "error"), "type": "x"}},
                extra,
            )
            return True
        messages = body.get("messages") or [{}]
        content = (
            reply.content
            if reply.content is not None
            else f"echo: {messages[-1].get('content', '')}"
        )
        completion, usage = _completion(body, content)
        if body.get("stream"):
            return await _stream(up, writer, body, completion, usage, reply)
        with up._lock:
            up.prompt_tokens += usage["prompt_tokens"]
            up.completion_tokens += usage["completion_tokens"]
        await _send(writer, 200, completion)
        return True
    finally:
        up.in_flight -= 1


async def _stream(
    up: Upstream,
    writer: asyncio.StreamWriter,
    body: dict[str, Any],
    completion: dict[str, Any],
    usage: dict[str, int],
    reply: Reply,
) -> bool:
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    words = completion["choices"][0]["message"]["content"].split(" ")
    chunks: list[dict[str, Any]] = []
    for i, word in enumerate(words):
        delta: dict[str, Any] = {"content": word if i == 0 else " " + word}
        if i == 0:
            delta["role"] = "assistant"
        chunks.append(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": completion["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            }
        )
    chunks.append(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": completion["model"],
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
    )
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": completion["model"],
                "choices": [],
                "usage": usage,
            }
        )
    for n, chunk in enumerate(chunks):
        if n and reply.chunk_delay:
            await asyncio.sleep(reply.chunk_delay)
        if reply.drop_mid_stream and n == len(chunks) // 2:
            return False
        data = b"data: " + json.dumps(chunk).encode() + b"\n\n"
        writer.write(b"%x\r\n%b\r\n" % (len(data), data))
        await writer.drain()
        up.stream_chunks_sent.append(time.monotonic())
    done = b"data: [DONE]\n\n"
    writer.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(done), done))
    await writer.drain()
    with up._lock:
        up.prompt_tokens += usage["prompt_tokens"]
        up.completion_tokens += usage["completion_tokens"]
    return True


@contextlib.contextmanager
def serve_upstream(
    *, api_key: str | None = None, default: Reply | None = None, tls: Any = None
) -> Iterator[Upstream]:
    """Run an upstream on 127.0.0.1 (a free port) in a thread until the block ends.

    ``tls``: an ``ssl.SSLContext`` to serve HTTPS with.
    """
    up = Upstream(api_key=api_key, default=default or Reply())
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def main() -> None:
        server = await asyncio.start_server(
            lambda r, w: _serve_connection(up, r, w), "127.0.0.1", 0, backlog=1024, ssl=tls
        )
        scheme = "https" if tls is not None else "http"
        up.url = f"{scheme}://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        ready.set()
        await stop.wait()
        server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield up
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def main() -> None:
    """Serve as a process: print the URL, answer every call after ``--delay`` seconds."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    up = Upstream(default=Reply(delay=args.delay))

    async def run() -> None:
        server = await asyncio.start_server(
            lambda r, w: _serve_connection(up, r, w), "127.0.0.1", args.port, backlog=4096
        )
        print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", flush=True)
        up.requests = _Forgetful()
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    sys.exit(0)


class _Forgetful(list):  # type: ignore[type-arg]
    """A benchmark's upstream keeps no requests."""

    def append(self, _item: Any) -> None:
        pass


if __name__ == "__main__":
    main()
