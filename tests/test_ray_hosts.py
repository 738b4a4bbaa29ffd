"""``eval --backend ray`` on a cluster of two real hosts: model calls from every node, faults.

Two network namespaces joined by a veth pair (tests/hosts.py): host A (the head, 1 CPU, and the
driver beside it) and host B (a worker node, 2 CPUs), each node's address its own, so that what
a worker reaches is not what the driver reaches on loopback. Every eval runs on host A as a
user runs it (``python -m osmosis_run eval ... --backend ray --ray-address A:6379``). One
cluster serves the module; the token and raylet-kill tests start their own.

Marked ``ray``. Needs root (``ip netns``); works directly and inside CI's ``unshare --net``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS_DIR, write_jsonl
from hosts import (
    FakeModel,
    Host,
    RayCluster,
    netns_names,
    read_jsonl,
    two_hosts,
    wait_for,
)

from osmosis_run.store.layout import MODEL_CALLS

pytestmark = [pytest.mark.ray]

REPO = TESTS_DIR.parent
TIMINGS = ("workflow_ms", "grader_ms", "finished_at")
CALLS = 2  # gateway_flows.CALLS: model calls per rollout of OpenAIWorkflow
KEY = "sk-upstream-0123456789"  # the upstream takes any key
TOKEN = "osr-hosts-test-token-0123456789abcdef"
LOST = re.compile(
    r"^osmosis-run: lost the Ray actor on node \S+ \(.*\); "
    r"(?:\d+ rollouts? run|1 rollout runs) again$"
)


@pytest.fixture(scope="module")
def hosts() -> Iterator[tuple[Host, Host]]:
    if os.geteuid() != 0:
        pytest.fail("the two-host Ray tests need root (ip netns)")
    with two_hosts() as made:
        yield made


@pytest.fixture(scope="module")
def cluster(hosts: tuple[Host, Host]) -> Iterator[RayCluster]:
    with RayCluster(*hosts) as made:
        yield made


@pytest.fixture(scope="module")
def model(hosts: tuple[Host, Host]) -> Iterator[FakeModel]:
    with FakeModel(hosts[0]) as made:
        yield made


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A project folder holding the test flows (shipped to the workers with runtime_env)."""
    for name in ("ray_flows.py", "gateway_flows.py"):
        shutil.copy(TESTS_DIR / name, tmp_path / name)
    return tmp_path


def ray_eval(
    host: Host,
    cluster: RayCluster,
    cwd: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    """``osmosis-run eval ARGS --backend ray --ray-address HEAD`` run on ``host`` from ``cwd``."""
    cmd = [sys.executable, "-m", "osmosis_run", "eval", *args]
    return host.run(
        [*cmd, "--backend", "ray", "--ray-address", cluster.address],
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def rows(n: int, **meta: Any) -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "prompt": f"p{i}", "ground_truth": f"p{i}", **meta} for i in range(n)]


def lines_of(run: Path) -> list[dict[str, Any]]:
    return read_jsonl(run / "results.jsonl")


def once_each(run: Path, expected: int) -> list[dict[str, Any]]:
    """Every rollout has exactly one results line; returns them."""
    lines = lines_of(run)
    ids = [line["rollout_id"] for line in lines]
    assert len(ids) == len(set(ids)) == expected, sorted(ids)
    return lines


def without_timings(run: Path) -> dict[str, dict[str, Any]]:
    return {
        line["rollout_id"]: {k: v for k, v in line.items() if k not in TIMINGS}
        for line in lines_of(run)
    }


