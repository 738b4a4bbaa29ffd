"""CPU per request of the one HTTP client (``osmosis_run/http/client.py``), beside httpx.

    python -m tests.perf.client [--requests 20000] [--baseline /path/to/a3852ac] [--uvloop]

A loopback server in a process of its own answers every request at once with a small JSON body
(Content-Length framed); 32 tasks send requests over keep-alive connections, and the figure is
this process's CPU time per request. ``Client.send`` + ``aread`` is the gateway's chat call,
``Client.request`` + ``json()`` a rollout protocol call of ``eval --server``. ``--baseline``
points at a wave-2 tree (a3852ac) whose two clients (``gateway/_client.py``,
``backends/_http11.py``) are measured beside it, loaded from their files. One JSON line per
client on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from osmosis_run.http.client import Client

TASKS = 32
BODY = b'{"model":"m","messages":[{"role":"user","content":"hello"}]}'
SERVER = r"""
import asyncio, sys
BODY = b'{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}'
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(BODY), BODY)
class Answer(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""
    def data_received(self, data):
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head, length = self.buffer[:end].lower(), 0
            if (at := head.find(b"content-length: ")) >= 0:
                length = int(head[at + 16:].split(b"\r\n")[0])
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length:]
            self.transport.write(ANSWER)
async def main():
    server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await server.serve_forever()
asyncio.run(main())
"""

Call = Callable[[Any], Awaitable[None]]


async def _measure(client: Any, call: Call, requests: int) -> tuple[float, float]:
    async def worker(count: int) -> None:
        for _ in range(count):
            await call(client)

    await asyncio.gather(*(worker(100) for _ in range(TASKS)))  # connections open, code warm
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker(requests // TASKS) for _ in range(TASKS)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await client.aclose()
    done = requests // TASKS * TASKS
    return cpu / done * 1e6, done / wall


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _clients(url: str, baseline: Path | None) -> list[tuple[str, Callable[[], Any], Call]]:
    async def send(client: Any) -> None:
        reply = await client.send("POST", "/v1/chat/completions", body=BODY, timeout_s=10)
        await reply.aread()

    async def request(client: Any) -> None:
        (await client.request("POST", "/rollout", body=BODY, timeout_s=10)).json()

    async def httpx_post(client: Any) -> None:
        (await client.post("/rollout", content=BODY)).json()

    def httpx_client() -> Any:
        import httpx

        return httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_keepalive_connections=64))

    headers = {"authorization": "Bearer k"}
    found: list[tuple[str, Callable[[], Any], Call]] = [
        ("Client.send+aread", lambda: Client(url, headers=headers), send),
        ("Client.request+json", lambda: Client(url, headers=headers), request),
        ("httpx.AsyncClient", httpx_client, httpx_post),
    ]
    if baseline is not None:
        old = baseline / "osmosis_run"
        upstream = _load(old / "gateway" / "_client.py", "wave2_client")
        pool = _load(old / "backends" / "_http11.py", "wave2_http11")

        async def post(client: Any) -> None:
            reply = await client.post("v1/chat/completions", BODY, seconds=10)
            await reply.aread()

        async def lean(client: Any) -> None:
            (await client.request("POST", "/rollout", content=BODY, within_s=10)).json()

        found += [
            ("wave-2 UpstreamClient", lambda: upstream.UpstreamClient(url, headers=headers), post),
            ("wave-2 Http11Pool", lambda: pool.Http11Pool(url, headers=headers, keep=64), lean),
        ]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    server.stdout.readline()
    url = f"http://127.0.0.1:{port}"
    try:
        for name, make, call in _clients(url, args.baseline):
            requests = args.requests // 20 if name.startswith("httpx") else args.requests
            work = _measure(make(), call, requests)
            if args.uvloop:
                import uvloop

                cpu_us, per_s = uvloop.run(work)
            else:
                cpu_us, per_s = asyncio.run(work)
            line = {"client": name, "cpu_us_per_request": round(cpu_us, 1), "per_s": round(per_s)}
            print(json.dumps(line), flush=True)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()


if __name__ == "__main__":
    main()
