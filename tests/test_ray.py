"""``eval --backend ray`` on real Ray clusters: same results, same guarantees as a local run.

Marked ``ray``: deselected unless asked for, and then only inside a private network namespace
with nothing but loopback up (Ray listens on every interface and talks on the routable
address, which these machines must not):

    unshare --net -- sh -c 'ip link set lo up && HOME=$(mktemp -d) RAY_USAGE_STATS_ENABLED=0 \\
        python -m pytest -m ray'

Outside one the tests fail (they never skip silently). One session-scoped two-node
``cluster_utils.Cluster`` (head with 1 CPU, a worker node with 2, small object stores, health
checks every 500 ms, 3 misses) serves every test; clusters are ended by their own handles.
Each eval runs as a child process (``python -m osmosis_run``), as a user runs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS_DIR, results, subprocess_env, write_jsonl

from osmosis_run.backends._ray_actor import SCRATCH_PREFIX, SHM
from osmosis_run.errors import BackendError

pytestmark = [
    pytest.mark.ray,
    # Ray's node objects (cluster_utils) leave their log files to the garbage collector.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    # Each test runs one to three evals on a shared cluster; CI runs them beside three other
    # suites on 2 cores, where a Ray eval of 300 rows took over a minute.
    pytest.mark.timeout(300),
]

REPO = TESTS_DIR.parent
OBJECT_STORE = 80 * 1024 * 1024
HEALTH = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
    "health_check_initial_delay_ms": 0,
}
NAMESPACE_HINT = (
    "the ray tests run only inside a private network namespace: unshare --net -- sh -c "
    "'ip link set lo up && HOME=$(mktemp -d) RAY_USAGE_STATS_ENABLED=0 python -m pytest -m ray'"
)
TIMINGS = ("workflow_ms", "grader_ms", "finished_at")


def in_private_network() -> bool:
    """Whether loopback is this process's only network interface."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


class Cluster:
    """The session's cluster: its address, the worker node, and room for extra nodes."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster as RayCluster

        self.ray = RayCluster(
            initialize_head=True,
            connect=False,
            head_node_args={
                "num_cpus": 1,
                "object_store_memory": OBJECT_STORE,
                "include_dashboard": False,
                "_system_config": HEALTH,
            },
        )
        self.worker = self.ray.add_node(num_cpus=2, object_store_memory=OBJECT_STORE)
        self.ray.wait_for_nodes()

    @property
    def address(self) -> str:
        return str(self.ray.address)

    def add_node(self, **args: Any) -> Any:
        node = self.ray.add_node(object_store_memory=OBJECT_STORE, **args)
        self.ray.wait_for_nodes()
        return node

    def shutdown(self) -> None:
        self.ray.shutdown()  # type: ignore[no-untyped-call]


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    if not in_private_network():
        pytest.fail(NAMESPACE_HINT)
    made = Cluster()
    try:
        yield made
    finally:
        made.shutdown()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A project folder: the test flows (shipped to the workers with runtime_env)."""
    shutil.copy(TESTS_DIR / "ray_flows.py", tmp_path / "ray_flows.py")
    return tmp_path


def eval_args(dataset: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "osmosis_run",
        "eval",
        str(dataset),
        "--workflow",
        "ray_flows:Traced",
        "--out",
        str(out),
        *extra,
    ]


def ray_eval(
    cwd: Path, cluster: Cluster, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``osmosis-run eval ARGS --backend ray --ray-address ADDRESS`` from ``cwd``."""
    return subprocess.run(
        [*args, "--backend", "ray", "--ray-address", cluster.address],
        cwd=cwd,
        env=env or subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def ray_eval_child(cwd: Path, cluster: Cluster, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``osmosis-run eval ARGS --backend ray --ray-address ADDRESS`` from ``cwd`` (pipes),
    killed on the way out if it is still running."""
    child = subprocess.Popen(
        [*args, "--backend", "ray", "--ray-address", cluster.address],
        cwd=cwd,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                pipe.close()


def scratch_dirs() -> set[str]:
    """The actors' scratch directories on this machine (``_ray_actor._scratch``'s places)."""
    found: set[str] = set()
    for where in (Path(SHM), Path(tempfile.gettempdir())):
        with contextlib.suppress(OSError):
            found |= {str(p) for p in where.iterdir() if p.name.startswith(SCRATCH_PREFIX)}
    return found


def rows(n: int, **meta: Any) -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "prompt": f"p{i}", "ground_truth": f"p{i}", **meta} for i in range(n)]


