"""``osmosis-run serve --chat-completions-url``: the server runs the model gateway for the
rollouts it serves (a real ``osmosis-run serve`` subprocess on loopback, the real ``openai``
client in the workflow, the fake upstream), and without it rollouts keep their caller's URL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import Result
from conftest import subprocess_env, write_jsonl
from fake_upstream import Upstream, serve_upstream
from serving import LEASE, free_port

from osmosis_run.results.records import ResultLine
from osmosis_run.server.settings import resolve_serve_settings

UPSTREAM_KEY = "sk-upstream-secret-0123456789"
CALLER_KEY = "sk-caller-secret-0123456789"
SERVER_KEY = "server-bearer-0123456789"
DEAD = "http://127.0.0.1:9/v1"  # what callers send: nothing listens there
OPENAI = ("-w", "gateway_flows:OpenAIWorkflow", "-g", "server_flows:Always")

Cli = Callable[..., Result]


class Process:
    """A running ``osmosis-run serve``, its URL and the first lines it printed."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str], lines: int) -> None:
        port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "osmosis_run", "serve", "--port", str(port), *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url = f"http://127.0.0.1:{port}"
        assert self.proc.stderr is not None
        self.first_lines = [self.proc.stderr.readline() for _ in range(lines)]

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, err


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Process]]:
    started: list[Process] = []

    def start(*args: str, lines: int = 3, **env: str) -> Process:
        process = Process(list(args), tmp_path, subprocess_env(**env), lines)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait()


@pytest.fixture
def up() -> Iterator[Upstream]:
    with serve_upstream(api_key=UPSTREAM_KEY) as upstream:
        yield upstream


def _rollouts(url: str, ids: list[str], *, headers: dict[str, str] | None = None) -> list[Any]:
    """Admit these rollouts at once (each naming the dead URL and the caller's key), then poll
    each to its end."""
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        tokens = {}
        for rollout_id in ids:
            body = {
                "rollout_id": rollout_id,
                "initial_messages": [{"role": "user", "content": f"hi {rollout_id}"}],
                "chat_completions_url": DEAD,
                "llm_api_key": CALLER_KEY,
            }
            response = client.post("/rollout", json=body)
            assert response.status_code == 202, response.text
            tokens[rollout_id] = response.json()["polling_lease_token"]
        return [_poll(client, rollout_id, tokens[rollout_id]) for rollout_id in ids]


def _poll(client: httpx.Client, rollout_id: str, token: str) -> Any:
    while True:
        body = client.get(f"/rollout/{rollout_id}/result", headers={LEASE: token}).json()
        if body["status"] in ("success", "failure", "cancelled"):
            return body


def _lines(out: Path) -> dict[str, ResultLine]:
    lines = [
        ResultLine.model_validate_json(x) for x in (out / "results.jsonl").read_text().splitlines()
    ]
    return {line.rollout_id: line for line in lines}


def _written(out: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())


def _gateway_line(up: Upstream) -> str:
    return (
        f"osmosis-run serve: model gateway to {up.url}: the served rollouts' model calls are "
        "counted and recorded\n"
    )


@pytest.mark.parametrize("workers", [(), ("--workers", "2")], ids=["in-process", "workers"])
@pytest.mark.slow
def test_served_rollouts_call_the_gateway_counted_recorded_and_redacted(
    serve: Callable[..., Process], up: Upstream, tmp_path: Path, workers: tuple[str, ...]
) -> None:
    """Also with the rollouts in worker processes: each is handed the gateway's URL and run
    key there."""
    out = tmp_path / "served"
    process = serve(
        *workers,
        *OPENAI,
        "--out",
        str(out),
        "--api-key",
        SERVER_KEY,
        "--chat-completions-url",
        up.url,
        "--model-api-key",
        UPSTREAM_KEY,
        "--token-price",
        "1,2",
        lines=4 if workers else 3,
    )
    said = ["osmosis-run serve: running the rollouts in 2 worker process(es)\n"]
    assert process.first_lines == [
        f"osmosis-run serve: listening on {process.url}\n",
        f"osmosis-run serve: recording to {out}\n",
        _gateway_line(up),
        *(said if workers else []),
    ]
    bodies = _rollouts(process.url, ["a", "b"], headers={"Authorization": f"Bearer {SERVER_KEY}"})
    assert [body["status"] for body in bodies] == ["success", "success"]
    code, _ = process.stop()
    assert code == 0
    # Every call went to the upstream with its key (the preflight's too), none to the dead URL.
    assert len(up.chat_requests()) == 4
    assert {seen.authorization for seen in up.requests} == {f"Bearer {UPSTREAM_KEY}"}
    lines = _lines(out)
    for rollout_id in ("a", "b"):
        usage = lines[rollout_id].usage
        assert usage is not None
        assert (usage.requests, usage.retries) == (2, 0)
        assert usage.total_tokens > 0
        assert usage.cost is not None
        assert usage.cost > 0
        calls = (out / "rollouts" / rollout_id / "model_calls.jsonl").read_text().splitlines()
        assert len(calls) == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"]["requests"] == 4
    assert summary["model"]["gateway"]["calls"] == 4
    written = _written(out)
    for secret in (UPSTREAM_KEY, CALLER_KEY, SERVER_KEY, "osr-"):
        assert secret not in written


