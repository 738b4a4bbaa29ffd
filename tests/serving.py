"""Serve an app on loopback with a real uvicorn, in a thread, for the server tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from osmosis_run import LocalBackend
from osmosis_run.server import create_rollout_server

LEASE = "X-Osmosis-Rollout-Lease"
# uvicorn's HTTP protocol for these servers: its own by default; tests/test_listener.py
# runs the protocol tests again on osmosis-run serve's (http/listener.py).
HTTP: Any = "auto"


@dataclass
class Served:
    """A running server: its URL, a client on it, its service and run directory."""

    url: str
    client: httpx.Client
    app: Any
    server: uvicorn.Server

    @property
    def service(self) -> Any:
        return self.app.state.rollouts

    @property
    def run_dir(self) -> Path:
        return Path(self.service.run_dir)

    def post(self, rollout_id: str, content: str = "hi", **fields: Any) -> httpx.Response:
        body = {
            "initial_messages": [{"role": "user", "content": content}],
            "rollout_id": rollout_id,
            "chat_completions_url": "http://127.0.0.1:9/v1",
            **fields,
        }
        return self.client.post("/rollout", json=body)

    def admit(self, rollout_id: str, content: str = "hi", **fields: Any) -> str:
        response = self.post(rollout_id, content, **fields)
        assert response.status_code == 202, response.text
        token: str = response.json()["polling_lease_token"]
        return token

    def poll(self, rollout_id: str, token: str) -> httpx.Response:
        return self.client.get(f"/rollout/{rollout_id}/result", headers={LEASE: token})

    def result(self, rollout_id: str, token: str, *, within: float = 10.0) -> dict[str, Any]:
        """Poll until the result is final."""
        deadline = time.monotonic() + within
        while True:
            body: dict[str, Any] = self.poll(rollout_id, token).json()
            if body["status"] in ("success", "failure", "cancelled"):
                return body
            assert time.monotonic() < deadline, body


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def serve_app(
    app: Any, *, headers: dict[str, str] | None = None, **uvicorn_options: Any
) -> Iterator[Served]:
    """Run ``app`` under uvicorn on a free loopback port until the block ends."""
    port = free_port()
    options: dict[str, Any] = {"log_level": "warning", "lifespan": "on", "http": HTTP}
    config = uvicorn.Config(app, host="127.0.0.1", port=port, **{**options, **uvicorn_options})
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "uvicorn did not start"
        assert time.monotonic() < deadline, "uvicorn did not start in time"
        time.sleep(0.01)
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        try:
            yield Served(url, client, app, server)
        finally:
            server.should_exit = True
            thread.join(60)


@contextlib.contextmanager
def serving(
    tmp_path: Path,
    *,
    workflow: Any = "server_flows:Upper",
    grader: Any = "server_flows:Exact",
    workflow_config: Any = None,
    headers: dict[str, str] | None = None,
    **options: Any,
) -> Iterator[Served]:
    """Serve the test flows, recording into ``tmp_path/run``."""
    backend = LocalBackend(workflow=workflow, grader=grader, workflow_config=workflow_config)
    options.setdefault("out", tmp_path / "run")
    app = create_rollout_server(backend=backend, configure_logging=False, **options)
    with serve_app(app, headers=headers) as served:
        yield served
