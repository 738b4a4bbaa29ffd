"""``osmosis-run serve``: a real subprocess on loopback, real SIGINT and SIGTERM, and every
error before listening as one line with exit code 2."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import subprocess_env
from serving import LEASE, free_port

from osmosis_run.server.settings import resolve_serve_settings

INIT = {
    "initial_messages": [{"role": "user", "content": "hi"}],
    "chat_completions_url": "http://127.0.0.1:9/v1",
    "label": "HI",
}


class Process:
    """A running ``osmosis-run serve``, its port and what it printed so far."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "osmosis_run", "serve", "--port", str(self.port), *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.first_lines = [self.proc.stderr.readline() for _ in range(2)]  # type: ignore[union-attr]

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> tuple[int, str]:
        self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, err


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Process]]:
    started: list[Process] = []

    def start(*args: str, **env: str) -> Process:
        process = Process(list(args), tmp_path, subprocess_env(**env))
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait()


def _poll_to_end(client: httpx.Client, rollout_id: str, token: str) -> dict[str, Any]:
    while True:
        body: dict[str, Any] = client.get(
            f"/rollout/{rollout_id}/result", headers={LEASE: token}
        ).json()
        if body["status"] in ("success", "failure", "cancelled"):
            return body


def test_serve_listens_records_and_stops_on_sigint(
    serve: Callable[..., Process], tmp_path: Path
) -> None:
    out = tmp_path / "served"
    process = serve("-w", "server_flows:Upper", "-g", "server_flows:Exact", "--out", str(out))
    assert process.first_lines == [
        f"osmosis-run serve: listening on {process.url}\n",
        f"osmosis-run serve: recording to {out}\n",
    ]
    with httpx.Client(base_url=process.url) as client:
        response = client.post("/rollout", json={**INIT, "rollout_id": "one"})
        assert response.status_code == 202
        body = _poll_to_end(client, "one", response.json()["polling_lease_token"])
    assert body["status"] == "success"
    assert body["sample"]["reward"] == 1.0
    code, err = process.stop(signal.SIGINT)
    assert code == 0
    assert err.splitlines() == [
        "osmosis-run serve: stopping: admissions closed, draining 0 rollout(s) in flight",
        f"osmosis-run serve: stopped; 1 rollout(s) recorded in {out}",
    ]
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [(x["rollout_id"], x["status"], x["reward"]) for x in lines] == [("one", "success", 1.0)]
    assert json.loads((out / "summary.json").read_text())["rollouts"] == 1


@pytest.mark.slow
def test_sigterm_drains_rollouts_in_flight_then_exits_0(
    serve: Callable[..., Process], tmp_path: Path
) -> None:
    out = tmp_path / "drained"
    process = serve(
        "-w", "server_flows:Upper", "-g", "server_flows:Exact", "--out", str(out), "-c", "8"
    )
    with httpx.Client(base_url=process.url) as client:
        for i in range(5):
            body = {**INIT, "rollout_id": f"in-flight-{i}", "metadata": {"sleep": 1.0}}
            assert client.post("/rollout", json=body).status_code == 202
        time.sleep(0.2)
        assert client.get("/health").json()["lifecycle"]["active_rollouts"] == 5
    code, err = process.stop(signal.SIGTERM)
    assert code == 0
    assert err.splitlines()[0] == (
        "osmosis-run serve: stopping: admissions closed, draining 5 rollout(s) in flight"
    )
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((x["rollout_id"], x["status"]) for x in lines) == [
        (f"in-flight-{i}", "success") for i in range(5)
    ]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{process.url}/health")


@pytest.mark.slow
def test_a_call_left_in_a_thread_does_not_hold_the_stopped_server(
    serve: Callable[..., Process], tmp_path: Path
) -> None:
    out = tmp_path / "left"
    process = serve("-w", "server_flows:InThread", "--out", str(out))
    with httpx.Client(base_url=process.url) as client:
        assert client.post("/rollout", json={**INIT, "rollout_id": "stuck"}).status_code == 202
        time.sleep(0.2)
    code, err = process.stop(signal.SIGTERM)  # drains 10 s, then cancels; the thread sleeps on
    assert code == 0, err
    assert err.splitlines()[1:] == [
        "osmosis-run serve: 1 blocking call was still running in worker threads "
        "(asyncio.to_thread) after their rollouts were cancelled; not waiting for them",
        f"osmosis-run serve: stopped; 1 rollout(s) recorded in {out}",
    ]
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [(x["rollout_id"], x["status"]) for x in lines] == [("stuck", "failure")]


def test_serve_needs_the_bearer_key_from_the_environment(
    serve: Callable[..., Process], tmp_path: Path
) -> None:
    process = serve(
        "-w",
        "server_flows:Upper",
        "--out",
        str(tmp_path / "k"),
        OSMOSIS_ROLLOUT_API_KEY="k-123456789",
    )
    with httpx.Client(base_url=process.url) as client:
        assert client.get("/health").status_code == 401
        ok = client.get("/health", headers={"Authorization": "Bearer k-123456789"})
        assert ok.status_code == 200
        # The default concurrency is the workflow config's limit, else 4.
        assert ok.json()["concurrency"]["max_concurrent"] == 4
    assert process.stop()[0] == 0