def without_timings(path: Path) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in (path / "results.jsonl").read_text().splitlines()]
    return {
        line["rollout_id"]: {k: v for k, v in line.items() if k not in TIMINGS} for line in lines
    }


def wait_for(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def log_lines(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [line.split() for line in log.read_text().splitlines() if line.count(" ") == 2]


def recorded_once(run_dir: Path, expected: int) -> list[str]:
    """Every rollout has exactly one results line; returns their statuses."""
    lines = results(run_dir)
    ids = [line.rollout_id for line in lines]
    assert len(ids) == len(set(ids)) == expected
    return [line.status for line in lines]


# -- same results as a local run --------------------------------------------------------


def test_the_calculator_gives_the_same_results_lines_as_a_local_run(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = str(REPO / "configs" / "calculator.toml")
    base = [sys.executable, "-m", "osmosis_run", "eval", "--config", config]
    local = subprocess.run(
        [*base, "--out", str(tmp_path / "local")],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert local.returncode == 0, local.stderr
    on_ray = ray_eval(tmp_path, cluster, *base, "--out", str(tmp_path / "ray"), "--ray-batch", "8")
    assert on_ray.returncode == 0, on_ray.stderr
    ours, theirs = without_timings(tmp_path / "ray"), without_timings(tmp_path / "local")
    assert len(ours) == 300
    assert ours == theirs
    # The backend is not part of the fingerprint: the local run resumes on Ray, nothing to do.
    again = ray_eval(tmp_path, cluster, *base, "--out", str(tmp_path / "local"))
    assert again.returncode == 0, again.stderr
    assert without_timings(tmp_path / "local") == theirs


# -- Ctrl-C, then resume ----------------------------------------------------------------


def test_ctrl_c_exits_130_and_the_resume_runs_exactly_the_rest(
    cluster: Cluster, workdir: Path
) -> None:
    dataset = write_jsonl(workdir / "d.jsonl", rows(40, metadata={"sleep": 0.2}))
    out = workdir / "run"
    args = eval_args(dataset, out, "--concurrency", "4", "--ray-actors", "2")
    with ray_eval_child(workdir, cluster, *args) as child:
        wait_for(
            lambda: (
                (out / "results.jsonl").exists()
                and len((out / "results.jsonl").read_text().splitlines()) >= 4
            ),
            timeout=60,
            what="the first results",
        )
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == 130, stderr
    before = without_timings(out)
    assert 4 <= len(before) < 40
    # Resumed on Ray: only the rest runs, and what finished is kept as it was.
    again = ray_eval(workdir, cluster, *args)
    assert again.returncode == 0, again.stderr
    after = without_timings(out)
    assert recorded_once(out, 40) == ["ungraded"] * 40
    assert {rid: after[rid] for rid in before} == before


def test_a_second_ctrl_c_exits_at_once_and_the_actors_die_with_the_driver(
    cluster: Cluster, workdir: Path
) -> None:
    log = workdir / "where.log"
    dataset = write_jsonl(workdir / "d.jsonl", rows(8, metadata={"sleep": 600, "log": str(log)}))
    args = eval_args(dataset, workdir / "run", "--concurrency", "4", "--ray-actors", "2")
    with ray_eval_child(workdir, cluster, *args) as child:
        wait_for(lambda: len(log_lines(log)) >= 4, timeout=60, what="rollouts on the actors")
        child.send_signal(signal.SIGINT)
        time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=10)
    assert child.returncode == 130, stderr
    pids = {int(pid) for _, pid, _ in log_lines(log)}
    wait_for(lambda: not any(_alive(pid) for pid in pids), timeout=30, what="the actors to die")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").is_dir() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
    except (OSError, IndexError):
        return "Z"


# -- faults: an actor, a node ------------------------------------------------------------


def test_an_actor_killed_mid_run_loses_no_rollout_and_records_each_once(
    cluster: Cluster, workdir: Path
) -> None:
    out, log = workdir / "run", workdir / "where.log"
    dataset = write_jsonl(workdir / "d.jsonl", rows(60, metadata={"sleep": 0.1, "log": str(log)}))
    args = eval_args(dataset, out, "--concurrency", "8", "--ray-actors", "2")
    with ray_eval_child(workdir, cluster, *args) as child:
        wait_for(lambda: len(log_lines(log)) >= 10, timeout=60, what="rollouts on the actors")
        victim = int(log_lines(log)[-1][1])
        os.kill(victim, signal.SIGKILL)  # an actor's worker process, started by our cluster
        _, stderr = child.communicate(timeout=90)
    assert child.returncode == 0, stderr
    assert recorded_once(out, 60) == ["ungraded"] * 60
    on_victim = {rid for rid, pid, _ in log_lines(log) if pid == str(victim)}
    elsewhere = {rid for rid, pid, _ in log_lines(log) if pid != str(victim)}
    assert on_victim & elsewhere  # what the killed actor held in flight ran again elsewhere


def results_so_far(out: Path) -> list[str]:
    """The rollout ids of the results lines written so far (none before the file exists)."""
    path = out / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["rollout_id"] for line in path.read_text().splitlines() if line]


def test_a_slow_rollout_does_not_hold_back_the_results_of_its_batch_mates(
    cluster: Cluster, workdir: Path
) -> None:
    # One actor and a window of 6: the default (--ray-batch auto) sends the six in one call.
    # r0 waits for a file the test makes only once the other five have their results lines:
    # that happens only if their replies stream back while r0 is still running.
    out, release = workdir / "run", workdir / "release"
    data = rows(6)
    data[0]["metadata"] = {"wait_for": str(release)}
    dataset = write_jsonl(workdir / "d.jsonl", data)
    args = eval_args(dataset, out, "--concurrency", "6", "--ray-actors", "1")
    with ray_eval_child(workdir, cluster, *args) as child:
        wait_for(lambda: len(results_so_far(out)) >= 5, timeout=60, what="five results lines")
        assert sorted(results_so_far(out)) == [f"r{i}.s0" for i in range(1, 6)]
        release.touch()
        _, stderr = child.communicate(timeout=60)
    assert child.returncode == 0, stderr
    assert recorded_once(out, 6) == ["ungraded"] * 6
    assert results_so_far(out)[-1] == "r0.s0"


def test_an_actor_makes_as_many_blocking_calls_at_once_as_it_holds_rollouts(
    cluster: Cluster, workdir: Path
) -> None:
    # 16 rollouts on one actor meet in asyncio.to_thread: asyncio's own executor would run
    # min(32, cores + 4) = 6 of them at once here, and the barrier would break after 20 s.
    data = rows(16)
    for row in data:
        row["metadata"] = {"meet": 16}
    dataset = write_jsonl(workdir / "d.jsonl", data)
    args = eval_args(dataset, workdir / "run", "--concurrency", "16", "--ray-actors", "1")
    done = ray_eval(workdir, cluster, *args)
    assert done.returncode == 0, done.stderr
    assert recorded_once(workdir / "run", 16) == ["ungraded"] * 16


def test_an_actor_lost_with_part_of_its_batch_answered_runs_only_the_rest_again(
    cluster: Cluster, workdir: Path
) -> None:
    # Six rollouts in one call to the only actor: five answer (streamed back, recorded), r0
    # is still running when the actor is SIGKILLed. Only r0 runs again (on the replacement);
    # every rollout has exactly one results line.
    out, log, release = workdir / "run", workdir / "where.log", workdir / "release"
    data = rows(6, metadata={"log": str(log)})
    data[0]["metadata"] = {"log": str(log), "wait_for": str(release)}
    dataset = write_jsonl(workdir / "d.jsonl", data)
    args = eval_args(dataset, out, "--concurrency", "6", "--ray-actors", "1")
    with ray_eval_child(workdir, cluster, *args) as child:
        wait_for(lambda: len(results_so_far(out)) >= 5, timeout=60, what="five results lines")
        (victim,) = {int(pid) for rid, pid, _ in log_lines(log) if rid == "r0.s0"}
        os.kill(victim, signal.SIGKILL)
        release.touch()  # for r0's second run, on the replacement actor
        _, stderr = child.communicate(timeout=90)
    assert child.returncode == 0, stderr
    assert recorded_once(out, 6) == ["ungraded"] * 6
    runs: dict[str, list[str]] = {}
    for rid, pid, _ in log_lines(log):
        runs.setdefault(rid, []).append(pid)
    assert {rid: len(pids) for rid, pids in runs.items()} == {
        "r0.s0": 2,
        **{f"r{i}.s0": 1 for i in range(1, 6)},
    }
    assert runs["r0.s0"][0] == str(victim) != runs["r0.s0"][1]


def test_a_rollout_that_kills_its_actor_every_time_is_recorded_as_a_failure(
    cluster: Cluster, workdir: Path
) -> None:
    data = rows(4)
    data[1]["metadata"] = {"die": True}
    dataset = write_jsonl(workdir / "d.jsonl", data)
    out = workdir / "run"
    args = eval_args(dataset, out, "--ray-actors", "2", "--max-error-rate", "1")
    done = ray_eval(workdir, cluster, *args)
    assert done.returncode == 0, done.stderr
    assert sorted(recorded_once(out, 4)) == ["failure", "ungraded", "ungraded", "ungraded"]
    killer = next(line for line in results(out) if line.rollout_id == "r1.s0")
    assert killer.error_message is not None
    assert killer.error_message.startswith("the backend lost this rollout 4 times in a row (")
    assert killer.attempts == 1  # losses are not attempts


@pytest.mark.slow
@pytest.mark.timeout(420)  # its own waits (150 s + 180 s) bound it; CI runs it beside 3 suites
def test_a_worker_node_whose_raylet_is_killed_mid_run_loses_no_rollout(
    cluster: Cluster, workdir: Path
) -> None:
    node = cluster.add_node(num_cpus=1)
    try:
        out, log = workdir / "run", workdir / "where.log"
        meta = {"sleep": 0.2, "log": str(log)}
        # Six actors spread over three nodes: at least one on the node that is killed. The run
        # lasts ~10 s, so that the fresh node's actor (a new worker process, which imports
        # osmosis-run there: seconds on a loaded machine) gets rollouts before the others
        # have run them all.
        dataset = write_jsonl(workdir / "d.jsonl", rows(600, metadata=meta))
        args = eval_args(dataset, out, "--concurrency", "12", "--ray-actors", "6")

        def on_node() -> int:
            return sum(n == node.node_id for *_, n in log_lines(log))

        with ray_eval_child(workdir, cluster, *args) as child:
            try:
                wait_for(lambda: on_node() >= 3, timeout=150, what="rollouts on the extra node")
            except AssertionError:
                child.kill()
                _, stderr = child.communicate()
                nodes = Counter(n for *_, n in log_lines(log))
                raise AssertionError(
                    f"rollouts per node {dict(nodes)}; stderr:\n{stderr}"
                ) from None
            node.kill_raylet()  # SIGKILL, by the handle of the node we started
            _, stderr = child.communicate(timeout=180)
        assert child.returncode == 0, stderr
        assert recorded_once(out, 600) == ["ungraded"] * 600
        # What its actor held in flight may have replied (a worker outlives its raylet for a
        # moment) or run again elsewhere: either way once in results.jsonl.
    finally:
        cluster.ray.remove_node(node, allow_graceful=False)


# -- artifacts, the API key ----------------------------------------------------------------


def test_artifacts_written_on_the_second_node_reach_the_run_directory(
    cluster: Cluster, workdir: Path
) -> None:
    data = rows(12)
    data[3]["metadata"] = {"big": 17 * 1024 * 1024}  # over the cap: listed, not shipped
    dataset = write_jsonl(workdir / "d.jsonl", data)
    out = workdir / "run"
    before = scratch_dirs()
    # One CPU each: the 1-CPU head holds one, the 2-CPU worker node the other two (SPREAD alone
    # is best effort, and put all three on the head on a loaded machine).
    args = eval_args(dataset, out, "--ray-actors", "3", "--ray-actor-cpus", "1")
    done = ray_eval(workdir, cluster, *args)
    assert done.returncode == 0, done.stderr
    assert scratch_dirs() <= before  # each actor removed its scratch directory at the end
    nodes = {
        (out / "rollouts" / f"r{i}.s0" / "artifacts" / "node.txt").read_text() for i in range(12)
    }
    assert cluster.worker.node_id in nodes
    big = json.loads((out / "rollouts" / "r3.s0" / "result.json").read_text())
    assert big["artifacts"] == {
        "shipped": ["node.txt"],
        "omitted": ["big.bin"],
        "unavailable": None,
    }
    assert not (out / "rollouts" / "r3.s0" / "artifacts" / "big.bin").exists()


def test_the_api_key_reaches_the_actors_and_no_file_of_the_run(
    cluster: Cluster, workdir: Path
) -> None:
    key = "sk-ray-test-0123456789abcdef"
    sha = hashlib.sha256(key.encode()).hexdigest()
    dataset = write_jsonl(workdir / "d.jsonl", rows(4, metadata={"key_sha": sha}))
    out = workdir / "run"
    env = subprocess_env(OSMOSIS_API_KEY=key)
    done = ray_eval(workdir, cluster, *eval_args(dataset, out, "--ray-actors", "2"), env=env)
    assert done.returncode == 0, done.stderr
    assert {line.messages[-1]["content"] for line in results(out)} == {"key ok"}  # type: ignore[index]
    for path in out.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


def test_shared_fs_writes_artifacts_in_place_after_the_probe(
    cluster: Cluster, workdir: Path
) -> None:
    dataset = write_jsonl(workdir / "d.jsonl", rows(6))
    out = workdir / "run"
    args = eval_args(dataset, out, "--ray-actors", "2", "--ray-shared-fs")
    done = ray_eval(workdir, cluster, *args)
    assert done.returncode == 0, done.stderr
    for i in range(6):
        assert (out / "rollouts" / f"r{i}.s0" / "artifacts" / "node.txt").is_file()
        assert "artifacts" not in json.loads(
            (out / "rollouts" / f"r{i}.s0" / "result.json").read_text()
        )
    assert not (out / ".ray-shared-fs-probe").exists()


# -- what stops a run before it starts (exit 2) ----------------------------------------------


def test_a_module_missing_on_the_workers_is_one_clear_line(cluster: Cluster, workdir: Path) -> None:
    # The workflow imports a module that only the driver's PYTHONPATH holds.
    elsewhere = Path(tempfile.mkdtemp(dir=workdir.parent))
    (elsewhere / "driver_only.py").write_text("VALUE = 1\n")
    (workdir / "needs_helper.py").write_text("import driver_only\nfrom ray_flows import Traced\n")
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(elsewhere), env["PYTHONPATH"]])
    dataset = write_jsonl(workdir / "d.jsonl", rows(2))
    args = eval_args(dataset, workdir / "run", "--ray-actors", "1")
    args[args.index("ray_flows:Traced")] = "needs_helper:Traced"
    done = ray_eval(workdir, cluster, *args, env=env)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        'error: on the Ray workers (node 127.0.0.1): importing "needs_helper" '
        '(for "needs_helper:Traced") raised ModuleNotFoundError: No module named '
        "'driver_only'; the import paths are shipped to them, other modules must be installed "
        "on every node"
    )
    assert not (workdir / "run" / "results.jsonl").exists() or not results(workdir / "run")


