"""``osmosis-run serve`` and the model gateway (the two fronts of http/listener.py) refuse every
raw request that both h11 and httptools refuse.

The cases of tests/http_cases.py go to three listeners: uvicorn with its h11 protocol and with
its httptools protocol (in this process, a trivial app behind them), and a real
``osmosis-run serve``. What both of uvicorn's refuse (a 4xx and a close, or a close with no
answer), serve refuses too, with a 4xx and a one-line JSON reason; and serve does with each
case what the table says a careful server does (it is stricter than either in places: obs-fold,
bare LF, two Content-Lengths, both framings at once, a chunked HTTP/1.0 request).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fake_upstream import serve_upstream
from http_cases import CASES, REFUSED, Case, Outcome, Target, outcome
from serving import serve_app
from test_gateway import UPSTREAM_KEY, running
from test_gateway_hostile import chat_target
from test_serve_hostile_http import Serve, serving

Address = tuple[str, int]


async def _trivial(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Read the whole body, answer 200 "ok"."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(scope="module")
def uvicorns() -> Iterator[dict[str, Address]]:
    """uvicorn on h11 and on httptools, each on a free loopback port."""
    with (
        serve_app(_trivial, http="h11", lifespan="off", log_level="critical") as h11,
        serve_app(_trivial, http="httptools", lifespan="off", log_level="critical") as httptools,
    ):
        yield {"h11": _address(h11.url), "httptools": _address(httptools.url)}


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    with serving(tmp_path_factory.mktemp("differential")) as served:
        yield served


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Address, Target]]:
    """The model gateway's listener, and its chat route as the raw requests address it."""
    with (
        serve_upstream(api_key=UPSTREAM_KEY) as upstream,
        running(upstream, tmp_path_factory.mktemp("gateway")) as model_gateway,
    ):
        yield _address(model_gateway.url), chat_target(model_gateway)


def _address(url: str) -> Address:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _refused_by_reference(result: Outcome) -> bool:
    return result.kind in (REFUSED, "dropped")


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_serve_refuses_what_h11_and_httptools_both_refuse(
    case: Case, uvicorns: dict[str, Address], serve: Serve
) -> None:
    references = {
        name: outcome(address, case.request(Target())) for name, address in uvicorns.items()
    }
    served = outcome(serve.address, case.request(Target()))
    seen = {name: result.kind for name, result in {**references, "serve": served}.items()}
    if all(_refused_by_reference(result) for result in references.values()):
        assert served.kind == REFUSED, seen
    assert served.kind == case.expected, seen
    if served.kind == REFUSED:
        body = json.loads(served.body)
        assert list(body) == ["detail"], served.body
        assert b"\n" not in served.body


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_gateway_refuses_what_h11_and_httptools_both_refuse(
    case: Case, uvicorns: dict[str, Address], gateway: tuple[Address, Target]
) -> None:
    address, target = gateway
    references = {name: outcome(where, case.request(Target())) for name, where in uvicorns.items()}
    listened = outcome(address, case.request(target))
    seen = {name: result.kind for name, result in {**references, "gateway": listened}.items()}
    if all(_refused_by_reference(result) for result in references.values()):
        assert listened.kind == REFUSED, seen
        error = json.loads(listened.body)["error"]
        assert error["type"] == "osmosis_run_gateway"
        assert "\n" not in error["message"]