def test_a_taken_port_is_one_line_and_exit_2(cli: Callable[..., Any], tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli("serve", "-w", "server_flows:Upper", "--port", str(port), "--out", "r")
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: cannot listen on http://127.0.0.1:{port}: the address is already in use; "
        "stop what listens there or choose --port\n"
    )
    assert not (tmp_path / "r").exists()  # nothing recorded: nothing was served


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["-w", "server_flows:Nope"],
            'error: cannot import "server_flows:Nope": "server_flows" has no attribute "Nope"\n',
        ),
        ([], "error: no workflow: give --workflow module:Class\n"),
        (
            ["-w", "server_flows:Upper", "--lease", "10", "--result-wait", "30"],
            "error: polling_lease_timeout_sec must exceed result_wait_timeout_sec\n",
        ),
        (
            ["-w", "server_flows:Upper", "--concurrency", "-3"],
            "error: --concurrency (command line): must be a whole number of rollouts (1 or more), "
            "or 0 or \"unlimited\" for no limit (got '-3')\n",
        ),
        (
            ["-w", "server_flows:Upper", "--port", "70000"],
            "error: --port (command line): Input should be less than or equal to 65535 "
            "(got 70000)\n",
        ),
    ],
)
def test_errors_before_listening_are_one_line_and_exit_2(
    cli: Callable[..., Any], args: list[str], message: str
) -> None:
    result = cli("serve", *args, "--out", "r")
    assert result.exit_code == 2
    assert result.stderr == message


def test_a_run_directory_of_another_workflow_is_refused(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "fingerprint.json").write_text('{"served": true, "workflow": "x:Y"}')
    result = cli("serve", "-w", "server_flows:Upper", "--port", str(free_port()), "--out", "r")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: r holds a run made with other inputs (changed: ")
    assert result.stderr.endswith("); choose another --out\n")


def test_the_serve_table_of_the_config_file_and_its_precedence(tmp_path: Path) -> None:
    config = tmp_path / "eval.toml"
    config.write_text(
        'workflow = "server_flows:Upper"\n'
        "[serve]\n"
        'host = "0.0.0.0"\nport = 9001\nresult_wait = 5\nlease = 50\nretention = 60\n'
        'concurrency = 16\nout = "served"\n'
    )
    from_file = resolve_serve_settings({}, config_file=config, environ={})
    assert (from_file.host, from_file.port, from_file.result_wait, from_file.lease) == (
        "0.0.0.0",
        9001,
        5.0,
        50.0,
    )
    assert (from_file.retention, from_file.limit(), from_file.out) == (
        60.0,
        16,
        str(tmp_path / "served"),
    )
    env = {"_OSMOSIS_ROLLOUT_PORT": "9002", "OSMOSIS_ROLLOUT_API_KEY": "from-env-key"}
    from_env = resolve_serve_settings({}, config_file=config, environ=env)
    assert (from_env.port, from_env.api_key_value()) == (9002, "from-env-key")
    from_cli = resolve_serve_settings(
        {"port": 9003, "api_key": "from-cli-key", "concurrency": "unlimited"},
        config_file=config,
        environ=env,
    )
    assert (from_cli.port, from_cli.api_key_value(), from_cli.limit()) == (9003, "from-cli-key", 0)
    defaults = resolve_serve_settings({}, environ={})
    assert (defaults.host, defaults.port, defaults.limit(), defaults.out) == (
        "127.0.0.1",
        8000,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'api_key = "x"',
            "serve.api_key is never read from a file; use --api-key or OSMOSIS_ROLLOUT_API_KEY",
        ),
        (
            "bogus = 1",
            'unknown key "serve.bogus"; known: host, port, result_wait, lease, retention, concurrency, out, keep_alive, workers, max_worker_memory, worker_recycle, chat_completions_url, model, token_price, no_record_calls, model_retries, max_model_connections, rpm, tpm, model_cache, model_cache_mode, no_preflight, gateway_host',
        ),
    ],
)
def test_a_bad_serve_table_is_one_line(
    cli: Callable[..., Any], tmp_path: Path, table: str, message: str
) -> None:
    (tmp_path / "eval.toml").write_text(f'workflow = "server_flows:Upper"\n[serve]\n{table}\n')
    result = cli("serve", "--config", "eval.toml")
    assert result.exit_code == 2
    assert result.stderr == f"error: eval.toml: {message}\n"


def test_a_bad_port_in_the_environment_names_the_variable(cli: Callable[..., Any]) -> None:
    os.environ["_OSMOSIS_ROLLOUT_PORT"] = "eighty"
    try:
        result = cli("serve", "-w", "server_flows:Upper")
    finally:
        del os.environ["_OSMOSIS_ROLLOUT_PORT"]
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --port (_OSMOSIS_ROLLOUT_PORT): Input should be a valid integer, unable to "
        "parse string as an integer (got 'eighty')\n"
    )


def test_eval_reads_a_config_file_with_a_serve_table(tmp_path: Path) -> None:
    from osmosis_run.run.settings import load_config_file

    config = tmp_path / "eval.toml"
    config.write_text('workflow = "server_flows:Upper"\n[serve]\nport = 9001\n')
    assert load_config_file(config)["workflow"] == "server_flows:Upper"


def test_import_and_help_do_not_load_the_web_stack() -> None:
    code = (
        "import sys, osmosis_run, osmosis_run.server, osmosis_run.cli\n"
        "from osmosis_run.cli import app\n"
        "from typer.testing import CliRunner\n"
        "CliRunner().invoke(app, ['--help']); CliRunner().invoke(app, ['serve', '--help'])\n"
        "loaded = sorted(m for m in ('starlette', 'uvicorn', 'fastapi', 'anyio') if m in sys.modules)\n"
        "print(loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        check=True,
    )
    assert out.stdout == "[]\n"
