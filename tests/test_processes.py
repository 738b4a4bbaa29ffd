"""``eval --backend processes``: real worker processes, real signals, real deadlines.

Each eval runs as a child process (``python -m osmosis_run``), as a user runs it, with the
flows of ``tests/process_flows.py``; every rollout reports its worker's pid as a metric, so the
tests find the workers in ``/proc``, kill them, and check none is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import results, subprocess_env, write_jsonl

from osmosis_run.backends.processes import HARD_GRACE_S, describe_exit
from osmosis_run.run.settings.models import format_size, parse_size

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="worker processes: Linux /proc")

FLOWS = ("--workflow", "process_flows:Flow", "--grader", "process_flows:Judge")


def eval_args(dataset: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "osmosis_run",
        "eval",
        str(dataset),
        *FLOWS,
        "--out",
        str(out),
        "--backend",
        "processes",
        "--max-error-rate",
        "100%",
        *extra,
    ]


def run_eval(cwd: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args),
        cwd=cwd,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def eval_child(cwd: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        list(args),
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
        child.communicate()


def ok_rows(n: int, prefix: str = "r") -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i}", "prompt": "ok", "label": "ok"} for i in range(n)]


def by_id(run_dir: Path) -> dict[str, Any]:
    lines = results(run_dir)
    ids = [line.rollout_id for line in lines]
    assert len(ids) == len(set(ids)), Counter(ids).most_common(3)
    return {line.rollout_id: line for line in lines}


def worker_pids(run_dir: Path) -> set[int]:
    return {int(line.metrics["pid"]) for line in results(run_dir) if "pid" in line.metrics}


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie does not count)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until_gone(pids: set[int], timeout: float = 10) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {pid for pid in pids if alive(pid)}
        if not left:
            return left
        time.sleep(0.05)
    return {pid for pid in pids if alive(pid)}


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.add(int(entry.name))
    return found


def workers_of(runner: int) -> set[int]:
    """The runner's worker processes (by their command line)."""
    workers = set()
    for pid in children_of(runner):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"osmosis_run.backends._worker" in cmdline:
                workers.add(pid)
    return workers


def first_result(run_dir: Path) -> bool:
    try:
        return (run_dir / "results.jsonl").stat().st_size > 0
    except OSError:
        return False


