"""W8: osmosis-ai's ``RolloutClient`` drives 2,000 trivial rollouts at concurrency 64 against
``osmosis-run serve``, then against osmosis-ai's own server; same fixture, same client.

Judged on the server process's own CPU seconds (``/proc/<pid>/stat``, its descendants
included: osmosis-run's writer process), counted from the first admission to the last result;
the wall times are printed beside them. Target: osmosis-ai's CPU / osmosis-run's >= 1.5.

Both servers run the same trivial workflow (answer at once) and grader (reward 1.0) with a
concurrency of 64, logging only warnings, no access log, and both record every rollout into a
new directory of the run's temporary tree. osmosis-ai makes ``<id>/artifacts/``, a
``.osmosis-health-check`` file and the ATIF ``trajectory.json`` under its artifact root,
``$_OSMOSIS_ROLLOUT_ARTIFACT_ROOT`` (unset, it is ``~/.osmosis``: a run there reuses the
directories an earlier run made, creating no files, and fills the home directory);
osmosis-run makes its run directory (``rollouts/<id>/{artifacts/, result.json,
trajectory.json}`` and a results line). The line counts what each left behind.

Needs a Python with osmosis-ai 0.3.8 and osmosis-run importable (the interop venv)::

    PYTHONPATH=. /work/venv312/bin/python -m tests.perf.w8_serve [--rollouts N]

``python -m tests.perf --only W8`` runs this in ``$OSMOSIS_RUN_INTEROP_PYTHON``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROLLOUTS = 2_000
CONCURRENCY = 64
TARGET = 1.5
TESTS_DIR = Path(__file__).resolve().parent.parent
REPO = TESTS_DIR.parent

OSMOSIS_AI_SERVER = """
import sys, uvicorn
from osmosis_ai.rollout import (
    AgentWorkflow, AgentWorkflowConfig, ConcurrencyConfig, Grader, LocalBackend,
)
from osmosis_ai.rollout.server import create_rollout_server

class Trivial(AgentWorkflow):
    async def run(self, ctx):
        return [*ctx.prompt, {"role": "assistant", "content": "ok"}]

class Always(Grader):
    async def grade(self, ctx):
        ctx.set_reward(1.0)

config = AgentWorkflowConfig(name="w8", concurrency=ConcurrencyConfig(max_concurrent=64))
backend = LocalBackend(workflow=Trivial, workflow_config=config, grader=Always)
app = create_rollout_server(backend=backend, configure_logging=False)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
            access_log=False, timeout_keep_alive=2160)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
            for task in Path(f"/proc/{current}/task").iterdir():
                children = (task / "children").read_text().split()
                pending.extend(int(c) for c in children)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError("the server did not start")


async def _drive(url: str, rollouts: int, prefix: str) -> tuple[float, int]:
    import httpx

    # Imported by name: this module type-checks where osmosis-ai is not installed.
    RolloutClient = importlib.import_module("osmosis_ai.rollout.client").RolloutClient
    limits = httpx.Limits(
        max_connections=CONCURRENCY + 8, max_keepalive_connections=CONCURRENCY + 8
    )
    async with httpx.AsyncClient(limits=limits, timeout=60) as http:
        client = RolloutClient(url=url, http_client=http)
        window = asyncio.Semaphore(CONCURRENCY)
        ok = 0

        async def one(i: int) -> None:
            nonlocal ok
            async with window:
                result = await client.run_rollout(
                    [{"role": "user", "content": f"q{i}"}],
                    "http://127.0.0.1:9/v1",
                    f"{prefix}-{i}",
                    label="ok",
                )
                ok += str(result.status) == "success"

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(rollouts)))
        return time.perf_counter() - started, ok


def _count(root: Path, name: str) -> int:
    """How many ``<root>/<id>/<name>`` files there are."""
    return sum(1 for _ in root.glob(f"*/{name}")) if root.is_dir() else 0


