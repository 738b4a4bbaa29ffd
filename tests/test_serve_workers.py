"""``osmosis-run serve --workers N``: the served rollouts in worker processes.

A real ``osmosis-run serve`` subprocess on loopback, driven by a client as a trainer drives it,
serving a workflow (written to ``tmp_path``) that segfaults for one prompt and holds its event
loop for another: the server answers each with its failure, records every rollout once, keeps
serving, and leaves no worker process behind when it stops. Bad values of the options are one
line and exit code 2, in eval's words.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
from conftest import results, subprocess_env
from serving import LEASE, free_port, serving

from osmosis_run.backends.fake import FakeExecutor
from osmosis_run.errors import ConfigError
from osmosis_run.server.settings import resolve_serve_settings
from osmosis_run.store.store import read_summary

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="worker processes: Linux /proc")

FLOWS = '''
import ctypes
import time

from osmosis_run import AgentWorkflow, AgentWorkflowConfig, AgentWorkflowOutput, Grader

CONFIG = AgentWorkflowConfig(name="crashy", shout="")


class Flow(AgentWorkflow):
    """Answers in capitals, and the config's shout; "segv" kills its process, "block" holds
    its event loop 30 s."""

    async def run(self, ctx):
        said = str(ctx.prompt[-1]["content"])
        if said == "segv":
            ctypes.string_at(0)
        if said == "block":
            time.sleep(30)
        answer = {"role": "assistant", "content": said.upper() + ctx.config.shout}
        return AgentWorkflowOutput(messages=[*ctx.prompt, answer])


class Judge(Grader):
    async def grade(self, ctx):
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == ctx.label else 0.0)
'''
DIED = re.compile(
    r"osmosis-run serve: worker process \d+ died \(SIGSEGV\); \d+ rollouts? runs? again"
)
HUNG = re.compile(
    r"osmosis-run serve: the workflow of rollout block did not stop at its 1 s deadline; "
    r"(it was replaced|1 rollout runs again)"
)


class Server:
    """A running ``osmosis-run serve``: its port, its first lines, and a client on it."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "osmosis_run", "serve", "--port", str(self.port), *args],
            cwd=cwd,
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.first_lines = [self.proc.stderr.readline() for _ in range(3)]  # type: ignore[union-attr]
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def admit(self, rollout_id: str, said: str, **fields: Any) -> str:
        body = {
            "rollout_id": rollout_id,
            "initial_messages": [{"role": "user", "content": said}],
            "chat_completions_url": "http://127.0.0.1:9/v1",
            "label": said.upper() + "!",  # the override reached the worker: reward 1
            **fields,
        }
        response = self.client.post("/rollout", json=body)
        assert response.status_code == 202, response.text
        token: str = response.json()["polling_lease_token"]
        return token

    def result(self, rollout_id: str, token: str, *, within: float = 90) -> dict[str, Any]:
        """Long-poll until the rollout's result is final."""
        deadline = time.monotonic() + within
        while True:
            got = self.client.get(f"/rollout/{rollout_id}/result", headers={LEASE: token})
            body: dict[str, Any] = got.json()
            if body["status"] in ("success", "failure", "cancelled"):
                return body
            assert time.monotonic() < deadline, body

    def stop(self) -> tuple[int, str]:
        self.client.close()
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err


# What the server serves: the workers load these paths and the override, as serve did.
CONFIG_FILE = """
workflow = "crashy:Flow"
grader = "crashy:Judge"

[workflow_config]
from = "crashy:CONFIG"
shout = "!"

[serve]
workers = 2
concurrency = 8
"""


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    (tmp_path / "crashy.py").write_text(FLOWS, encoding="utf-8")
    (tmp_path / "serve.toml").write_text(CONFIG_FILE, encoding="utf-8")
    started: list[Server] = []

    def start(*args: str) -> Server:
        server = Server(tmp_path, *args)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.communicate()


class Seen(NamedTuple):
    """A process seen under the server: its process group, start time, and whether it is a
    worker process."""

    group: int
    start: str
    worker: bool


