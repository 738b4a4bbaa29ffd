"""A rollout server speaking protocol "0.4" (osmosis-ai 0.3.8's), and the workflow and grader
that eval --server's tests serve (importable as ``remote_fake``).

A plain ASGI app over osmosis-run's ``LocalBackend``, served by a real uvicorn on loopback: in
a thread of the test (``served(...)``, its state readable by the test) or as a process of its
own (``python tests/remote_fake.py --workflow remote_fake:Mixed --port N``), to be killed. It
keeps what it was sent (``posts``, ``cancels``, ``polls``) and can refuse admissions with 429
(``capacity``) like a busy server.

``Mixed`` does what its row's ``metadata.kind`` says, so one dataset gives every status: echo
(the default), ``raise`` (an agent error), ``flaky`` (an error the first time a prompt is seen in
this process), ``sleep`` (``metadata.sleep`` seconds, then echo), ``gate`` (wait while the file
``$REMOTE_GATE`` exists, then echo). ``Judge`` scores an exact match, and removes the sample when
``metadata.remove`` is set.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    Grader,
    GraderContext,
)
from osmosis_run.sdk.backend import LocalBackend
from osmosis_run.sdk.types import ExecutionRequest

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
FINAL = ("success", "failure", "cancelled")

_seen: dict[str, int] = {}


class Mixed(AgentWorkflow[AgentWorkflowConfig]):
    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        meta = ctx.metadata or {}
        kind = meta.get("kind", "echo")
        if kind == "raise":
            raise RuntimeError("workflow exploded")
        if kind == "flaky":  # fails the first time each prompt is seen in this process
            key = str(ctx.prompt)
            _seen[key] = _seen.get(key, 0) + 1
            if _seen[key] == 1:
                raise ConnectionError("upstream hiccup")
        if kind == "sleep":
            await asyncio.sleep(float(meta.get("sleep", 0.3)))
        if kind == "gate":
            gate = Path(os.environ["REMOTE_GATE"])
            while await asyncio.to_thread(gate.exists):  # noqa: ASYNC110  (a file, not an event)
                await asyncio.sleep(0.02)
        answer = str(ctx.prompt[-1]["content"])
        return [*ctx.prompt, {"role": "assistant", "content": answer}]


class Judge(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        if (ctx.metadata or {}).get("remove"):
            ctx.sample.remove_sample = True
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == ctx.label else 0.0)


@dataclass
class _Rollout:
    token: str
    status: str = "queued"
    result: dict[str, Any] | None = None
    task: asyncio.Task[None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    lease_until: float = 0.0


class ProtocolServer:
    """The app: /health, POST /rollout, GET /rollout/{id}/result, POST /rollout/cancel."""

    def __init__(
        self,
        backend: LocalBackend,
        *,
        api_key: str | None = None,
        wait_s: float = 1.0,
        lease_s: float = 3.0,
        capacity: int | None = None,
        retry_after: str = "0.05",
        max_concurrent: int | None = 4,
        enforce_timeouts: bool = True,
    ) -> None:
        self.backend = backend
        self.api_key = api_key
        self.wait_s = wait_s
        self.lease_s = lease_s
        self.capacity = capacity
        self.retry_after = retry_after
        self.max_concurrent = max_concurrent
        self.enforce_timeouts = enforce_timeouts
        self.rollouts: dict[str, _Rollout] = {}
        self.posts: list[dict[str, Any]] = []
        self.cancels: list[dict[str, Any]] = []
        self.polls = 0
        self.refused = 0  # 429s answered
        self.cancelled_running: list[str] = []

    def active(self) -> int:
        return sum(1 for r in self.rollouts.values() if r.status not in FINAL)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
            await _answer(send, 401, {"detail": "unauthorized"})
            return
        code, reply, extra = await self._route(scope["method"], scope["path"], headers, body)
        await _answer(send, code, reply, extra)

    async def _route(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, Any, dict[str, str]]:
        if method == "GET" and path == "/health":
            health = {
                "status": "ok",
                "process_id": "fake",
                "lifecycle": {"accepting_rollouts": True, "active_rollouts": self.active()},
            }
            if self.max_concurrent is not None:
                health["concurrency"] = {"max_concurrent": self.max_concurrent}
            return 200, health, {}
        if method == "POST" and path == "/rollout":
            return self._admit(json.loads(body))
        if method == "POST" and path == "/rollout/cancel":
            return self._cancel(json.loads(body))
        if method == "GET" and path.startswith("/rollout/") and path.endswith("/result"):
            return await self._result(
                path.removeprefix("/rollout/").removesuffix("/result"), headers
            )
        return 404, {"detail": "Not Found"}, {}

    def _admit(self, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        rid = body.get("rollout_id")
        if (
            not isinstance(rid, str)
            or "/" in rid
            or not isinstance(body.get("initial_messages"), list)
        ):
            return 422, {"detail": [{"msg": "bad request"}]}, {}
        if self.capacity is not None and self.active() >= self.capacity:
            self.refused += 1
            return (
                429,
                {"detail": "rollout queue is full; retry later"},
                {"Retry-After": self.retry_after},
            )
        if rid in self.rollouts:
            return 409, {"detail": "rollout_id is already registered"}, {}
        self.posts.append(body)
        rollout = _Rollout(
            token=secrets.token_urlsafe(8), lease_until=time.monotonic() + self.lease_s
        )
        self.rollouts[rid] = rollout
        rollout.task = asyncio.get_running_loop().create_task(self._execute(rid, rollout, body))
        admission = {
            "rollout_id": rid,
            "status": "queued",
            "polling_lease_token": rollout.token,
            "result_wait_timeout_sec": self.wait_s,
            "polling_lease_timeout_sec": self.lease_s,
        }
        return 202, admission, {}

    async def _execute(self, rid: str, rollout: _Rollout, body: dict[str, Any]) -> None:
        self._set(rollout, "running")
        request = ExecutionRequest(
            id=rid,
            prompt=body["initial_messages"],
            label=body.get("label"),
            metadata=body.get("metadata"),
            agent_timeout_sec=body.get("agent_timeout_sec"),
            grader_timeout_sec=body.get("grader_timeout_sec"),
            grade=body.get("grade", True),
        )
        budget = (request.agent_timeout_sec or 0) + (request.grader_timeout_sec or 0)
        budget = budget if self.enforce_timeouts else 0
        try:
            async with asyncio.timeout(budget or None):
                outcome = await self.backend.execute(request)
        except TimeoutError:
            self._finish(rollout, "failure", None, "workflow exceeded its deadline", "timeout")
            return
        except asyncio.CancelledError:
            self._finish(rollout, "cancelled", None, "cancelled", None)
            raise
        result = outcome.result
        sample = None
        if result.sample is not None:
            sample = result.sample.model_dump(exclude={"trajectory_messages"})
            sample["metrics"] = {k: v for k, v in sample["metrics"].items() if _finite(v)}
            if result.status != "success" or sample["remove_sample"]:
                sample["reward"] = None
        category = str(result.err_category) if result.err_category else None
        self._finish(rollout, str(result.status), sample, result.err_message, category)

    def _set(self, rollout: _Rollout, status: str) -> None:
        rollout.status = status
        rollout.changed.set()
        rollout.changed = asyncio.Event()

    def _finish(
        self, rollout: _Rollout, status: str, sample: Any, message: str | None, category: str | None
    ) -> None:
        rollout.result = {
            "status": status,
            "sample": sample,
            "err_message": message,
            "err_category": category,
        }
        self._set(rollout, status)

    async def _result(self, rid: str, headers: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        self.polls += 1
        token = headers.get("x-osmosis-rollout-lease")
        if token is None:
            return 422, {"detail": [{"msg": "Field required"}]}, {}
        rollout = self.rollouts.get(rid)
        if rollout is None:
            return 404, {"detail": "unknown rollout_id"}, {}
        if token != rollout.token:
            return 403, {"detail": "invalid polling lease"}, {}
        if rollout.result is None:
            rollout.lease_until = time.monotonic() + self.lease_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(rollout.changed.wait(), self.wait_s)
        body = {
            "rollout_id": rid,
            "status": rollout.status,
            "sample": None,
            "err_message": None,
            "err_category": None,
        }
        if rollout.result is not None:
            body.update(rollout.result)
        return 200, body, {}

    def _cancel(self, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        self.cancels.append(body)
        ids = body.get("ids") or [
            i for i in self.rollouts if i.startswith(body.get("prefix") or "\0")
        ]
        if body.get("all"):
            ids = list(self.rollouts)
        dispositions = {}
        for rid in ids:
            rollout = self.rollouts.get(rid)
            if rollout is None or rollout.status in FINAL or rollout.task is None:
                dispositions[rid] = "not_found"
                continue
            rollout.task.cancel()
            self.cancelled_running.append(rid)
            dispositions[rid] = "cancelled_running"
        return 200, {"dispositions": dispositions}, {}


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


async def _answer(send: Send, code: int, body: Any, extra: dict[str, str] | None = None) -> None:
    raw = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": code, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


def listening_socket(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """Serve an ASGI ``app`` with uvicorn on a free loopback port, in a thread; yield its URL."""
    sock = listening_socket()
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workflow", required=True)
    parser.add_argument("--grader")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--artifacts", type=Path)
    args = parser.parse_args()
    backend = LocalBackend(workflow=args.workflow, grader=args.grader, artifact_root=args.artifacts)
    sock = listening_socket(args.port)
    print("listening", flush=True)
    uvicorn.Server(uvicorn.Config(ProtocolServer(backend), log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