def test_a_rollout_is_handed_the_gateway_and_its_run_key_from_the_environment(
    serve: Callable[..., Process], up: Upstream, tmp_path: Path
) -> None:
    out = tmp_path / "env"
    process = serve(
        "-w",
        "gateway_flows:KeyReporter",
        "--out",
        str(out),
        OSMOSIS_CHAT_COMPLETIONS_URL=up.url,
        OSMOSIS_API_KEY=UPSTREAM_KEY,
    )
    assert process.first_lines[2] == _gateway_line(up)
    (body,) = _rollouts(process.url, ["k"])
    url, key = body["sample"]["messages"][-1]["content"].split(" ")
    assert url.startswith("http://127.0.0.1:")
    assert url.endswith("/v1/rollouts/k")
    assert key.startswith("osr-")  # the run's key: neither the caller's nor the upstream's
    assert process.stop()[0] == 0
    assert up.chat_requests() == []  # it made no call; the preflight did
    line = _lines(out)["k"]
    assert line.usage is not None
    assert line.usage.requests == 0
    written = _written(out)
    assert key not in written
    assert UPSTREAM_KEY not in written
    assert url in written


def test_without_an_endpoint_a_rollout_keeps_the_url_its_caller_sent(
    serve: Callable[..., Process], tmp_path: Path
) -> None:
    out = tmp_path / "direct"
    process = serve("-w", "gateway_flows:KeyReporter", "--out", str(out), lines=2)
    (body,) = _rollouts(process.url, ["d"])
    assert body["sample"]["messages"][-1]["content"] == f"{DEAD} {CALLER_KEY}"
    code, err = process.stop()
    assert code == 0
    assert "gateway" not in "".join(process.first_lines) + err
    line = _lines(out)["d"]
    assert line.usage is None
    assert not (out / "rollouts" / "d" / "model_calls.jsonl").exists()
    assert CALLER_KEY not in _written(out)


@pytest.mark.slow
def test_rpm_paces_the_served_rollouts_calls(
    serve: Callable[..., Process], up: Upstream, tmp_path: Path
) -> None:
    # 60 a minute: a burst of 5 (5 seconds' worth), then one a second: the sixth call waits.
    process = serve(
        *OPENAI,
        "--out",
        str(tmp_path / "paced"),
        "--chat-completions-url",
        up.url,
        "--model-api-key",
        UPSTREAM_KEY,
        "--rpm",
        "60",
    )
    bodies = _rollouts(process.url, ["p0", "p1", "p2"])
    assert [body["status"] for body in bodies] == ["success"] * 3
    assert process.stop()[0] == 0
    calls = up.chat_requests()
    assert len(calls) == 6
    assert calls[5].at - calls[0].at >= 0.9
    assert calls[4].at - calls[0].at < 0.9


def test_the_model_cache_replays_a_served_rollouts_calls(
    serve: Callable[..., Process], up: Upstream, tmp_path: Path
) -> None:
    out = tmp_path / "cached"
    process = serve(
        *OPENAI,
        "--out",
        str(out),
        "--chat-completions-url",
        up.url,
        "--model-api-key",
        UPSTREAM_KEY,
        "--model-cache",
        "cache.sqlite",
    )
    with httpx.Client(base_url=process.url, timeout=30) as client:
        for rollout_id in ("first", "again"):  # the same conversation, one after the other
            body = {
                "rollout_id": rollout_id,
                "initial_messages": [{"role": "user", "content": "same question"}],
                "chat_completions_url": DEAD,
            }
            token = client.post("/rollout", json=body).json()["polling_lease_token"]
            assert _poll(client, rollout_id, token)["status"] == "success"
    assert process.stop()[0] == 0
    assert len(up.chat_requests()) == 2  # the second rollout's two calls were replayed
    assert (tmp_path / "cache.sqlite").exists()
    cache = json.loads((out / "summary.json").read_text())["model"]["gateway"]["cache"]
    assert (cache["hits"], cache["misses"], cache["stored"]) == (2, 2, 2)
    usage = _lines(out)["again"].usage
    assert usage is not None
    assert usage.requests == 2


