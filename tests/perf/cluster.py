"""The two-host Ray benchmark W17: ``python -m tests.perf.cluster --only W17 [--scale S]``.

- W17: 2,000 rollouts, each making 4 sequential calls to a fake upstream answering in 50 ms, at
  concurrency 256, with ``--backend ray`` on a cluster of two hosts (tests/hosts.py: two
  network namespaces joined by a veth pair; the head, 1 CPU, and the driver on host A, a worker
  node with 2 CPUs on host B, 3 actors of 1 CPU each: 1 on A, 2 on B; the upstream on host A's address). Run with the gateway
  (the workers on host B call it across the veth) and with ``--no-gateway``, alternating;
  medians of ``--repeats`` pairs. Figures: the runner's wall through the gateway divided by its
  wall with ``--no-gateway`` (target <= 1.15); the gateway's CPU per call (summary.json's
  ``model.gateway.cpu_s`` / calls); the CPU seconds each host spent on the run (every process in
  its namespace, read from /proc while it runs; the driver's own from its rusage), so that the
  busiest host is named.

Walls are the runner's (summary.json's ``wall_s``: first rollout to last result). The machine is
shared: ``loadavg_1m`` says how busy it was. Needs root (``ip netns``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from .workloads import Check, Line, log, report

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: hosts, fake_upstream
from hosts import FakeModel, Host, RayCluster, two_hosts

ROLLOUTS, CALLS, CONCURRENCY, DELAY_S, ACTORS = 2000, 4, 256, 0.05, 3
HERE = Path(__file__).resolve().parent


class CpuWatch:
    """CPU seconds each host's processes spend from now on, sampled from /proc every 0.2 s (a
    process that ends between samples loses at most its last 0.2 s)."""

    def __init__(self, hosts: list[Host]) -> None:
        self.hosts = hosts
        self.base = {host.netns: host.cpu_s() for host in hosts}
        self.last: dict[str, dict[int, float]] = {host.netns: {} for host in hosts}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while True:
            for host in self.hosts:
                self.last[host.netns].update(host.cpu_s())
            if self.done.wait(0.2):
                return

    def stop(self, skip: set[int]) -> dict[str, float]:
        """Each host's CPU seconds, leaving out the processes ``skip``."""
        self.done.set()
        self.thread.join()
        spent: dict[str, float] = {}
        for host in self.hosts:
            base, last = self.base[host.netns], self.last[host.netns]
            spent[host.netns] = sum(
                cpu - base.get(pid, 0.0) for pid, cpu in last.items() if pid not in skip
            )
        return spent


