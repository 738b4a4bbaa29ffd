"""A stdlib-only, OpenAI-compatible chat completions server for tests.

    with serve_fake_openai(lambda body: "The answer is 4.", api_key="sk-test") as server:
        ...  # point a workflow at server.url ("http://127.0.0.1:PORT/v1")
    assert server.requests[0].body["model"] == "gpt-4o-mini"

It answers ``POST /v1/chat/completions`` with one canned completion, 401 when ``api_key`` is set
and the bearer token differs (echoing the token it got, as a careless real server might, so
tests can check that callers keep it out of their errors), 400 on a body that is not JSON, and
404 on other paths.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAI", "ReceivedRequest", "serve_fake_openai"]

Replies = Callable[[dict[str, Any]], str]
COMPLETIONS_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class ReceivedRequest:
    """One request the server received: its path, JSON body and Authorization header."""

    path: str
    body: dict[str, Any]
    authorization: str | None


@dataclass
class FakeOpenAI:
    """The running server: its base URL and every request it received, in order."""

    url: str
    requests: list[ReceivedRequest] = field(default_factory=list)


def echo_reply(body: dict[str, Any]) -> str:
    """Answer with the last message's content."""
    messages = body.get("messages") or [{}]
    return f"You said: {messages[-1].get('content', '')}"


def _completion(body: dict[str, Any], content: str) -> dict[str, Any]:
    prompt_words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    usage = {"prompt_tokens": prompt_words, "completion_tokens": len(content.split())}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    message = {"role": "assistant", "content": content}
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": body.get("model", "fake-model"),
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage,
    }


class _Server(ThreadingHTTPServer):
    request_queue_size = 64  # tests fire many rollouts at once


def _handler(server: FakeOpenAI, replies: Replies, api_key: str | None) -> type[Any]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Keep test output quiet."""

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            authorization = self.headers.get("Authorization")
            try:
                body = json.loads(raw)
            except ValueError:
                self._send(400, {"error": {"message": "body is not JSON"}})
                return
            server.requests.append(ReceivedRequest(self.path, body, authorization))
            self._answer(body, authorization)

        def _answer(self, body: dict[str, Any], authorization: str | None) -> None:
            if self.path != COMPLETIONS_PATH:
                self._send(404, {"error": {"message": f"no route {self.path}"}})
            elif api_key is not None and authorization != f"Bearer {api_key}":
                token = (authorization or "").removeprefix("Bearer ")
                self._send(401, {"error": {"message": f"Incorrect API key provided: {token}"}})
            else:
                self._send(200, _completion(body, replies(body)))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def serve_fake_openai(
    replies: Replies | None = None, *, api_key: str | None = None
) -> Iterator[FakeOpenAI]:
    """Serve a fake chat completions API on 127.0.0.1 (a free port) until the block ends."""
    state = FakeOpenAI(url="")
    httpd = _Server(("127.0.0.1", 0), _handler(state, replies or echo_reply, api_key))
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        thread.join()
        httpd.server_close()