def test_eval_on_a_server_with_a_gateway_the_server_counting(
    serve: Callable[..., Process], up: Upstream, cli: Cli, tmp_path: Path
) -> None:
    served = tmp_path / "served"
    process = serve(
        *OPENAI,
        "--out",
        str(served),
        "--chat-completions-url",
        up.url,
        "--model-api-key",
        UPSTREAM_KEY,
    )
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [{"id": f"r{i}", "prompt": "q", "ground_truth": "a"} for i in range(2)],
    )
    done = cli("eval", str(data), "--server", process.url, "--out", "there")
    assert done.exit_code == 0, done.stderr
    assert process.stop()[0] == 0
    assert {line.status for line in _lines(tmp_path / "there").values()} == {"success"}
    here = _lines(served)
    assert sorted(here) == ["r0.s0", "r1.s0"]
    assert [line.usage.requests if line.usage else None for line in here.values()] == [2, 2]
    assert len(up.chat_requests()) == 4


# --- refused before anything is served ----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--rpm", "60"],
            "error: --rpm needs the model gateway, but there is no model endpoint "
            "(--chat-completions-url)\n",
        ),
        (
            ["--model-api-key", "k", "--model", "m", "--no-preflight"],
            "error: --model-api-key and --model and --no-preflight need the model gateway, but "
            "there is no model endpoint (--chat-completions-url)\n",
        ),
        (
            ["--chat-completions-url", DEAD, "--rpm", "-1"],
            "error: --rpm (command line): Input should be greater than 0 (got -1.0)\n",
        ),
        (
            ["--chat-completions-url", DEAD, "--token-price", "cheap"],
            "error: --token-price (command line): expected PROMPT,COMPLETION: two prices in USD "
            "per million tokens, such as 2.5,10 (got 'cheap')\n",
        ),
        (
            ["--chat-completions-url", DEAD, "--model-cache-mode", "sometimes"],
            "error: --model-cache-mode (command line): Input should be 'read-write', "
            "'read-only' or 'refresh' (got 'sometimes')\n",
        ),
    ],
)
def test_bad_gateway_options_are_one_line_and_exit_2(
    cli: Cli, tmp_path: Path, args: list[str], message: str
) -> None:
    result = cli("serve", "-w", "server_flows:Upper", "--out", "r", *args)
    assert (result.exit_code, result.stderr) == (2, message)
    assert not (tmp_path / "r").exists()


def test_the_serve_table_takes_gateway_options_but_never_the_model_key(
    cli: Cli, tmp_path: Path
) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('[serve]\nrpm = 60\nmodel_cache = "c.sqlite"\n')
    result = cli("serve", "--config", str(config), "-w", "server_flows:Upper", "--out", "r")
    assert (result.exit_code, result.stderr) == (
        2,
        "error: --rpm and --model-cache need the model gateway, but there is no model endpoint "
        "(--chat-completions-url)\n",
    )
    config.write_text('[serve]\nmodel_api_key = "sk-in-a-file"\n')
    result = cli("serve", "--config", str(config), "-w", "server_flows:Upper", "--out", "r")
    assert (result.exit_code, result.stderr) == (
        2,
        f"error: {config}: serve.model_api_key is never read from a file; use --model-api-key "
        "or OSMOSIS_API_KEY\n",
    )
    assert not (tmp_path / "r").exists()


def test_a_failed_preflight_is_one_line_and_exit_2_before_listening(
    cli: Cli, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    port = free_port()
    result = cli(
        "serve", "-w", "server_flows:Upper", "--out", "r", "--port", str(port),
        "--chat-completions-url", dead,
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr == PREFLIGHT.format(url=dead)
    assert not (tmp_path / "r").exists()


PREFLIGHT = (
    "error: model endpoint {url}: cannot connect (connection refused); is the server running? "
    "Check --chat-completions-url, or pass --no-preflight to skip this check\n"
)


def test_where_the_gateway_settings_come_from(tmp_path: Path) -> None:
    config = tmp_path / "conf" / "serve.toml"
    config.parent.mkdir()
    config.write_text('[serve]\nchat_completions_url = "http://file/v1"\nmodel_cache = "c.db"\n')
    environ = {"OSMOSIS_CHAT_COMPLETIONS_URL": "http://env/v1", "OSMOSIS_API_KEY": "sk-env"}
    from_file = resolve_serve_settings({}, config_file=config, environ={})
    assert from_file.chat_completions_url == "http://file/v1"
    assert from_file.gateway.model_cache == str(tmp_path / "conf" / "c.db")  # beside the file
    from_env = resolve_serve_settings({"rpm": 60.0}, config_file=config, environ=environ)
    assert (from_env.chat_completions_url, from_env.model_api_key_value()) == (
        "http://env/v1",
        "sk-env",
    )
    assert from_env.gateway.rpm == 60.0
    given = {"chat_completions_url": "http://cli/v1", "model_api_key": "sk-cli"}
    from_cli = resolve_serve_settings(given, environ=environ)
    assert (from_cli.chat_completions_url, from_cli.model_api_key_value()) == (
        "http://cli/v1",
        "sk-cli",
    )
    assert "sk-cli" not in repr(from_cli)
    # OSMOSIS_API_KEY alone (eval's, in the environment) is no error and no gateway.
    alone = resolve_serve_settings({}, environ={"OSMOSIS_API_KEY": "sk-env"})
    assert alone.chat_completions_url is None
