"""The Ray workloads W9 and W10 (issue 13), each returning the JSON line it reports.

Both run on a two-node local ``cluster_utils.Cluster`` (head 1 CPU, worker node 2 CPUs, small
object stores) started here and ended by its handle; the eval joins it with
``--ray-address``. Ray must not talk on the machine's routable address, so the benchmark runs
inside a private network namespace, as the ray tests do:

    unshare --net -- sh -c 'ip link set lo up && HOME=$(mktemp -d) RAY_USAGE_STATS_ENABLED=0 \\
        python -m tests.perf --only W9,W10'

How the issue's words are read:

- W9 "wall / local eval wall": both whole-process walls (startup included, joining the cluster
  and starting the actors too), 20,000 trivial rollouts; the local eval is W1's command
  (concurrency 64), the Ray eval ``--ray-batch 64`` at the backend's own concurrency (two
  batches per actor in flight). The runners' own walls (summary.json) are reported beside.
- W10 "wall / ideal 1.0 s, runner wall": summary.json's ``wall_s`` of 2,000 rollouts sleeping
  0.05 s at concurrency 100 on Ray, over 2,000 / 100 x 0.05 s, at the user's default settings
  (no batch flag: ``--ray-batch auto``); the same with ``--ray-batch 16`` is reported beside.
"""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from .workspace import ECHO, EXACT_MATCH, FLOWS_MODULE, SLEEPY, HarnessError

if TYPE_CHECKING:
    from .workloads import Bench, Line

W9_ROWS, W10_ROWS = 20_000, 2_000
W9_BATCH = 64
W10_CONCURRENCY = 100
W10_COMPANION_BATCH = 16
SLEEP_S = 0.05
OBJECT_STORE = 100 * 1024 * 1024


@contextmanager
def two_node_cluster() -> Iterator[str]:
    """A head (1 CPU) and a worker node (2 CPUs) on this machine; yields the address."""
    if [name for _, name in socket.if_nameindex()] != ["lo"]:
        raise HarnessError(
            "W9 and W10 start Ray: run them inside a private network namespace (unshare --net "
            "-- sh -c 'ip link set lo up && HOME=$(mktemp -d) RAY_USAGE_STATS_ENABLED=0 "
            "python -m tests.perf --only W9,W10')"
        )
    try:
        from ray.cluster_utils import Cluster
    except ImportError as exc:
        raise HarnessError('W9 and W10 need Ray: pip install -e ".[test]"') from exc
    cluster = Cluster(
        initialize_head=True,
        connect=False,
        head_node_args={
            "num_cpus": 1,
            "object_store_memory": OBJECT_STORE,
            "include_dashboard": False,
        },
    )
    try:
        cluster.add_node(num_cpus=2, object_store_memory=OBJECT_STORE)
        cluster.wait_for_nodes()
        yield str(cluster.address)
    finally:
        cluster.shutdown()  # type: ignore[no-untyped-call]


def code_dir(bench: Bench) -> Path:
    """A folder holding only the flows: the eval's cwd, shipped to the actors as working_dir."""
    folder = bench.ws.root / "ray-code"
    if not folder.is_dir():
        folder.mkdir()
        shutil.copy(bench.ws.root / f"{FLOWS_MODULE}.py", folder)
    return folder


def ray_command(
    bench: Bench, dataset: Path, *, workflow: str, out: Path, address: str
) -> list[str]:
    return [
        *bench.cli,
        "eval",
        str(dataset),
        "--workflow",
        workflow,
        "--grader",
        EXACT_MATCH,
        "--out",
        str(out),
        "--backend",
        "ray",
        "--ray-address",
        address,
    ]


