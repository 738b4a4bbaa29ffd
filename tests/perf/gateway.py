"""The gateway's benchmarks W11, W11b and W12: ``python -m tests.perf.gateway [--only W11,W12]``.

- W11: 1,000 rollouts, each making 4 sequential calls to an upstream answering in 200 ms, at
  concurrency 100 (ideal 8 s). Figures: the runner's wall through the gateway divided by its
  wall with ``--no-gateway`` (target <= 1.10), and the latency the gateway adds per call at p50
  and p99 (target p50 <= 2 ms): each call's latency as the workflow saw it through the gateway,
  minus the same percentile with ``--no-gateway``.
- W11b: the most calls per second the gateway sustains with an upstream answering at once:
  rollouts of 4 calls, concurrency 100, calls divided by the runner's wall (a figure to report;
  aim >= 1,000/s). The same run with ``--no-gateway`` is reported beside it.
- W12: W11 replayed from the model cache with the upstream stopped (``--model-cache-mode
  read-only``): its wall divided by W11's gateway wall (target <= 0.2). The cache is filled by
  a run of its own, so that W11's figure carries no cache writes. With no upstream to wait for,
  the workflows' own HTTP client is most of the work: the same replay with ``httpx`` as their
  client is reported beside it (``httpx_*``; see gateway_flows.py).

The upstream (``tests/fake_upstream.py``) runs as a process of its own, as a remote model
would. Walls are the runner's (summary.json's ``wall_s``: first rollout to last result); the
whole-process walls are reported beside them. The machine is shared: ``loadavg_1m`` says how
busy it was.
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
from pathlib import Path
from typing import Any

from .gateway_flows import CLIENT_ENV
from .measure import Measured, measure
from .workloads import Check, Line, log, report
from .workspace import osmosis_run_command

ROLLOUTS, CONCURRENCY, DELAY_S = 1000, 100, 0.2
W11B_ROLLOUTS = 2500
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


class Upstream:
    """``python -m tests.fake_upstream`` in a process of its own."""

    def __init__(self, delay_s: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fake_upstream", "--delay", str(delay_s)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


class Runs:
    """A temporary directory with the dataset and the workflow, and the eval runs made in it."""

    def __init__(self, root: Path, rows: int) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy(HERE / "gateway_flows.py", root / "gateway_flows.py")
        with (root / "rows.jsonl").open("w") as f:
            for i in range(rows):
                f.write(json.dumps({"id": i, "prompt": f"question number {i}"}) + "\n")

    def eval(
        self, name: str, url: str, *extra: str, client: str = "aiohttp"
    ) -> tuple[Measured, dict[str, Any]]:
        cmd = [
            *osmosis_run_command(), "eval", "rows.jsonl", "-w", "gateway_flows:Caller",
            "--chat-completions-url", url, "--concurrency", str(CONCURRENCY), "--out", name,
            "--api-key", "sk-bench-upstream-key", *extra,
        ]  # fmt: skip
        env_path = os.environ.get("PYTHONPATH", "")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.root), env_path]))
        os.environ[CLIENT_ENV] = client
        try:
            done = measure(cmd, cwd=self.root, logs=self.root / f"{name}-logs")
        finally:
            os.environ["PYTHONPATH"] = env_path
            del os.environ[CLIENT_ENV]
        done.check(f"eval {name}")
        summary = json.loads((self.root / name / "summary.json").read_text())
        return done, summary

    def call_ms(self, name: str) -> list[float]:
        values: list[float] = []
        with (self.root / name / "results.jsonl").open() as f:
            for line in f:
                values.extend(
                    v for k, v in json.loads(line)["metrics"].items() if k.startswith("call_ms")
                )
        return values


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def w11_and_w12(runs: Runs, rows: int, *, with_w12: bool, repeats: int) -> list[Line]:
    up = Upstream(DELAY_S)
    pairs: list[tuple[dict[str, Any], dict[str, Any], list[float], list[float], Measured]] = []
    try:
        for n in range(repeats):  # alternating, so that the machine's drift hits both alike
            _, direct_sum = runs.eval(f"direct{n}", up.url, "--no-gateway")
            through, through_sum = runs.eval(f"gateway{n}", up.url)
            pairs.append(
                (
                    direct_sum,
                    through_sum,
                    runs.call_ms(f"direct{n}"),
                    runs.call_ms(f"gateway{n}"),
                    through,
                )
            )
        if with_w12:
            runs.eval("fill", up.url, "--model-cache", "cache.sqlite")
    finally:
        up.stop()
    ideal = rows / CONCURRENCY * 4 * DELAY_S
    ratios = [t["wall_s"] / d["wall_s"] for d, t, _, _, _ in pairs]
    added50 = statistics.median(_pct(t, 0.5) - _pct(d, 0.5) for _, _, d, t, _ in pairs)
    added99 = statistics.median(_pct(t, 0.99) - _pct(d, 0.99) for _, _, d, t, _ in pairs)
    ratio = statistics.median(ratios)
    # The raw figures shown are those of the pair whose ratio is nearest the median.
    middle = min(range(len(pairs)), key=lambda n: abs(ratios[n] - ratio))
    direct_sum, through_sum, direct_ms, through_ms, through = pairs[middle]
    lines = [
        report(
            "W11",
            [
                Check("wall through the gateway / wall with --no-gateway", ratio, 1.10),
                Check("latency the gateway adds per call, p50", added50, 2.0, " ms"),
            ],
            f"{rows} rollouts x 4 calls, upstream 200 ms (its own process), concurrency "
            f"{CONCURRENCY}; runner walls from summary.json; medians of {repeats} alternating "
            "pairs (gateway, --no-gateway); added latency = percentile of per-call latency "
            "through the gateway minus the same percentile with --no-gateway; the workflows' "
            "client is aiohttp; shared 2-core machine",
            ratios=ratios,
            ideal_s=ideal,
            gateway_wall_s=through_sum["wall_s"],
            direct_wall_s=direct_sum["wall_s"],
            added_ms_p50=added50,
            added_ms_p99=added99,
            call_ms_p50_gateway=_pct(through_ms, 0.5),
            call_ms_p99_gateway=_pct(through_ms, 0.99),
            call_ms_p50_direct=_pct(direct_ms, 0.5),
            call_ms_p99_direct=_pct(direct_ms, 0.99),
            calls=len(through_ms),
            gateway_cpu_s=through.cpu_s,
            gateway_thread_cpu_ms_per_call=1000
            * through_sum["model"]["gateway"].get("cpu_s", 0)
            / max(1, len(through_ms)),
            tokens=through_sum["model"]["total_tokens"],
        )
    ]
    if with_w12:
        gateway_wall = statistics.median(t["wall_s"] for _, t, _, _, _ in pairs)
        replay, replay_sum = runs.eval(
            "replay", up.url, "--model-cache", "cache.sqlite", "--model-cache-mode", "read-only"
        )
        _, httpx_sum = runs.eval(
            "replay-httpx",
            up.url,
            "--model-cache",
            "cache.sqlite",
            "--model-cache-mode",
            "read-only",
            client="httpx",
        )
        hits = replay_sum["model"]["gateway"]["cache_hits"]
        lines.append(
            report(
                "W12",
                [
                    Check(
                        "replay wall / W11 gateway wall",
                        replay_sum["wall_s"] / through_sum["wall_s"],
                        0.2,
                    )
                ],
                "W11 replayed from --model-cache (read-only) with the upstream process stopped; "
                "runner walls from summary.json; the workflows' client is aiohttp; the same "
                "replay with httpx.AsyncClient as their client is given beside it (httpx_*)",
                replay_wall_s=replay_sum["wall_s"],
                gateway_thread_cpu_ms_per_call=1000
                * replay_sum["model"]["gateway"].get("cpu_s", 0)
                / max(1, hits),
                httpx_replay_wall_s=httpx_sum["wall_s"],
                httpx_ratio=round(httpx_sum["wall_s"] / through_sum["wall_s"], 3),
                httpx_cache_hits=httpx_sum["model"]["gateway"]["cache_hits"],
                w11_gateway_wall_s=gateway_wall,
                replay_process_wall_s=replay.wall_s,
                cache_hits=hits,
                calls=len(runs.call_ms("replay")),
                errors=replay_sum["errors"],
            )
        )
    return lines


def w11b(runs: Runs, rows: int) -> Line:
    up = Upstream(0.0)
    try:
        direct, direct_sum = runs.eval("fast-direct", up.url, "--no-gateway")
        through, through_sum = runs.eval("fast-gateway", up.url)
    finally:
        up.stop()
    calls = rows * 4
    rate = calls / through_sum["wall_s"]
    direct_rate = calls / direct_sum["wall_s"]
    line = report(
        "W11b",
        [Check("calls per second through the gateway", rate, float("inf"), "/s")],
        f"{rows} rollouts x 4 calls, upstream answering at once (its own process), concurrency "
        f"{CONCURRENCY}; calls / runner wall; the gateway is a thread of the eval process, sharing "
        "it with the workflows, whose client is aiohttp; shared 2-core machine",
        calls_per_s=rate,
        direct_calls_per_s=direct_rate,
        gateway_wall_s=through_sum["wall_s"],
        direct_wall_s=direct_sum["wall_s"],
        gateway_cpu_s=through.cpu_s,
        direct_cpu_s=direct.cpu_s,
        gateway_thread_cpu_ms_per_call=1000
        * through_sum["model"]["gateway"].get("cpu_s", 0)
        / calls,
        calls=calls,
    )
    line["target"] = ">= 1000/s (an aim: a figure to report)"
    line["holds"] = rate >= 1000
    return line


def main(argv: list[str] | None = None) -> int:
    """Run the chosen workloads; print one JSON line each."""
    parser = argparse.ArgumentParser(prog="python -m tests.perf.gateway")
    parser.add_argument("--only", default="W11,W11b,W12")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3, help="W11's alternating pairs")
    args = parser.parse_args(argv)
    chosen = {w.strip().upper() for w in args.only.split(",")}
    root = Path(tempfile.mkdtemp(prefix="osmosis-gateway-perf-"))
    try:
        if chosen & {"W11", "W12"}:
            rows = max(CONCURRENCY, int(ROLLOUTS * args.scale))
            runs = Runs(root / "w11", rows)
            for line in w11_and_w12(runs, rows, with_w12="W12" in chosen, repeats=args.repeats):
                print(json.dumps(line), flush=True)
        if "W11B" in chosen:
            rows = max(CONCURRENCY, int(W11B_ROLLOUTS * args.scale))
            print(json.dumps(w11b(Runs(root / "w11b", rows), rows)), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    log("gateway benchmarks done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