def _processes() -> dict[int, tuple[int, int, str]]:
    """Every process on the machine: pid -> (parent, process group, start time)."""
    found: dict[int, tuple[int, int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
        found[int(entry)] = (int(fields[1]), int(fields[2]), fields[19])
    return found


def _descendants(pid: int) -> dict[int, Seen]:
    """The processes under ``pid``: its children (workers, the writer), theirs (guards)..."""
    table = _processes()
    under: dict[int, Seen] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, group, start) in table.items():
            if ppid == parent and child not in under:
                try:
                    command = Path(f"/proc/{child}/cmdline").read_bytes()
                except OSError:
                    command = b""
                under[child] = Seen(group, start, b"osmosis_run.backends._worker" in command)
                todo.append(child)
    return under


def _worker_groups(seen: dict[int, Seen]) -> set[int]:
    """The process groups of the worker processes (each leads its own)."""
    return {pid for pid, process in seen.items() if process.worker and process.group == pid}


def _left(seen: dict[int, Seen], groups: set[int]) -> list[int]:
    """Those of ``seen`` still running (the same process: its start time), and any process
    still in one of ``groups``."""
    table = _processes()
    same = [pid for pid, process in seen.items() if table.get(pid, (0, 0, ""))[2] == process.start]
    return same + [pid for pid, (_, group, _) in table.items() if group in groups]


@pytest.mark.slow
def test_a_crash_and_a_hang_fail_their_rollouts_alone_and_the_server_goes_on(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    out = tmp_path / "served"
    server = serve("--config", "serve.toml", "--out", str(out))
    assert server.first_lines == [
        f"osmosis-run serve: listening on {server.url}\n",
        f"osmosis-run serve: recording to {out}\n",
        "osmosis-run serve: running the rollouts in 2 worker process(es)\n",
    ]
    seen = _descendants(server.proc.pid)
    assert len(_worker_groups(seen)) == 2  # the two workers, ready before the first line

    # A segfault among rollouts that answer: they run again and succeed; it fails alone.
    tokens = {f"ok-{i}": server.admit(f"ok-{i}", f"hi {i}") for i in range(4)}
    tokens["segv"] = server.admit("segv", "segv")
    answers = {rollout: server.result(rollout, token) for rollout, token in tokens.items()}
    crashed = answers.pop("segv")
    assert (crashed["status"], crashed["err_category"], crashed["err_message"]) == (
        "failure",
        "agent_error",
        "the worker process running this rollout died (SIGSEGV) 4 times in a row",
    )
    assert {r: (a["status"], a["sample"]["reward"]) for r, a in answers.items()} == {
        f"ok-{i}": ("success", 1.0) for i in range(4)
    }
    seen |= _descendants(server.proc.pid)

    # Code that never yields: killed 2 s past its 1 s deadline, with its worker.
    started = time.monotonic()
    blocked_token = server.admit("block", "block", agent_timeout_sec=1)
    beside_token = server.admit("beside", "beside")
    blocked = server.result("block", blocked_token)
    took = time.monotonic() - started
    assert (blocked["status"], blocked["err_category"], blocked["err_message"]) == (
        "failure",
        "timeout",
        "workflow exceeded its 1s deadline and was killed after not stopping at its deadline "
        "(its worker process was replaced)",
    )
    assert took < 10, took
    assert server.result("beside", beside_token)["status"] == "success"
    seen |= _descendants(server.proc.pid)

    # The server goes on serving, on fresh workers.
    assert server.result("after", server.admit("after", "after"))["status"] == "success"
    assert server.client.get("/health").json()["lifecycle"]["accepting_rollouts"] is True
    seen |= _descendants(server.proc.pid)

    code, err = server.stop()
    assert code == 0, err
    lines = err.splitlines()  # each loss as it happened, and nothing else
    assert [bool(DIED.fullmatch(line)) for line in lines[:4]] == [True] * 4, err
    assert HUNG.fullmatch(lines[4]), err
    assert lines[5:] == [
        "osmosis-run serve: stopping: admissions closed, draining 0 rollout(s) in flight",
        f"osmosis-run serve: stopped; 8 rollout(s) recorded in {out}",
    ]

    # Exactly one line per rollout id, read back through the library's models.
    raw = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    recorded = results(out)
    assert len(raw) == len(recorded) == 8
    assert Counter(line.rollout_id for line in recorded) == Counter(
        ["ok-0", "ok-1", "ok-2", "ok-3", "segv", "block", "beside", "after"]
    )
    by_id = {line.rollout_id: line for line in recorded}
    assert (by_id["segv"].status, by_id["block"].status) == ("failure", "timeout")
    summary = read_summary(out)
    assert summary is not None
    assert summary.backend is not None
    assert (summary.backend["kind"], summary.backend["workers"]) == ("processes", 2)
    assert summary.backend["workers_lost"] == 5  # 4 to the segfault, 1 to the hang

    # Nothing outlives the server: no worker, no guard, nothing in a worker's process group.
    groups = _worker_groups(seen)
    deadline = time.monotonic() + 5
    while _left(seen, groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _left(seen, groups) == []


def test_a_workflow_a_worker_cannot_load_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "breaks.py").write_text(
        "import sys\nfrom osmosis_run import AgentWorkflow\n"
        "if sys.argv[0].endswith('_worker.py'):  # fails in a worker process only\n"
        "    raise ImportError('not in a worker')\n"
        "class W(AgentWorkflow):\n    async def run(self, ctx):\n        return None\n"
    )
    command = [sys.executable, "-m", "osmosis_run", "serve", "-w", "breaks:W", "--workers", "1"]
    done = subprocess.run(
        [*command, "--port", str(free_port()), "--out", "r"],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        'error: in a worker process: importing "breaks" (for "breaks:W") raised ImportError: '
        "not in a worker\n"
    )


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--workers", "0"],
            {},
            "--workers (command line): Input should be greater than or equal to 1 (got '0')",
        ),
        (
            ["--workers", "-1"],
            {},
            "--workers (command line): Input should be greater than or equal to 1 (got '-1')",
        ),
        (
            ["--workers", "lots"],
            {},
            "--workers (command line): Input should be a valid integer, unable to parse "
            "string as an integer (got 'lots')",
        ),
        (
            ["--workers", "2", "--max-worker-memory", "12parsecs"],
            {},
            "--max-worker-memory (command line): Input should be a size such as 2GiB, "
            "512MiB or 1.5GB (got '12parsecs')",
        ),
        (
            ["--workers", "2", "--worker-recycle", "0"],
            {},
            "--worker-recycle (command line): Input should be greater than or equal to 1 (got '0')",
        ),
        (
            [],
            {"OSMOSIS_RUN_WORKERS": "lots"},
            "--workers (OSMOSIS_RUN_WORKERS): Input should be a valid integer, unable to "
            "parse string as an integer (got 'lots')",
        ),
        (
            ["--workers", "2"],
            {"OSMOSIS_RUN_MAX_WORKER_MEMORY": "12parsecs"},
            "--max-worker-memory (OSMOSIS_RUN_MAX_WORKER_MEMORY): Input should be a size such "
            "as 2GiB, 512MiB or 1.5GB (got '12parsecs')",
        ),
        (
            ["--max-worker-memory", "2GiB"],
            {},
            "--max-worker-memory is an option of worker processes; add --workers N",
        ),
        (
            ["--worker-recycle", "5", "--max-worker-memory", "2GiB"],
            {},
            "--max-worker-memory and --worker-recycle are options of worker processes; add "
            "--workers N",
        ),
        (
            [],
            {"OSMOSIS_RUN_WORKER_RECYCLE": "50"},
            "--worker-recycle is an option of worker processes; add --workers N",
        ),
    ],
)
def test_bad_worker_options_are_one_line_and_exit_2(
    cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = cli("serve", "-w", "server_flows:Upper", *args, "--out", "r")
    assert result.exit_code == 2
    assert result.stderr == f"error: {message}\n"


def test_a_bad_worker_count_in_the_serve_table_names_the_key(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    (tmp_path / "eval.toml").write_text(
        'workflow = "server_flows:Upper"\n[serve]\nworkers = 0\nmax_worker_memory = "1GiB"\n'
    )
    result = cli("serve", "--config", "eval.toml")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --workers (serve.workers in eval.toml): Input should be greater than or equal "
        "to 1 (got 0)\n"
    )


def test_the_worker_options_precedence_and_the_environment_alone(tmp_path: Path) -> None:
    config = tmp_path / "eval.toml"
    config.write_text('[serve]\nworkers = 2\nmax_worker_memory = "512MiB"\nworker_recycle = 100\n')
    from_file = resolve_serve_settings({}, config_file=config, environ={})
    assert (from_file.workers, from_file.max_worker_memory, from_file.worker_recycle) == (
        2,
        512 * 1024**2,
        100,
    )
    env = {"OSMOSIS_RUN_WORKERS": "3", "OSMOSIS_RUN_MAX_WORKER_MEMORY": "1GiB"}
    from_env = resolve_serve_settings({}, config_file=config, environ=env)
    assert (from_env.workers, from_env.max_worker_memory, from_env.worker_recycle) == (
        3,
        1024**3,
        100,
    )
    from_cli = resolve_serve_settings(
        {"workers": "4", "worker_recycle": "7"}, config_file=config, environ=env
    )
    assert (from_cli.workers, from_cli.max_worker_memory, from_cli.worker_recycle) == (
        4,
        1024**3,
        7,
    )
    defaults = resolve_serve_settings({}, environ={})
    assert (defaults.workers, defaults.max_worker_memory, defaults.worker_recycle) == (
        None,
        None,
        None,
    )
    (tmp_path / "limits.toml").write_text("[serve]\nworker_recycle = 50\n")
    with pytest.raises(ConfigError) as refused:
        resolve_serve_settings({}, config_file=tmp_path / "limits.toml", environ={})
    assert str(refused.value) == (
        "--worker-recycle is an option of worker processes; add --workers N"
    )


def test_an_executor_given_runs_the_served_rollouts_within_its_own_limit(tmp_path: Path) -> None:
    """``create_rollout_server(executor=...)``, as serve runs a module-level HarborBackend: the
    executor runs each rollout, its limit is the server's, it opens and closes with the server."""
    executor = FakeExecutor(lambda _attempt: FakeExecutor.success(reward=0.5), limit=3)
    with serving(tmp_path, executor=executor) as served:
        assert executor.opened
        health = served.client.get("/health").json()
        assert health["concurrency"]["max_concurrent"] == 3
        body = served.result("r1", served.admit("r1", label="HI"))
    assert (body["status"], body["sample"]["reward"]) == ("success", 0.5)
    assert executor.closed
    assert [a.request.id for a in executor.attempts] == ["r1"]
    assert [(x.rollout_id, x.reward) for x in results(tmp_path / "run")] == [("r1", 0.5)]
