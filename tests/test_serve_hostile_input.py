"""``osmosis-run serve`` under hostile protocol bodies and ids, failing writes and restarts, and
the pass threshold of its config that its records follow.

Each test runs a real ``osmosis-run serve`` process on loopback (or, where a fault has to be
injected into the service, the real app under uvicorn in this process) and the real file system:
every admitted rollout ends with exactly one result and one results line, and what the run
directory cannot hold is refused at admission with a 422 naming the field.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import subprocess_env
from serving import LEASE, free_port, serving

INIT: dict[str, Any] = {
    "initial_messages": [{"role": "user", "content": "hi"}],
    "chat_completions_url": "http://127.0.0.1:9/v1",
    "label": "HI",
}
FLOWS = ("-w", "server_flows:Upper", "-g", "server_flows:Exact")


class Serve:
    """A running ``osmosis-run serve`` recording into ``out``."""

    def __init__(self, out: Path, cwd: Path, *args: str) -> None:
        self.out = out
        self.port = free_port()
        command = [sys.executable, "-m", "osmosis_run", "serve", "--port", str(self.port)]
        self.proc = subprocess.Popen(
            [*command, *FLOWS, "--out", str(out), *args],
            cwd=cwd,
            env=subprocess_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        self.first_lines = [self.proc.stderr.readline() for _ in range(2)]
        assert self.first_lines[0].startswith("osmosis-run serve: listening on"), self.first_lines
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30)

    def post(self, rollout_id: str, **fields: Any) -> httpx.Response:
        return self.client.post("/rollout", json={**INIT, "rollout_id": rollout_id, **fields})

    def raw(self, body: bytes) -> httpx.Response:
        return self.client.post(
            "/rollout", content=body, headers={"content-type": "application/json"}
        )

    def run(self, rollout_id: str, **fields: Any) -> dict[str, Any]:
        """Admit a rollout and poll it to its end."""
        response = self.post(rollout_id, **fields)
        assert response.status_code == 202, response.text
        token = response.json()["polling_lease_token"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            body: dict[str, Any] = self.client.get(
                f"/rollout/{rollout_id}/result", headers={LEASE: token}
            ).json()
            if body["status"] in ("success", "failure", "cancelled"):
                return body
        raise AssertionError(f"rollout {rollout_id} never ended")

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        self.client.close()
        self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err

    def lines(self) -> list[dict[str, Any]]:
        path = self.out / "results.jsonl"
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Serve]]:
    started: list[Serve] = []

    def start(out: Path | None = None, *args: str) -> Serve:
        server = Serve(out or tmp_path / "served", tmp_path, *args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.client.close()
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.communicate()


def test_a_rollout_id_longer_than_a_file_name_is_refused_and_recording_goes_on(
    serve: Callable[..., Serve],
) -> None:
    server = serve()
    limit = "rollout_id must be at most 255 bytes in UTF-8 (got {}): it names the rollout's directory in the run directory"
    for rollout_id, size in (("a" * 256, 256), ("é" * 128, 256), ("x" * 4000, 4000)):
        response = server.post(rollout_id)
        assert response.status_code == 422
        [error] = response.json()["detail"]
        assert (error["loc"], error["msg"]) == (
            ["body", "rollout_id"],
            "Value error, " + limit.format(size),
        )
    longest = "b" * 255  # exactly a file name's limit: admitted, and its directory made
    assert server.run(longest)["status"] == "success"
    assert server.run("after")["status"] == "success"
    code, err = server.stop()
    assert code == 0, err
    assert [(x["rollout_id"], x["status"]) for x in server.lines()] == [
        (longest, "success"),
        ("after", "success"),
    ]
    assert (server.out / "rollouts" / longest / "result.json").is_file()
    summary = json.loads((server.out / "summary.json").read_text())
    assert (summary["rollouts"], summary["complete"]) == (2, True)


def test_a_write_that_fails_stops_the_server_loudly_with_exit_4(
    serve: Callable[..., Serve],
) -> None:
    server = serve()
    rollouts = server.out / "rollouts"
    rollouts.rmdir()  # empty until a rollout starts; a file in its place fails every write
    rollouts.write_text("not a directory\n")
    server.run("doomed")
    deadline = time.monotonic() + 30
    while server.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.proc.poll() is not None, "the server went on after its writes failed"
    _, err = server.proc.communicate(timeout=30)
    assert server.proc.returncode == 4, err
    [error] = [line for line in err.splitlines() if line.startswith("osmosis-run serve: error:")]
    assert error.endswith("; stopping (exit 4)")
    assert "Not a directory" in error
    assert err.splitlines()[-1] == (
        f"osmosis-run serve: stopped; 0 rollout(s) recorded in {server.out}"
    )
    assert server.lines() == []
    summary = json.loads((server.out / "summary.json").read_text())
    assert (summary["rollouts"], summary["complete"]) == (0, False)


def test_a_rollout_that_cannot_be_recorded_is_answered_as_failed(tmp_path: Path) -> None:
    """A bug in recording (here, a store that raises) still gives the rollout its end."""
    with serving(tmp_path) as served:
        store = served.service.store

        def broken(*_args: Any, **_kwargs: Any) -> None:
            raise RuntimeError("the store broke")

        store.write_rollout = broken
        token = served.admit("r1", label="HI")
        body = served.result("r1", token)
        assert (body["status"], body["err_category"], body["err_message"]) == (
            "failure",
            "internal_error",
            "the store broke",
        )
    # The server stopped cleanly: its summary is written.
    assert (tmp_path / "run" / "summary.json").is_file()


SURROGATES: list[tuple[dict[str, Any], list[Any], str]] = [
    (
        {"label": "\ud800"},
        ["body", "label"],
        "label holds a lone surrogate (\\ud800); text must be valid Unicode",
    ),
    (
        {"initial_messages": [{"role": "user", "content": "a\udfffb"}]},
        ["body", "initial_messages", 0, "content"],
        "initial_messages[0].content holds a lone surrogate (\\udfff); text must be valid Unicode",
    ),
    (
        {"metadata": {"k\ud83d": 1}},
        ["body", "metadata"],
        "metadata has a key that holds a lone surrogate (\\ud83d); text must be valid Unicode",
    ),
    (
        {"extra_fields": {"a": ["x", "\udc80"]}},
        ["body", "extra_fields", "a", 1],
        "extra_fields.a[1] holds a lone surrogate (\\udc80); text must be valid Unicode",
    ),
    (
        {"rollout_id": "r\ud800"},
        ["body", "rollout_id"],
        "rollout_id holds a lone surrogate (\\ud800); text must be valid Unicode",
    ),
]


def test_a_lone_surrogate_in_any_field_is_refused_naming_it(
    serve: Callable[..., Serve],
) -> None:
    server = serve()
    for fields, loc, message in SURROGATES:
        body = json.dumps({**INIT, "rollout_id": "s", **fields}).encode()  # \\uXXXX escapes
        response = server.raw(body)
        assert response.status_code == 422, body
        assert response.json() == {
            "detail": [{"type": "string_unicode", "loc": loc, "msg": message, "input": None}]
        }
    assert server.run("fine")["status"] == "success"  # nothing of the refusals is held
    code, err = server.stop(signal.SIGTERM)
    assert code == 0, err
    assert "Application shutdown failed" not in err
    assert [x["rollout_id"] for x in server.lines()] == ["fine"]
    assert json.loads((server.out / "summary.json").read_text())["complete"] is True


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


BAD_JSON = [
    (
        '"metadata": {"x": NaN}',
        ["body", "metadata", "x"],
        "finite_number",
        "metadata.x is not a finite number (nan); send a finite number, null or a string",
    ),
    (
        '"metadata": {"x": [1, -Infinity]}',
        ["body", "metadata", "x", 1],
        "finite_number",
        "metadata.x[1] is not a finite number (-inf); send a finite number, null or a string",
    ),
    (
        '"extra_fields": {"big": 1e999}',
        ["body", "extra_fields", "big"],
        "finite_number",
        "extra_fields.big is not a finite number (inf); send a finite number, null or a string",
    ),
    (
        f'"metadata": {_nested(5000)}',
        ["body", 0],
        "json_invalid",
        "nested deeper than 64 levels of objects and arrays",
    ),
    (
        f'"metadata": {_nested(100)}',
        ["body", "metadata"],
        "too_deep",
        "metadata is nested deeper than 64 levels of objects and arrays; flatten it or send it as a string",
    ),
    (
        '"metadata": {"n": ' + "7" * 5000 + "}",
        ["body", 0],
        "json_invalid",
        "a number is too long (more than 4300 digits); send it as a string",
    ),
]


def test_json_a_run_directory_cannot_hold_is_refused_naming_the_field(
    serve: Callable[..., Serve],
) -> None:
    server = serve()
    base = json.dumps({**INIT, "rollout_id": "j"})[:-1]
    for fragment, loc, kind, message in BAD_JSON:
        response = server.raw(f"{base}, {fragment}}}".encode())
        assert response.status_code == 422, fragment[:40]
        [error] = response.json()["detail"]
        assert (error["loc"], error["type"]) == (loc, kind)
        assert error.get("ctx", {}).get("error", error["msg"]) == message
    deep = ("[" * 100_000 + "]" * 100_000).encode()  # deeper than the stack
    response = server.raw(deep)
    assert response.status_code == 422
    assert response.json()["detail"][0]["ctx"]["error"] == (
        "nested deeper than 64 levels of objects and arrays"
    )
    assert server.run("fine", metadata={"x": 1.5, "deep": _nested(3)})["status"] == "success"
    code, err = server.stop()
    assert code == 0, err
    assert [x["rollout_id"] for x in server.lines()] == ["fine"]


@pytest.mark.slow
def test_a_restarted_server_knows_what_its_run_directory_recorded(
    serve: Callable[..., Serve], tmp_path: Path
) -> None:
    out = tmp_path / "kept"
    first = serve(out)
    assert first.run("a")["status"] == "success"
    assert first.run("b", label="nope")["status"] == "success"
    deadline = time.monotonic() + 10
    while len(first.lines()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    first.stop(signal.SIGKILL)

    second = serve(out)
    for rollout_id in ("a", "b"):
        response = second.post(rollout_id)
        assert (response.status_code, response.json()) == (
            409,
            {"detail": "rollout_id is already recorded in this server's run directory"},
        )
    assert second.run("c")["status"] == "success"
    code, err = second.stop(signal.SIGINT)
    assert code == 0, err
    assert err.splitlines()[-1] == f"osmosis-run serve: stopped; 3 rollout(s) recorded in {out}"
    lines = second.lines()
    assert sorted(x["rollout_id"] for x in lines) == ["a", "b", "c"]
    assert [x["row_index"] for x in lines] == [0, 1, 2]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["rollouts"], summary["reward_all"]["mean"]) == (3, pytest.approx(2 / 3))


def test_a_served_rollout_passes_by_the_configs_pass_threshold(
    serve: Callable[..., Serve], tmp_path: Path
) -> None:
    config = tmp_path / "serve.toml"
    config.write_text("pass_threshold = 0.0\n")
    server = serve(tmp_path / "lenient", "--config", str(config))
    assert server.run("wrong", label="nope")["status"] == "success"  # reward 0.0
    code, err = server.stop()
    assert code == 0, err
    [line] = server.lines()
    assert (line["reward"], line["passed"]) == (0.0, True)
    summary = json.loads((tmp_path / "lenient" / "summary.json").read_text())
    assert summary["pass_threshold"] == 0.0