def w9(bench: Bench) -> Line:
    """W9: Ray eval wall / local eval wall, 20,000 trivial rollouts, --ray-batch 64."""
    from .workloads import TRIVIAL_CONCURRENCY, Check, log, report

    rows = bench.rows(W9_ROWS)
    dataset = bench.ws.dataset(rows)
    local = bench.trivial_eval(rows, "W9-local")
    with two_node_cluster() as address:
        out = bench.ws.fresh("W9-ray")
        cmd = [
            *ray_command(bench, dataset, workflow=ECHO, out=out, address=address),
            "--ray-batch",
            str(W9_BATCH),
        ]
        log(f"W9: osmosis-run eval --backend ray, {rows} rows, trivial, --ray-batch {W9_BATCH}")
        on_ray = _run_in(bench, cmd, rows=rows, name="W9", cwd=code_dir(bench))
    return report(
        "W9",
        [
            Check(
                "ray eval wall / local eval wall", on_ray.process.wall_s / local.process.wall_s, 1.5
            )
        ],
        "whole-process walls (startup, joining the cluster and starting the actors included): "
        f"--backend ray --ray-batch {W9_BATCH} on a two-node local cluster (1 + 2 CPUs) / the "
        f"local eval at concurrency {TRIVIAL_CONCURRENCY}; inner_figure: the runners' walls",
        rows=rows,
        ray_batch=W9_BATCH,
        ray_eval_wall_s=on_ray.process.wall_s,
        ray_eval_inner_wall_s=on_ray.inner_wall_s,
        ray_eval_cpu_s=on_ray.process.cpu_s,
        local_eval_wall_s=local.process.wall_s,
        local_eval_inner_wall_s=local.inner_wall_s,
        inner_figure=on_ray.inner_wall_s / local.inner_wall_s,
        ray_rollouts_per_s=rows / on_ray.inner_wall_s,
    )


def w10(bench: Bench) -> Line:
    """W10: runner wall / ideal, 2,000 rollouts sleeping 0.05 s at concurrency 100 on Ray."""
    from .workloads import Check, log, report

    rows = bench.rows(W10_ROWS)
    ideal = rows / W10_CONCURRENCY * SLEEP_S
    dataset = bench.ws.dataset(rows)
    with two_node_cluster() as address:
        out = bench.ws.fresh("W10-ray")
        cmd = [
            *ray_command(bench, dataset, workflow=SLEEPY, out=out, address=address),
            "--concurrency",
            str(W10_CONCURRENCY),
        ]
        log(f"W10: osmosis-run eval --backend ray, {rows} rows, sleeping, concurrency 100")
        on_ray = _run_in(bench, cmd, rows=rows, name="W10", cwd=code_dir(bench))
        batched_cmd = [*cmd, "--ray-batch", str(W10_COMPANION_BATCH)]
        batched_cmd[batched_cmd.index("--out") + 1] = str(bench.ws.fresh("W10-ray-batched"))
        log(f"W10: the same with --ray-batch {W10_COMPANION_BATCH} (a companion figure)")
        batched = _run_in(bench, batched_cmd, rows=rows, name="W10-batched", cwd=code_dir(bench))
    return report(
        "W10",
        [Check("runner wall / ideal", on_ray.inner_wall_s / ideal, 1.3)],
        "the runner's wall (summary.json wall_s) on a two-node local Ray cluster / (rows / "
        "concurrency x 0.05 s), at the default --ray-batch auto (each call carries what waits "
        "for its actor, replies come back as rollouts finish); "
        "whole_process_figure: the eval process wall, startup included; batched_figure: the "
        f"runner's wall / ideal with --ray-batch {W10_COMPANION_BATCH}",
        rows=rows,
        concurrency=W10_CONCURRENCY,
        ideal_s=ideal,
        eval_inner_wall_s=on_ray.inner_wall_s,
        eval_wall_s=on_ray.process.wall_s,
        whole_process_figure=on_ray.process.wall_s / ideal,
        eval_cpu_s=on_ray.process.cpu_s,
        batched_figure=batched.inner_wall_s / ideal,
        batched_eval_inner_wall_s=batched.inner_wall_s,
    )


def _run_in(bench: Bench, cmd: list[str], *, rows: int, name: str, cwd: Path) -> EvalRun:
    """Run an eval from ``cwd`` (the folder shipped to the actors); check every row finished."""
    from .measure import measure
    from .workloads import EvalRun

    out = Path(cmd[cmd.index("--out") + 1])
    process = measure(cmd, cwd=cwd, logs=bench.ws.root / "logs" / name)
    process.check(f"osmosis-run eval ({name})")
    try:
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HarnessError(f"osmosis-run eval ({name}) left no readable summary.json") from exc
    if summary.get("rollouts") != rows or summary.get("counts", {}).get("success") != rows:
        raise HarnessError(
            f"osmosis-run eval ({name}) did not finish {rows} successful rollouts: "
            f"counts={summary.get('counts')}"
        )
    return EvalRun(cmd=cmd, out=out, rows=rows, process=process, summary=summary)


if TYPE_CHECKING:
    from .workloads import EvalRun
