"""A loopback, OpenAI-compatible chat completions server that streams (SSE), for the interop suite.

osmosis_ai's ``OsmosisLitellmModel`` is streaming-only, so this answers ``stream: true`` requests
with ``chat.completion.chunk`` events, and plain requests with one completion.

    with serve_streaming_openai(lambda body: "#### 6", api_key="sk-...") as server:
        ...  # server.url is "http://127.0.0.1:PORT/v1"; server.requests holds what arrived
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Replies = Callable[[dict[str, Any]], str]


@dataclass
class Served:
    """The running server: its base URL, and each request's body and Authorization header."""

    url: str
    requests: list[tuple[dict[str, Any], str | None]] = field(default_factory=list)


def _chunk(body: dict[str, Any], delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-interop",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _handler(served: Served, replies: Replies, api_key: str | None) -> type[Any]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Quiet."""

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            authorization = self.headers.get("Authorization")
            served.requests.append((body, authorization))
            if not self.path.endswith("/chat/completions"):
                self._json(404, {"error": {"message": f"no route {self.path}"}})
            elif api_key is not None and authorization != f"Bearer {api_key}":
                self._json(401, {"error": {"message": "Incorrect API key provided"}})
            elif body.get("stream"):
                self._stream(body, replies(body))
            else:
                message = {"role": "assistant", "content": replies(body)}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                self._json(200, {"id": "x", "object": "chat.completion", "created": 0,
                                 "model": body.get("model", "fake"), "choices": [choice],
                                 "usage": usage})  # fmt: skip

        def _stream(self, body: dict[str, Any], text: str) -> None:
            events = [
                _chunk(body, {"role": "assistant", "content": text}, None),
                _chunk(body, {}, "stop"),
            ]
            usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
            events.append({**_chunk(body, {}, None), "choices": [], "usage": usage})
            data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            raw = data.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    return Handler


@contextmanager
def serve_streaming_openai(replies: Replies, *, api_key: str | None = None) -> Iterator[Served]:
    """Serve on 127.0.0.1 (a free port) until the block ends."""
    served = Served(url="")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served, replies, api_key))
    httpd.daemon_threads = True
    served.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield served
    finally:
        httpd.shutdown()
        thread.join()
        httpd.server_close()