def summary(run: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((run / "summary.json").read_text())
    return doc


def actor_nodes(run: Path) -> list[str]:
    return sorted(actor["node"] for actor in summary(run)["backend"]["actors"])


def stderr_lines(done: subprocess.CompletedProcess[str] | str) -> list[str]:
    text = done if isinstance(done, str) else done.stderr
    return text.splitlines()


def gateway_dataset(path: Path, n: int) -> Path:
    return write_jsonl(path, [{"id": f"q{i}", "user_prompt": f"question {i}"} for i in range(n)])


# -- a. the bundled example ---------------------------------------------------------------


def test_the_bundled_example_gives_the_same_results_as_a_local_run(
    hosts: tuple[Host, Host], cluster: RayCluster, tmp_path: Path
) -> None:
    a, _ = hosts
    config = str(REPO / "configs" / "calculator.toml")
    base = [sys.executable, "-m", "osmosis_run", "eval", "--config", config]
    local = a.run([*base, "--out", str(tmp_path / "local")], cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    on_ray = ray_eval(a, cluster, tmp_path, "--config", config, "--out", str(tmp_path / "ray"))
    assert on_ray.returncode == 0, on_ray.stderr
    once_each(tmp_path / "ray", 300)
    assert without_timings(tmp_path / "ray") == without_timings(tmp_path / "local")


# -- b, c. model calls from every node ----------------------------------------------------


def test_model_calls_from_both_hosts_go_through_the_gateway(
    hosts: tuple[Host, Host], cluster: RayCluster, model: FakeModel, workdir: Path
) -> None:
    a, b = hosts
    n, before = 24, model.requests()
    data, out = gateway_dataset(workdir / "d.jsonl", n), workdir / "run"
    done = ray_eval(
        a, cluster, workdir, str(data), "-w", "gateway_flows:OpenAIWorkflow",
        "--chat-completions-url", model.url, "--api-key", KEY, "--out", str(out),
        "--concurrency", "8", "--ray-actors", "3", "--ray-actor-cpus", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = once_each(out, n)
    assert {line["status"] for line in lines} == {"ungraded"}, done.stderr
    assert [line["usage"]["requests"] for line in lines] == [CALLS] * n
    for line in lines:
        assert (out / "rollouts" / line["rollout_id"] / MODEL_CALLS).is_file()
    assert set(actor_nodes(out)) == {a.ip, b.ip}
    assert summary(out)["model"]["gateway"]["calls"] == CALLS * n
    assert model.requests() - before == CALLS * n


def test_model_calls_from_both_hosts_without_the_gateway(
    hosts: tuple[Host, Host], cluster: RayCluster, model: FakeModel, workdir: Path
) -> None:
    a, b = hosts
    n, before = 24, model.requests()
    data, out = gateway_dataset(workdir / "d.jsonl", n), workdir / "run"
    done = ray_eval(
        a, cluster, workdir, str(data), "-w", "gateway_flows:OpenAIWorkflow",
        "--chat-completions-url", model.url, "--api-key", KEY, "--out", str(out),
        "--concurrency", "8", "--ray-actors", "3", "--ray-actor-cpus", "1", "--no-gateway",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = once_each(out, n)
    assert {line["status"] for line in lines} == {"ungraded"}, done.stderr
    assert set(actor_nodes(out)) == {a.ip, b.ip}
    assert model.requests() - before == CALLS * n


def test_a_gateway_on_loopback_is_refused_before_any_rollout(
    hosts: tuple[Host, Host], cluster: RayCluster, model: FakeModel, workdir: Path
) -> None:
    a, b = hosts
    before = model.requests()
    data, out = gateway_dataset(workdir / "d.jsonl", 6), workdir / "run"
    done = ray_eval(
        a, cluster, workdir, str(data), "-w", "gateway_flows:OpenAIWorkflow",
        "--chat-completions-url", model.url, "--api-key", KEY, "--out", str(out),
        "--ray-actors", "3", "--ray-actor-cpus", "1", "--gateway-host", "127.0.0.1",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    said = [
        line
        for line in stderr_lines(done)
        if line.startswith(
            f"error: on the Ray workers (node {b.ip}): cannot reach the model gateway at http://"
        )
    ]
    assert len(said) == 1, done.stderr
    assert "--gateway-host" in said[0]
    assert "Traceback" not in done.stderr
    assert not (out / "results.jsonl").exists() or lines_of(out) == []
    assert model.requests() == before


def test_a_model_on_the_drivers_loopback_is_refused_with_no_gateway(
    hosts: tuple[Host, Host], cluster: RayCluster, workdir: Path
) -> None:
    # The driver (host A) reaches the model on its loopback; the actors on host B do not.
    a, b = hosts
    data, out = gateway_dataset(workdir / "d.jsonl", 6), workdir / "run"
    with FakeModel(a, address="127.0.0.1") as local:
        done = ray_eval(
            a, cluster, workdir, str(data), "-w", "gateway_flows:OpenAIWorkflow",
            "--chat-completions-url", local.url, "--api-key", KEY, "--out", str(out),
            "--ray-actors", "3", "--ray-actor-cpus", "1", "--no-gateway",
        )  # fmt: skip
        seen = local.requests()
    assert done.returncode == 2, done.stderr
    said = [
        line
        for line in stderr_lines(done)
        if line.startswith(
            f"error: on the Ray workers (node {b.ip}): cannot reach the model endpoint at "
            f"{local.url}"
        )
    ]
    assert len(said) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not (out / "results.jsonl").exists() or lines_of(out) == []
    assert seen == 0


# -- f. --ray-actor-cpus ------------------------------------------------------------------


def test_each_actor_reserves_its_cpus(
    hosts: tuple[Host, Host], cluster: RayCluster, workdir: Path
) -> None:
    a, b = hosts
    data = write_jsonl(workdir / "d.jsonl", rows(12))
    out = workdir / "run"
    done = ray_eval(
        a, cluster, workdir, str(data), "-w", "ray_flows:Traced", "--out", str(out),
        "--ray-actors", "3", "--ray-actor-cpus", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    once_each(out, 12)
    assert actor_nodes(out) == sorted([a.ip, b.ip, b.ip])
    assert {actor["cpus"] for actor in summary(out)["backend"]["actors"]} == {1.0}
    # 0 reserves none: five actors fit on a cluster of 3 CPUs.
    free = ray_eval(
        a, cluster, workdir, str(data), "-w", "ray_flows:Traced", "--out", str(workdir / "free"),
        "--ray-actors", "5", "--ray-actor-cpus", "0",
    )  # fmt: skip
    assert free.returncode == 0, free.stderr
    actors = summary(workdir / "free")["backend"]["actors"]
    assert len(actors) == 5
    assert {actor["cpus"] for actor in actors} == {0.0}


# -- d. token authentication ----------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_cluster_with_token_auth_takes_only_a_driver_with_its_token(workdir: Path) -> None:
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}
    data = write_jsonl(workdir / "d.jsonl", rows(6))
    with two_hosts() as (a, b), RayCluster(a, b, env=token) as cluster:
        args = [str(data), "-w", "ray_flows:Traced"]
        ok = ray_eval(a, cluster, workdir, *args, "--out", str(workdir / "ok"), env=a.env(**token))
        assert ok.returncode == 0, ok.stderr
        once_each(workdir / "ok", 6)
        started = time.monotonic()
        refused = ray_eval(a, cluster, workdir, *args, "--out", str(workdir / "no"), timeout=120)
        took = time.monotonic() - started
    assert refused.returncode == 2, refused.stderr
    said = [
        line
        for line in stderr_lines(refused)
        if "refused this driver's authentication token" in line
    ]
    assert len(said) == 1, refused.stderr
    assert cluster.address in said[0]
    assert "Traceback" not in refused.stderr
    assert took < 60, f"{took:.1f} s"


# -- e. the worker host's raylet killed mid-run ------------------------------------------------


@pytest.mark.timeout(300)
def test_a_killed_raylet_loses_no_rollout_and_keeps_stdout_clean(workdir: Path) -> None:
    n, out, log = 48, workdir / "run", workdir / "where.log"
    data = write_jsonl(workdir / "d.jsonl", rows(n, metadata={"sleep": 0.5, "log": str(log)}))
    with two_hosts() as (a, b), RayCluster(a, b) as cluster:
        on_b = cluster.node_ids()[b.ip]
        cmd = [sys.executable, "-m", "osmosis_run", "eval", str(data), "-w", "ray_flows:Traced",
               "--out", str(out), "--concurrency", "6", "--ray-actors", "3", "--jsonl",
               "--ray-actor-cpus", "1",
               "--backend", "ray", "--ray-address", cluster.address]  # fmt: skip
        with a.started(cmd, cwd=workdir) as child:
            wait_for(
                lambda: len(_results(out)) >= 6 and bool(_in_flight_on(on_b, log, out)),
                timeout=120,
                what="results lines, and rollouts in flight on host B",
            )
            os.kill(cluster.raylet_pid(b), signal.SIGKILL)
            stdout, stderr = child.communicate(timeout=180)
    assert child.returncode == 0, stderr
    lines = once_each(out, n)
    assert {line["status"] for line in lines} == {"ungraded"}
    lost = [line for line in stderr.splitlines() if LOST.match(line)]
    assert lost, stderr
    assert all(f"node {b.ip} " in line for line in lost), stderr
    backend = summary(out)["backend"]
    assert backend["actors_lost"] >= 1
    assert any(actor["lost"] and actor["node"] == b.ip for actor in backend["actors"])
    printed = stdout.splitlines()
    assert len(printed) == n
    assert all("rollout_id" in json.loads(line) for line in printed), stdout
    assert "(raylet)" not in stdout


def _in_flight_on(node_id: str, log: Path, out: Path) -> set[str]:
    """The rollouts started on the node (``ray_flows.Traced``'s log) with no results line yet."""
    started = {line.split()[0] for line in _log(log) if line.split()[2] == node_id}
    return started - set(_results(out))


def _log(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if line.count(" ") == 2]


def _results(out: Path) -> list[str]:
    path = out / "results.jsonl"
    if not path.exists():
        return []
    ids = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):  # a line being written
            ids.append(json.loads(line)["rollout_id"])
    return ids


def test_hosts_are_removed_and_those_a_killed_run_left_behind_too() -> None:
    """A run killed outright leaves its named namespaces (files under /run/netns); the next
    ``two_hosts`` removes them, and its own on the way out."""
    stale = "osr-999999999-0-a"  # named after a process that cannot exist (past pid_max)
    subprocess.run(["ip", "netns", "add", stale], check=True, capture_output=True, timeout=30)
    try:
        with two_hosts() as (a, b):
            names = netns_names()
            assert stale not in names
            assert {a.netns, b.netns} <= set(names)
        assert not {a.netns, b.netns} & set(netns_names())
    finally:
        if stale in netns_names():
            subprocess.run(["ip", "netns", "del", stale], check=False, capture_output=True)