def wait_for(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# -- the same run as a local one --------------------------------------------------------


def test_the_same_results_and_files_as_a_local_run(tmp_path: Path) -> None:
    rows = [*ok_rows(6), {"id": "wrong", "prompt": "ok", "label": "no"}]
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    local_args = eval_args(dataset, tmp_path / "local")
    local_args[local_args.index("processes")] = "local"
    local = run_eval(tmp_path, *local_args)
    assert local.returncode == 0, local.stderr
    done = run_eval(tmp_path, *eval_args(dataset, tmp_path / "run", "--workers", "2"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # results lines only with --jsonl

    def view(run: str) -> dict[str, tuple[str, float | None]]:
        return {k: (v.status, v.reward) for k, v in by_id(tmp_path / run).items()}

    assert view("run") == view("local")
    pids = worker_pids(tmp_path / "run")
    assert os.getpid() not in pids
    assert len(pids) >= 1
    for rollout in by_id(tmp_path / "run"):
        folder = tmp_path / "run" / "rollouts" / rollout
        assert (folder / "result.json").is_file()
        assert (folder / "trajectory.json").is_file()
        pid = (folder / "artifacts" / "pid.txt").read_text()  # written in place, by a worker
        assert int(pid) in pids
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["backend"]["kind"] == "processes"
    assert summary["backend"]["workers"] == 2
    assert summary["backend"]["workers_lost"] == 0
    assert wait_until_gone(pids) == set()


def test_with_jsonl_stdout_carries_results_lines_only(tmp_path: Path) -> None:
    rows = [{**row, "prompt": "print"} for row in ok_rows(4)]
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    done = run_eval(tmp_path, *eval_args(dataset, tmp_path / "run", "--workers", "2", "--jsonl"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sorted(json.loads(line)["rollout_id"] for line in lines) == [
        f"r{i}.s0" for i in range(4)
    ]
    assert "a workflow's print, which must not reach stdout" in done.stderr
    assert "and a write to file descriptor 1" in done.stderr


@pytest.mark.slow
def test_a_local_run_resumes_on_processes(tmp_path: Path) -> None:
    """The backend is not part of the fingerprint: a run cut short locally (its last three
    results lines lost, as a kill loses them) resumes on workers."""
    dataset = write_jsonl(tmp_path / "d.jsonl", ok_rows(6))
    local_args = eval_args(dataset, tmp_path / "run")
    local_args[local_args.index("processes")] = "local"
    first = run_eval(tmp_path, *local_args)
    assert first.returncode == 0, first.stderr
    path = tmp_path / "run" / "results.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:3]))
    rest = run_eval(tmp_path, *eval_args(dataset, tmp_path / "run", "--workers", "1"))
    assert rest.returncode == 0, rest.stderr
    lines = by_id(tmp_path / "run")
    assert len(lines) == 6
    local_pid = lines["r0.s0"].metrics["pid"]
    assert sum(line.metrics["pid"] != local_pid for line in lines.values()) == 3


@pytest.mark.slow
def test_model_calls_from_the_workers_go_through_the_gateway(tmp_path: Path) -> None:
    """The gateway works from every worker: each rollout is handed its URL and the run's key;
    calls are counted, recorded beside their rollout, and the provider key is in no file."""
    from fake_upstream import serve_upstream

    key = "sk-upstream-SECRET-abcdef0123"
    rows = [
        {"id": f"m{i}", "prompt": "model", "label": "x", "metadata": {"calls": 2}} for i in range(6)
    ]
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    with serve_upstream(api_key=key) as up:
        done = run_eval(
            tmp_path,
            *eval_args(dataset, tmp_path / "run", "--workers", "2"),
            "--chat-completions-url",
            up.url,
            "--api-key",
            key,
        )
    assert done.returncode == 0, done.stderr
    lines = by_id(tmp_path / "run")
    assert {line.status for line in lines.values()} == {"success"}
    assert {line.usage.requests for line in lines.values() if line.usage} == {2}
    assert len(worker_pids(tmp_path / "run")) == 2
    assert sum(line.usage.total_tokens for line in lines.values() if line.usage) == up.total_tokens
    assert sum(seen.path.endswith("/chat/completions") for seen in up.requests) == 12
    assert "model calls      12 (0 retries, 0 rate-limited, 0 failed)" in done.stderr
    calls = (tmp_path / "run" / "rollouts" / "m0.s0" / "model_calls.jsonl").read_text()
    assert len(calls.splitlines()) == 2
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path


# -- crash isolation -------------------------------------------------------------------


@pytest.mark.slow
def test_a_crashing_rollout_fails_alone_and_the_others_finish(tmp_path: Path) -> None:
    rows = [
        *ok_rows(12),
        {"id": "segv", "prompt": "segv", "label": "ok"},
        {"id": "exit", "prompt": "exit", "label": "ok"},
        {"id": "abort", "prompt": "abort", "label": "ok"},
        {"id": "grader-segv", "prompt": "ok", "label": "ok", "metadata": {"grade": "segv"}},
    ]
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    done = run_eval(tmp_path, *eval_args(dataset, tmp_path / "run", "--workers", "2"))
    assert done.returncode == 0, done.stderr
    lines = by_id(tmp_path / "run")
    assert len(lines) == len(rows)
    assert {k: v.status for k, v in lines.items() if k.startswith("r")} == {
        f"r{i}.s0": "success" for i in range(12)
    }
    died = "the worker process running this rollout died"
    assert lines["segv.s0"].error_message == f"{died} (SIGSEGV) 4 times in a row"
    assert lines["exit.s0"].error_message == f"{died} (exit code 3) 4 times in a row"
    assert lines["abort.s0"].error_message == f"{died} (SIGABRT) 4 times in a row"
    assert lines["grader-segv.s0"].error_message == f"{died} (SIGSEGV) 4 times in a row"
    for crashed in ("segv.s0", "exit.s0", "abort.s0", "grader-segv.s0"):
        assert lines[crashed].status == "failure"
        assert lines[crashed].error_category == "agent_error"
        assert lines[crashed].attempts == 1  # losses are not attempts
    notices = [line for line in done.stderr.splitlines() if line.startswith("osmosis-run: worker")]
    assert notices, done.stderr
    assert all(" died (" in line for line in notices)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # Each crasher dies alone 3 times after the death it may have shared with others.
    assert summary["backend"]["workers_lost"] == len(notices) >= 13


@pytest.mark.slow
def test_a_worker_killed_from_outside_loses_no_rollout(tmp_path: Path) -> None:
    rows = ok_rows(40)
    for row in rows:
        row["prompt"], row["metadata"] = "slow", {"seconds": 0.2}
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    args = eval_args(dataset, tmp_path / "run", "--workers", "2", "--concurrency", "8")
    with eval_child(tmp_path, *args) as child:
        workers = wait_for(lambda: workers_of(child.pid), "the workers")
        wait_for(lambda: first_result(tmp_path / "run"), "a first result")
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        _, stderr = child.communicate(timeout=60)
    assert child.returncode == 0, stderr
    lines = by_id(tmp_path / "run")
    assert len(lines) == 40
    assert {line.status for line in lines.values()} == {"success"}
    assert f"osmosis-run: worker process {victim} died (SIGKILL);" in stderr


# -- hard deadlines --------------------------------------------------------------------


@pytest.mark.slow
def test_code_that_never_yields_is_killed_at_its_deadline_and_the_others_finish(
    tmp_path: Path,
) -> None:
    rows = [
        {"id": "block", "prompt": "block", "label": "ok", "metadata": {"seconds": 60}},
        *ok_rows(8),
    ]
    for row in rows[1:]:
        row["prompt"], row["metadata"] = "slow", {"seconds": 0.3}
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    args = eval_args(dataset, tmp_path / "run", "--workers", "2", "--agent-timeout", "1")
    started = time.monotonic()
    done = run_eval(tmp_path, *args)
    wall = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    lines = by_id(tmp_path / "run")
    assert lines["block.s0"].status == "timeout"
    assert lines["block.s0"].error_category == "timeout"
    assert lines["block.s0"].error_message == (
        "workflow exceeded its 1s deadline and was killed after not stopping at its deadline "
        "(its worker process was replaced)"
    )
    assert all(lines[f"r{i}.s0"].status == "success" for i in range(8))
    assert wall < 1 + HARD_GRACE_S + 20  # nowhere near the 60 s the code asked for
    assert (
        "osmosis-run: the workflow of rollout block.s0 did not stop at its 1 s deadline"
        in done.stderr
    )


@pytest.mark.slow
def test_a_grader_that_never_yields_is_killed_and_the_sample_is_kept(tmp_path: Path) -> None:
    rows = [{"id": "g", "prompt": "ok", "label": "ok", "metadata": {"grade": "block"}}]
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    args = eval_args(dataset, tmp_path / "run", "--workers", "1", "--grader-timeout", "1")
    done = run_eval(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    line = by_id(tmp_path / "run")["g.s0"]
    assert line.status == "timeout"
    assert line.error_message == (
        "grader exceeded its 1s deadline and was killed after not stopping at its deadline "
        "(its worker process was replaced)"
    )
    assert line.messages is not None
    assert line.messages[-1]["content"] == "ok"


@pytest.mark.slow
def test_a_subprocess_a_killed_rollout_started_dies_with_its_worker(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    rows = [{"id": "s", "prompt": "spawn", "label": "ok", "metadata": {"pidfile": str(pidfile)}}]
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    args = eval_args(dataset, tmp_path / "run", "--workers", "1", "--agent-timeout", "1")
    done = run_eval(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert by_id(tmp_path / "run")["s.s0"].status == "timeout"
    sleeper = int(pidfile.read_text())
    assert wait_until_gone({sleeper}) == set(), "the rollout's `sleep 600` outlived its worker"


# -- memory and recycling ----------------------------------------------------------------


@pytest.mark.slow
def test_a_worker_over_its_memory_limit_is_killed_and_the_culprit_recorded(
    tmp_path: Path,
) -> None:
    rows = [
        {"id": "hog", "prompt": "hog", "label": "ok", "metadata": {"mb": 400, "seconds": 20}},
        *ok_rows(6),
    ]
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    args = eval_args(dataset, tmp_path / "run", "--workers", "2", "--max-worker-memory", "200MiB")
    done = run_eval(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    lines = by_id(tmp_path / "run")
    hog = lines["hog.s0"]
    assert hog.status == "failure"
    assert hog.error_category == "agent_error"
    assert hog.error_message is not None
    assert hog.error_message.startswith(
        "the worker process running this rollout exceeded --max-worker-memory 200 MiB ("
    )
    assert all(lines[f"r{i}.s0"].status == "success" for i in range(6))
    assert "exceeded --max-worker-memory 200 MiB" in done.stderr


def test_worker_recycle_replaces_each_worker_after_n_rollouts(tmp_path: Path) -> None:
    dataset = write_jsonl(tmp_path / "d.jsonl", ok_rows(10))
    args = eval_args(dataset, tmp_path / "run", "--workers", "1", "--worker-recycle", "3")
    done = run_eval(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    per_worker = Counter(int(line.metrics["pid"]) for line in results(tmp_path / "run"))
    assert sum(per_worker.values()) == 10
    assert max(per_worker.values()) <= 3
    assert len(per_worker) >= 4
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["backend"]["started"] >= 4
    assert summary["backend"]["workers_lost"] == 0


# -- signals and orphans ---------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_exits_130_and_the_resume_runs_exactly_the_rest(tmp_path: Path) -> None:
    rows = ok_rows(30)
    for row in rows:
        row["prompt"], row["metadata"] = "slow", {"seconds": 0.5}
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    args = eval_args(dataset, tmp_path / "run", "--workers", "2", "--concurrency", "4")
    with eval_child(tmp_path, *args) as child:
        workers = wait_for(lambda: workers_of(child.pid), "the workers")
        wait_for(lambda: first_result(tmp_path / "run"), "a first result")
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == 130, stderr
    assert wait_until_gone(workers) == set()
    first = len(by_id(tmp_path / "run"))
    assert 0 < first < 30
    rest = run_eval(tmp_path, *args)
    assert rest.returncode == 0, rest.stderr
    assert len(by_id(tmp_path / "run")) == 30


@pytest.mark.slow
def test_ctrl_c_while_the_workers_load_stops_the_run_before_any_rollout(tmp_path: Path) -> None:
    """The scheduler's stop reaches an executor still getting ready (it was lost before: the
    run went on once the workers were ready)."""
    (tmp_path / "slow_import.py").write_text(
        "import sys, time\nfrom process_flows import Flow\n"
        "if sys.argv[0].endswith('_worker.py'):\n    time.sleep(30)  # a heavy import\n"
    )
    dataset = write_jsonl(tmp_path / "d.jsonl", ok_rows(4))
    args = eval_args(dataset, tmp_path / "run", "--workers", "2")
    args[args.index("process_flows:Flow")] = "slow_import:Flow"
    with eval_child(tmp_path, *args) as child:
        wait_for(lambda: len(workers_of(child.pid)) == 2, "the workers")
        wait_for(lambda: (tmp_path / "run").is_dir(), "the run directory")
        time.sleep(0.5)
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=20)
    assert child.returncode == 130, stderr
    assert results(tmp_path / "run") == []


@pytest.mark.slow
def test_ctrl_c_ends_rollouts_that_block_their_worker(tmp_path: Path) -> None:
    """Cancelled code that never yields cannot stop: its worker's group is killed, within the
    grace, and the run exits 130 all the same."""
    rows = [{**row, "prompt": "block", "metadata": {"seconds": 60}} for row in ok_rows(4)]
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    args = eval_args(dataset, tmp_path / "run", "--workers", "2")
    with eval_child(tmp_path, *args) as child:
        workers = wait_for(lambda: workers_of(child.pid), "the workers")
        guards = set().union(*(children_of(pid) for pid in workers))
        time.sleep(1)  # the rollouts are in their blocking code
        child.send_signal(signal.SIGINT)
        started = time.monotonic()
        _, stderr = child.communicate(timeout=30)
        waited = time.monotonic() - started
    assert child.returncode == 130, stderr
    assert waited < 15
    assert wait_until_gone({*workers, *guards}) == set()


@pytest.mark.slow
def test_a_second_ctrl_c_exits_at_once_and_the_workers_die_too(tmp_path: Path) -> None:
    rows = [{**row, "prompt": "block", "metadata": {"seconds": 60}} for row in ok_rows(4)]
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    args = eval_args(dataset, tmp_path / "run", "--workers", "2")
    with eval_child(tmp_path, *args) as child:
        workers = wait_for(lambda: workers_of(child.pid), "the workers")
        guards = set().union(*(children_of(pid) for pid in workers))
        time.sleep(1)  # the rollouts are in their blocking code
        child.send_signal(signal.SIGINT)
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        started = time.monotonic()
        child.communicate(timeout=10)
        assert time.monotonic() - started < 2
    assert child.returncode == 130
    assert wait_until_gone({*workers, *guards}) == set()


@pytest.mark.slow
def test_a_runner_killed_leaves_no_worker_and_no_rollout_subprocess(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    rows = [
        {"id": "s", "prompt": "spawn", "label": "ok", "metadata": {"pidfile": str(pidfile)}},
        *[{**row, "prompt": "slow", "metadata": {"seconds": 30}} for row in ok_rows(4)],
    ]
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    args = eval_args(dataset, tmp_path / "run", "--workers", "2")
    with eval_child(tmp_path, *args) as child:
        workers = wait_for(lambda: workers_of(child.pid), "the workers")
        wait_for(pidfile.exists, "the rollout's subprocess")
        wait_for(lambda: pidfile.read_text().strip(), "its pid")
        guards = set().union(*(children_of(pid) for pid in workers))
        sleeper = int(pidfile.read_text())
        child.kill()  # SIGKILL: the runner runs no code of its own after this
        child.communicate(timeout=10)
    left = wait_until_gone({*workers, *guards, sleeper})
    assert left == set(), f"still running after the runner was killed: {left}"


# -- options -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--workers", "0"],
            {},
            "error: --workers (command line): Input should be greater than or equal to 1 (got '0')",
        ),
        (
            ["--workers", "-1"],
            {},
            "error: --workers (command line): Input should be greater than or equal to 1 "
            "(got '-1')",
        ),
        (
            ["--workers", "lots"],
            {},
            "error: --workers (command line): Input should be a valid integer, unable to parse "
            "string as an integer (got 'lots')",
        ),
        (
            ["--max-worker-memory", "12parsecs"],
            {},
            "error: --max-worker-memory (command line): Input should be a size such as 2GiB, "
            "512MiB or 1.5GB (got '12parsecs')",
        ),
        (
            [],
            {"OSMOSIS_RUN_WORKERS": "lots"},
            "error: --workers (OSMOSIS_RUN_WORKERS): Input should be a valid integer, unable to "
            "parse string as an integer (got 'lots')",
        ),
        (
            ["--worker-recycle", "0"],
            {},
            "error: --worker-recycle (command line): Input should be greater than or equal to "
            "1 (got '0')",
        ),
    ],
)
def test_bad_worker_options_are_one_line_and_exit_2(
    cli: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    args: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    write_jsonl(tmp_path / "d.jsonl", ok_rows(1))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    bad = cli("eval", "d.jsonl", *FLOWS, "--backend", "processes", *args)
    assert bad.exit_code == 2
    assert bad.stderr == message + "\n"


def test_a_bad_size_in_a_config_file_names_the_key(cli: Any, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "d.jsonl", ok_rows(1))
    (tmp_path / "eval.toml").write_text(
        'dataset = "d.jsonl"\nworkflow = "process_flows:Flow"\nbackend = "processes"\n'
        'max_worker_memory = "lots"\n'
    )
    bad = cli("eval", "--config", "eval.toml")
    assert bad.exit_code == 2
    assert bad.stderr == (
        "error: --max-worker-memory (max_worker_memory in eval.toml): Input should be a size "
        "such as 2GiB, 512MiB or 1.5GB (got 'lots')\n"
    )


def test_a_workflow_a_worker_cannot_load_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "breaks.py").write_text(
        "import sys\nfrom osmosis_run import AgentWorkflow\n"
        "if sys.argv[0].endswith('_worker.py'):  # fails in a worker process only\n"
        "    raise ImportError('not in a worker')\n"
        "class W(AgentWorkflow):\n    async def run(self, ctx):\n        return None\n"
    )
    dataset = write_jsonl(tmp_path / "d.jsonl", ok_rows(1))
    command = [sys.executable, "-m", "osmosis_run", "eval", str(dataset), "-w", "breaks:W"]
    done = subprocess.run(
        [*command, "--backend", "processes", "--workers", "1"],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        'error: in a worker process: importing "breaks" (for "breaks:W") raised ImportError: '
        "not in a worker"
    )


def test_sizes_and_exits_in_words() -> None:
    assert parse_size("2GiB") == 2 * 1024**3
    assert parse_size("512MiB") == 512 * 1024**2
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("800M") == 800_000_000
    assert parse_size("1048576") == 1048576
    assert format_size(2 * 1024**3) == "2 GiB"
    assert format_size(200 * 1024**2) == "200 MiB"
    assert format_size(1_500_000_000) == "1.5 GB"
    assert describe_exit(-11) == "SIGSEGV"
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(-9, verb=True) == "was killed by SIGKILL"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--workers", "2"],
            "error: --workers is an option of worker processes; add --backend processes",
        ),
        (
            ["--backend", "ray", "--worker-recycle", "5", "--max-worker-memory", "1GiB"],
            "error: --max-worker-memory and --worker-recycle are options of worker processes; "
            "add --backend processes",
        ),
        (
            ["--backend", "processes", "--server", "http://127.0.0.1:9"],
            "error: --backend processes runs the rollouts from here, but --server has the "
            "rollout server run them; drop one of the two",
        ),
    ],
)
def test_options_of_a_backend_the_run_does_not_use_are_refused(
    cli: Any, tmp_path: Path, args: list[str], message: str
) -> None:
    write_jsonl(tmp_path / "d.jsonl", ok_rows(1))
    bad = cli("eval", "d.jsonl", *FLOWS, *args)
    assert bad.exit_code == 2
    assert bad.stderr == message + "\n"