class Runs:
    """A folder with the dataset and the workflow (shipped to the workers), and the runs in it."""

    def __init__(self, root: Path, rows: int, cluster: RayCluster, up: FakeModel) -> None:
        self.root, self.cluster, self.up = root, cluster, up
        self.url = up.url
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy(HERE / "gateway_flows.py", root / "gateway_flows.py")
        for name, count in (("rows.jsonl", rows), ("warm.jsonl", CONCURRENCY)):
            with (root / name).open("w") as f:
                for i in range(count):
                    f.write(json.dumps({"id": i, "prompt": f"question number {i}"}) + "\n")

    def eval(self, name: str, *extra: str, data: str = "rows.jsonl") -> dict[str, Any]:
        """One run on host A; its summary, with the CPU each host spent (``cpu_s_by_host``: the
        upstream's process left out, the driver's counted from its rusage)."""
        a, b = self.cluster.head, self.cluster.worker
        cmd = [
            sys.executable, "-m", "osmosis_run", "eval", data, "-w", "gateway_flows:Caller",
            "--chat-completions-url", self.url, "--concurrency", str(CONCURRENCY), "--out", name,
            "--api-key", "sk-bench-upstream-key", "--backend", "ray", "--ray-address",
            self.cluster.address, "--ray-actors", str(ACTORS), "--ray-actor-cpus", "1", *extra,
        ]  # fmt: skip
        env = a.env()
        env["PYTHONPATH"] = str(self.root)  # the bench's gateway_flows, not the tests' one
        logs = (self.root / f"{name}.out").open("w"), (self.root / f"{name}.err").open("w")
        watch = CpuWatch([a, b])
        child = subprocess.Popen(
            a.command(cmd), cwd=self.root, env=env, stdout=logs[0], stderr=logs[1]
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        assert self.up.process is not None
        spent = watch.stop(skip={child.pid, self.up.process.pid})
        for f in logs:
            f.close()
        if child.returncode != 0:
            err = (self.root / f"{name}.err").read_text()[-3000:]
            raise RuntimeError(f"eval {name} exited {child.returncode}:\n{err}")
        spent[a.netns] += usage.ru_utime + usage.ru_stime
        doc: dict[str, Any] = json.loads((self.root / name / "summary.json").read_text())
        doc["cpu_s_by_host"] = {"A": spent[a.netns], "B": spent[b.netns]}
        return doc


def w17(rows: int, repeats: int, root: Path) -> Line:
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    with two_hosts() as (a, b), RayCluster(a, b) as cluster, FakeModel(a, delay=DELAY_S) as up:
        runs = Runs(root / "w17", rows, cluster, up)
        runs.eval(
            "warm", "--no-gateway", data="warm.jsonl"
        )  # the workers' first start and code shipping
        for n in range(repeats):  # alternating, so that the machine's drift hits both alike
            log(f"W17 pair {n + 1} of {repeats}")
            direct = runs.eval(f"direct{n}", "--no-gateway")
            through = runs.eval(f"gateway{n}")
            pairs.append((direct, through))
    ratios = [t["wall_s"] / d["wall_s"] for d, t in pairs]
    ratio = statistics.median(ratios)
    calls = rows * CALLS
    cpu_per_call = statistics.median(
        1000 * t["model"]["gateway"].get("cpu_s", 0.0) / max(1, t["model"]["gateway"]["calls"])
        for _, t in pairs
    )

    def host_cpu(which: int, host: str) -> float:
        return statistics.median(float(pair[which]["cpu_s_by_host"][host]) for pair in pairs)

    cpu = {
        f"{kind}_cpu_s_host_{h}": host_cpu(i, h)
        for i, kind in enumerate(("direct", "gateway"))
        for h in "AB"
    }
    busiest = max("AB", key=lambda h: cpu[f"gateway_cpu_s_host_{h}"])
    return report(
        "W17",
        [Check("wall through the gateway / wall with --no-gateway", ratio, 1.15)],
        f"{rows} rollouts x {CALLS} calls, fake upstream answering in {DELAY_S * 1000:g} ms on "
        f"host A's address, concurrency {CONCURRENCY}, --backend ray on two hosts (network "
        "namespaces joined by a veth pair: head 1 CPU + driver on A, worker node 2 CPUs on B), "
        f"{ACTORS} actors of 1 CPU (1 on A, 2 on B); runner walls from summary.json; medians of {repeats} alternating "
        "pairs (--no-gateway, gateway); host CPU = every process in the host's namespace "
        "(/proc, sampled every 0.2 s; the driver's from its rusage; the upstream's left out); "
        "shared 2-core machine",
        ratios=ratios,
        gateway_wall_s=statistics.median(t["wall_s"] for _, t in pairs),
        direct_wall_s=statistics.median(d["wall_s"] for d, _ in pairs),
        ideal_s=rows / CONCURRENCY * CALLS * DELAY_S,
        gateway_cpu_ms_per_call=cpu_per_call,
        calls=calls,
        gateway_calls=pairs[0][1]["model"]["gateway"]["calls"],
        actors_on={
            host: sum(actor["node"] == ip for actor in pairs[0][1]["backend"]["actors"])
            for host, ip in (("A", a.ip), ("B", b.ip))
        },
        busiest_host=f"{busiest} ({'head + driver' if busiest == 'A' else 'worker node'})",
        **cpu,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the chosen workloads; print one JSON line each."""
    parser = argparse.ArgumentParser(prog="python -m tests.perf.cluster")
    parser.add_argument("--only", default="W17")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3, help="W17's alternating pairs")
    args = parser.parse_args(argv)
    chosen = {w.strip().upper() for w in args.only.split(",")}
    root = Path(tempfile.mkdtemp(prefix="osmosis-cluster-perf-"))
    try:
        if "W17" in chosen:
            rows = max(CONCURRENCY, int(ROLLOUTS * args.scale))
            print(json.dumps(w17(rows, args.repeats, root)), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    log("cluster benchmarks done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