def test_an_actor_no_node_can_hold_is_refused_at_once(cluster: Cluster, workdir: Path) -> None:
    dataset = write_jsonl(workdir / "d.jsonl", rows(2))
    done = ray_eval(workdir, cluster, *eval_args(dataset, workdir / "run", "--ray-actor-cpus", "8"))
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "error: --ray-actor-cpus 8: no node of the Ray cluster has 8 CPUs (the largest has 2); "
        "lower it, or add a bigger node"
    )


def test_version_skew_between_the_driver_and_a_worker_is_refused() -> None:
    from osmosis_run.backends import ray as backend
    from osmosis_run.backends._ray_actor import versions

    hello = {**versions(), "pydantic": "2.5.0", "node": "gpu-7"}
    with pytest.raises(BackendError) as caught:
        backend._check_versions(hello)
    assert str(caught.value) == (
        f"version skew: Ray node gpu-7 runs pydantic 2.5.0, this machine runs pydantic "
        f"{versions()['pydantic']}; install the same versions on every node"
    )
    backend._check_versions({**versions(), "node": "same"})  # the same: no error


def test_the_code_shipped_leaves_out_the_run_directory_git_and_venvs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_run.backends.ray import runtime_env_of
    from osmosis_run.run.plan import prepare
    from osmosis_run.run.settings import EvalSettings

    project, configs = tmp_path / "project", tmp_path / "configs"
    for folder in (project / ".git", project / "env", project / "runs" / "x", configs / "pkg"):
        folder.mkdir(parents=True)
    (project / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    shutil.copy(TESTS_DIR / "ray_flows.py", project / "ray_flows.py")
    (configs / "settings.py").write_text("X = 1\n")
    (configs / "pkg" / "__init__.py").write_text("")
    (configs / "notes.txt").write_text("not code\n")
    dataset = write_jsonl(project / "d.jsonl", rows(1))
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    settings = EvalSettings(
        dataset=str(dataset),
        workflow="ray_flows:Traced",
        out=str(project / "runs" / "x"),
        import_paths=[str(configs)],
    )
    env = runtime_env_of(prepare(settings))
    assert env["working_dir"] == str(project.resolve())
    assert {"/runs/x", "/runs", "/env", ".git"} <= set(env["excludes"])
    assert env["py_modules"] == [
        str(configs.resolve() / "pkg"),
        str(configs.resolve() / "settings.py"),
    ]


# -- a cluster started with `ray start --head --block` -------------------------------------


@pytest.mark.slow
def test_ray_address_joins_a_cluster_started_with_ray_start(workdir: Path) -> None:
    if not in_private_network():
        pytest.fail(NAMESPACE_HINT)
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="ray-start-")
    ray_cli = Path(sys.executable).with_name("ray")
    head = subprocess.Popen(
        [
            str(ray_cli),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=1",
            "--include-dashboard=false",
            f"--object-store-memory={OBJECT_STORE}",
            f"--temp-dir={temp}",
            "--disable-usage-stats",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, ended below by its id
    )
    try:
        dataset = write_jsonl(workdir / "d.jsonl", rows(5))
        out = workdir / "run"
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            done = subprocess.run(
                [
                    *eval_args(dataset, out, "--ray-actors", "1"),
                    "--backend",
                    "ray",
                    "--ray-address",
                    address,
                ],
                cwd=workdir,
                env=subprocess_env(),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if done.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert done.returncode == 0, done.stderr
        assert recorded_once(out, 5) == ["ungraded"] * 5
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_without_an_address_a_new_local_cluster_runs_not_the_last_ray_start(
    workdir: Path,
) -> None:
    """Ray's own default joins the cluster that the last ``ray start`` on this machine wrote to
    ``<tmp>/ray/ray_current_cluster``, wherever it is now (in CI: another suite's, in another
    network namespace, where the driver waited for minutes). osmosis-run's default is a new
    local cluster."""
    if not in_private_network():
        pytest.fail(NAMESPACE_HINT)
    temp = tempfile.mkdtemp(prefix="rt-")  # short: Ray's socket paths live under it
    try:
        (Path(temp) / "ray").mkdir()
        (Path(temp) / "ray" / "ray_current_cluster").write_text("10.255.255.1:6379\n")
        dataset = write_jsonl(workdir / "d.jsonl", rows(3))
        env = {k: v for k, v in subprocess_env(RAY_TMPDIR=temp).items() if k != "RAY_ADDRESS"}
        done = subprocess.run(
            [*eval_args(dataset, workdir / "run", "--ray-actors", "1"), "--backend", "ray"],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=100,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert recorded_once(workdir / "run", 3) == ["ungraded"] * 3
    finally:
        shutil.rmtree(temp, ignore_errors=True)
