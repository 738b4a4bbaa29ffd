"""``eval --server`` on another host: the server's rollouts call the model through eval's gateway.

``osmosis-run serve --host B`` runs in host B, ``osmosis-run eval --server http://B:PORT`` in
host A with the gateway on and no ``--gateway-host``: the gateway must listen on A's address
toward the server (not loopback), and the served rollouts' calls are counted in eval's results
lines and recorded in eval's run directory. Two network namespaces joined by a veth pair
(tests/hosts.py), the fake model on A's address.

Marked ``ray`` so that it runs in CI's Ray suite (root, ``ip netns``); no Ray cluster is used.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TESTS_DIR, write_jsonl
from hosts import FakeModel, Host, read_jsonl, two_hosts

from osmosis_run.store.layout import MODEL_CALLS

pytestmark = [pytest.mark.ray]

CALLS = 2  # gateway_flows.CALLS
PORT = 8000  # host B is a namespace of its own


@pytest.fixture
def hosts() -> Iterator[tuple[Host, Host]]:
    if os.geteuid() != 0:
        pytest.fail("the two-host tests need root (ip netns)")
    with two_hosts() as made:
        yield made


def test_a_server_on_another_host_calls_the_model_through_evals_gateway(
    hosts: tuple[Host, Host], tmp_path: Path
) -> None:
    a, b = hosts
    shutil.copy(TESTS_DIR / "gateway_flows.py", tmp_path / "gateway_flows.py")
    n, out = 8, tmp_path / "run"
    data = write_jsonl(
        tmp_path / "d.jsonl", [{"id": f"q{i}", "user_prompt": f"q {i}"} for i in range(n)]
    )
    serve = [sys.executable, "-m", "osmosis_run", "serve", "-w", "gateway_flows:OpenAIWorkflow",
             "--host", b.ip, "--port", str(PORT), "--out", str(tmp_path / "served")]  # fmt: skip
    with FakeModel(a) as model, b.started(serve, cwd=tmp_path) as server:
        assert server.stderr is not None
        said = [server.stderr.readline() for _ in range(1)]
        assert said[-1].strip() == f"osmosis-run serve: listening on http://{b.ip}:{PORT}", said
        done = a.run(
            [sys.executable, "-m", "osmosis_run", "eval", str(data), "--server",
             f"http://{b.ip}:{PORT}", "--chat-completions-url", model.url, "--api-key",
             "sk-upstream-0123456789", "--out", str(out)],
            cwd=tmp_path, timeout=180,
        )  # fmt: skip
        calls = model.requests()
    assert done.returncode == 0, done.stderr
    lines = read_jsonl(out / "results.jsonl")
    assert len({line["rollout_id"] for line in lines}) == len(lines) == n
    assert {line["status"] for line in lines} == {"ungraded"}, done.stderr
    assert [line["usage"]["requests"] for line in lines] == [CALLS] * n
    for line in lines:
        recorded = read_jsonl(out / "rollouts" / line["rollout_id"] / MODEL_CALLS)
        assert len(recorded) == CALLS
    doc = json.loads((out / "summary.json").read_text())
    assert doc["model"]["gateway"]["calls"] == CALLS * n
    assert calls == CALLS * n
