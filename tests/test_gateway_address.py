"""Where the gateway listens and what address rollouts are given (``gateway/setup.py``).

In-process rollouts reach it on loopback; a Ray cluster or a rollout server on another machine
gets this machine's address toward it; ``--gateway-host`` says it outright. The end-to-end runs
here bind other loopback addresses (127.0.0.2: all of 127/8 is this machine's); the runs across
two hosts are in tests/test_ray_hosts.py and tests/test_server_hosts.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import results, write_jsonl
from fake_upstream import Upstream, serve_upstream
from typer.testing import Result

from osmosis_run.errors import ConfigError
from osmosis_run.gateway import setup
from osmosis_run.gateway.host import url_host
from osmosis_run.run.settings import EvalSettings

Cli = Callable[..., Result]
KEY = "sk-upstream-SECRET-abcdef0123"


@pytest.fixture
def routed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """route_from answers 10.9.8.7 (no interface needed) and records whom it was asked about."""
    asked: list[str] = []

    def route_from(host: str) -> str:
        asked.append(host)
        return "10.9.8.7"

    monkeypatch.setattr(setup, "route_from", route_from)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return asked


@pytest.mark.parametrize(
    ("options", "expected", "asked"),
    [
        ({}, ("127.0.0.1", "127.0.0.1"), []),
        ({"backend": "ray"}, ("127.0.0.1", "127.0.0.1"), []),  # a local cluster
        ({"backend": "ray", "ray_address": "auto"}, ("127.0.0.1", "127.0.0.1"), []),
        ({"backend": "ray", "ray_address": "127.0.0.1:6379"}, ("127.0.0.1", "127.0.0.1"), []),
        ({"backend": "ray", "ray_address": "10.0.0.1:6379"}, ("10.9.8.7", "10.9.8.7"), ["10.0.0.1"]),
        ({"backend": "ray", "ray_address": "ray://head:10001"}, ("10.9.8.7", "10.9.8.7"), ["head"]),
        ({"server": "http://127.0.0.1:8000"}, ("127.0.0.1", "127.0.0.1"), []),
        ({"server": "http://localhost:8000"}, ("127.0.0.1", "127.0.0.1"), []),
        ({"server": "http://10.0.0.2:8000/x"}, ("10.9.8.7", "10.9.8.7"), ["10.0.0.2"]),
        ({"server": "http://[fd00::2]:8000"}, ("10.9.8.7", "10.9.8.7"), ["fd00::2"]),
        ({"gateway_host": "192.0.2.5", "server": "http://10.0.0.2:8000"}, ("192.0.2.5",) * 2, []),
        ({"gateway_host": "0.0.0.0", "server": "http://10.0.0.2:8000"}, ("0.0.0.0", "10.9.8.7"), ["10.0.0.2"]),
        ({"gateway_host": "0.0.0.0"}, ("0.0.0.0", "127.0.0.1"), []),
        ({"gateway_host": "[::1]"}, ("::1", "::1"), []),
    ],
)  # fmt: skip
def test_where_the_gateway_listens(
    routed: list[str], options: dict[str, str], expected: tuple[str, str], asked: list[str]
) -> None:
    assert setup.gateway_address(EvalSettings(**options)) == expected
    assert routed == asked


def test_ray_address_comes_from_the_environment_too(
    routed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert setup.gateway_address(EvalSettings(backend="ray")) == ("10.9.8.7", "10.9.8.7")


def test_route_from_answers_this_machines_address_toward_a_host() -> None:
    assert setup.route_from("127.0.0.1") == "127.0.0.1"
    assert setup.route_from("::1") == "::1"
    with pytest.raises(ConfigError, match=r"^cannot tell this machine's address toward no\.such"):
        setup.route_from("no.such.host.invalid")


def test_a_url_holds_an_ipv6_address_in_brackets() -> None:
    assert url_host("::1") == "[::1]"
    assert url_host("10.0.0.1") == "10.0.0.1"


@pytest.fixture
def up() -> Iterator[Upstream]:
    with serve_upstream(api_key=KEY) as upstream:
        yield upstream


def test_gateway_host_is_where_rollouts_call_the_model(
    cli: Cli, up: Upstream, tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "user_prompt": "hi"}])
    result = cli(
        "eval", str(data), "-w", "gateway_flows:KeyReporter", "--chat-completions-url", up.url,
        "--api-key", KEY, "--gateway-host", "127.0.0.2", "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (line,) = results(tmp_path / "run")
    assert line.messages is not None
    url, _, key = str(line.messages[-1]["content"]).partition(" ")
    assert url.startswith("http://127.0.0.2:")
    assert "/v1/rollouts/" in url
    assert key == "[REDACTED]"  # the run's key, redacted like the provider's
    assert line.usage is not None


def test_an_address_the_gateway_cannot_bind_exits_2(cli: Cli, up: Upstream, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "user_prompt": "hi"}])
    result = cli(
        "eval", str(data), "-w", "gateway_flows:KeyReporter", "--chat-completions-url", up.url,
        "--gateway-host", "192.0.2.1", "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr == (
        "error: the model gateway cannot listen on 192.0.2.1: Cannot assign requested address; "
        "pass --gateway-host with an address of this machine\n"
    )
    assert not (tmp_path / "run" / "results.jsonl").exists()