def _measure(cmd: list[str], port: int, rollouts: int, env: dict[str, str]) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_ready(url, proc)
        asyncio.run(_drive(url, 50, "warm"))  # connections, imports, first-call caches
        before = _cpu_s(proc.pid)
        wall, ok = asyncio.run(_drive(url, rollouts, "w8"))
        cpu = _cpu_s(proc.pid) - before
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if ok != rollouts:
        raise RuntimeError(f"only {ok} of {rollouts} rollouts succeeded")
    return {"server_cpu_s": cpu, "wall_s": wall}


def run(rollouts: int = ROLLOUTS) -> dict[str, Any]:
    """Measure both servers; return W8's JSON line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSMOSIS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(TESTS_DIR), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory(prefix="osmosis-w8-") as tmp:
        theirs_root = Path(tmp) / "osmosis-ai-artifacts"
        ours_dir = Path(tmp) / "osmosis-run-run"
        env["_OSMOSIS_ROLLOUT_ARTIFACT_ROOT"] = str(theirs_root)  # osmosis-ai's name for it
        ours_port = _free_port()
        ours = _measure(
            [
                sys.executable,
                "-m",
                "osmosis_run",
                "serve",
                "-w",
                "server_flows:Trivial",
                "-g",
                "server_flows:Always",
                "-c",
                str(CONCURRENCY),
                "--port",
                str(ours_port),
                "--out",
                str(ours_dir),
            ],
            ours_port,
            rollouts,
            env,
        )
        theirs_port = _free_port()
        theirs = _measure(
            [sys.executable, "-c", OSMOSIS_AI_SERVER, str(theirs_port)], theirs_port, rollouts, env
        )
        ours_recorded = _count(ours_dir / "rollouts", "trajectory.json")
        theirs_recorded = _count(theirs_root, "trajectory.json")
    ratio = theirs["server_cpu_s"] / ours["server_cpu_s"]
    return {
        "workload": "W8",
        "figure": round(ratio, 3),
        "target": f">= {TARGET:g}",
        "holds": ratio >= TARGET,
        "basis": (
            "osmosis-ai server CPU s / osmosis-run serve CPU s (/proc utime+stime of the server "
            "process and its descendants, first admission to last result, after a 50-rollout "
            f"warm-up); {rollouts} trivial rollouts, concurrency {CONCURRENCY}, one "
            "osmosis-ai RolloutClient; both servers log warnings only, no access log, and "
            "record every rollout into new directories (trajectories: the warm-up's included)"
        ),
        "rollouts": rollouts,
        "osmosis_run_server_cpu_s": round(ours["server_cpu_s"], 3),
        "osmosis_ai_server_cpu_s": round(theirs["server_cpu_s"], 3),
        "osmosis_run_wall_s": round(ours["wall_s"], 3),
        "osmosis_ai_wall_s": round(theirs["wall_s"], 3),
        "osmosis_run_trajectories": ours_recorded,
        "osmosis_ai_trajectories": theirs_recorded,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


INTEROP_PYTHON_ENV = "OSMOSIS_RUN_INTEROP_PYTHON"


def interop_python() -> str:
    """``$OSMOSIS_RUN_INTEROP_PYTHON``: a Python with osmosis-ai 0.3.8 and osmosis-run.

    Raises:
        HarnessError: it is not set, or is not a file.
    """
    from .workspace import HarnessError

    python = os.environ.get(INTEROP_PYTHON_ENV, "")
    if not python or not Path(python).is_file():
        raise HarnessError(
            f"W8 needs {INTEROP_PYTHON_ENV}: a Python (>= 3.12) with osmosis-ai[server]==0.3.8 "
            "and osmosis-run installed"
        )
    return python


def main(argv: list[str] | None = None) -> int:
    """Print W8's JSON line."""
    parser = argparse.ArgumentParser(prog="python -m tests.perf.w8_serve")
    parser.add_argument("--rollouts", type=int, default=ROLLOUTS)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.rollouts)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
