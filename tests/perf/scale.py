"""The million-row benchmark W16: ``python -m tests.perf.scale``.

One ``osmosis-run eval`` of 1,000,000 trivial rows (``perf_flows.Echo`` + ``ExactMatch``, as W1
and W4) at concurrency 64, its run directory on disk (the workspace; ``--ram`` puts the run
directories in /dev/shm instead, and the line says so), then what reads it back. Figures:

- peak RSS of the 1M eval (``ru_maxrss`` of the process and the writer process it waits for,
  from ``os.wait4``) / the same eval's on 20,000 rows, run the same way right before it:
  <= 1.10, and <= 120 MiB;
- first results line: seconds from spawning the eval process until results.jsonl in its run
  directory holds a whole line (a newline), polled every 2 ms: <= 1.0 s. Start-up, loading the
  classes and reading the dataset are all inside it: what a user watching the file sees;
- resume: the same eval command again on the finished run (nothing left to do), its
  whole-process wall / the 1M eval's whole-process wall: <= 0.10;
- ``osmosis-run report RUN --json``: whole-process wall <= 10 s; its summary must equal
  summary.json's (every number), or the harness fails;
- ``osmosis-run report RUN --html FILE`` (the report on stderr, the page written): wall <= 30 s,
  the file <= 25 MB;
- reported without a target: ``report RUN --junit FILE`` (wall, file size) and ``compare RUN RUN
  --json`` (the run against itself), and every command's peak RSS.

The eval is always measured whole-process (start-up included). ``--scale`` multiplies both row
counts (1,000,000 and 20,000), so ``--scale 0.05`` is a smoke run of 50,000 against 1,000.

    python -m tests.perf.scale                  # W16, one JSON line (a 1M run takes minutes)
    python -m tests.perf.scale --scale 0.05     # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .measure import HARNESS_ONLY, Measured, measure
from .settle import QUIET_S, quiet_for
from .workloads import TRIVIAL_CONCURRENCY, Bench, Check, Line, log, report
from .workspace import HarnessError, Workspace, osmosis_run_command

BIG, SMALL = 1_000_000, 20_000
RSS_RATIO, RSS_MIB = 1.10, 120.0
FIRST_LINE_S = 1.0
RESUME_RATIO = 0.10
REPORT_JSON_S = 10.0
HTML_S, HTML_MB = 30.0, 25.0
POLL_S = 0.002


@dataclass(frozen=True)
class Spawned:
    """One eval process: its wall, peak RSS and CPU, and when its first results line appeared."""

    rc: int
    wall_s: float
    rss_mib: float
    cpu_s: float
    first_line_s: float | None
    stderr: Path


def spawn_eval(cmd: list[str], *, out: Path, cwd: Path, logs: Path) -> Spawned:
    """Run an eval; poll ``out/results.jsonl`` for its first whole line, timed from the spawn."""
    logs.mkdir(parents=True, exist_ok=True)
    os.sync()  # the run does not pay for writing back the files of the run before it
    results = out / "results.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in HARNESS_ONLY}
    with (logs / "stdout.txt").open("wb") as o, (logs / "stderr.txt").open("wb") as e:
        started = time.perf_counter()
        process = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=o, stderr=e
        )
        first = _first_line(results, process, started)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
    return Spawned(
        rc=process.returncode,
        wall_s=wall,
        rss_mib=usage.ru_maxrss / 1024,
        cpu_s=usage.ru_utime + usage.ru_stime,
        first_line_s=first,
        stderr=logs / "stderr.txt",
    )


def _first_line(results: Path, process: subprocess.Popen[bytes], started: float) -> float | None:
    """Seconds from ``started`` until ``results`` holds a newline (None: the process ended first)."""
    while True:
        try:
            if results.stat().st_size > 0:
                with results.open("rb") as f:
                    if b"\n" in f.read(1 << 16):
                        return time.perf_counter() - started
        except FileNotFoundError:
            pass
        if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return None
        time.sleep(POLL_S)


class Scale:
    """W16 in one workspace."""

    def __init__(self, bench: Bench, *, in_memory: bool) -> None:
        self.bench = bench
        self.ws = bench.ws
        self.in_memory = in_memory and self.ws.memory_root is not None

    def eval_command(self, rows: int, name: str) -> tuple[list[str], Path]:
        out = self.ws.fresh(name, in_memory=self.in_memory)
        dataset = self.ws.dataset(rows)
        cmd = self.bench.eval_command(
            dataset, workflow="perf_flows:Echo", concurrency=TRIVIAL_CONCURRENCY, out=out
        )
        return cmd, out

    def evaluate(self, rows: int, name: str) -> tuple[Spawned, list[str], Path, dict[str, Any]]:
        cmd, out = self.eval_command(rows, name)
        log(f"{name}: osmosis-run eval, {rows} rows, trivial, concurrency {TRIVIAL_CONCURRENCY}")
        done = spawn_eval(cmd, out=out, cwd=self.ws.root, logs=self.ws.root / "logs" / name)
        if done.rc != 0:
            tail = done.stderr.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise HarnessError(f"osmosis-run eval ({name}) exited {done.rc}:\n{tail}")
        summary = _summary(out, rows, name)
        return done, cmd, out, summary

    def measure(self, cmd: list[str], name: str) -> Measured:
        log(f"{name}: {' '.join(cmd[len(self.bench.cli) :])}")
        done = measure(cmd, cwd=self.ws.root, logs=self.ws.root / "logs" / name)
        done.check(name)
        return done

    def w16(self) -> Line:
        bench = self.bench
        small_rows, big_rows = bench.rows(SMALL), bench.rows(BIG)
        # The dataset is written before the clock starts (1M rows: a few seconds).
        self.ws.dataset(small_rows)
        self.ws.dataset(big_rows)
        small, *_ = self.evaluate(small_rows, "W16-small")
        big, cmd, out, summary = self.evaluate(big_rows, "W16-big")
        resume = self.measure(cmd, "W16-resume")
        if _summary(out, big_rows, "W16-resume") != summary:
            raise HarnessError("the resume of the finished run changed its summary.json")
        cli = bench.cli
        as_json = self.measure([*cli, "report", str(out), "--json"], "W16-report-json")
        same = _same_summary(json.loads(as_json.stdout)["summary"], summary)
        html = out.parent / f"{out.name}-report.html"
        as_html = self.measure([*cli, "report", str(out), "--html", str(html)], "W16-report-html")
        junit = out.parent / f"{out.name}-junit.xml"
        as_junit = self.measure(
            [*cli, "report", str(out), "--json", "--junit", str(junit)], "W16-report-junit"
        )
        compared = self.measure([*cli, "compare", str(out), str(out), "--json"], "W16-compare")
        json.loads(compared.stdout)
        html_mb = html.stat().st_size / 1e6
        where = "RAM (tmpfs)" if self.in_memory else "the workspace, on disk"
        return report(
            "W16",
            [
                Check("peak RSS 1M / 20k", big.rss_mib / small.rss_mib, RSS_RATIO),
                Check("peak RSS 1M (MiB)", big.rss_mib, RSS_MIB, " MiB"),
                Check(
                    "first results line (s)", big.first_line_s or float("inf"), FIRST_LINE_S, " s"
                ),
                Check("resume wall / eval wall", resume.wall_s / big.wall_s, RESUME_RATIO),
                Check("report --json wall (s)", as_json.wall_s, REPORT_JSON_S, " s"),
                Check("report --html wall (s)", as_html.wall_s, HTML_S, " s"),
                Check("report --html file (MB)", html_mb, HTML_MB, " MB"),
            ],
            f"{big_rows} and {small_rows} trivial rows (perf_flows Echo + ExactMatch) at "
            f"concurrency {TRIVIAL_CONCURRENCY}, run directories in {where}; RSS: ru_maxrss "
            "of each eval process (and its writer process), os.wait4; first line: seconds from "
            "spawning the eval until its results.jsonl holds a newline, polled every 2 ms; "
            "resume: the same eval command on the finished run, whole-process wall / the 1M "
            "eval's; report and compare: whole-process walls and peak RSS, report --json's "
            f"summary checked equal to summary.json's (summary_identical); the compare is the "
            "run against itself",
            rows=big_rows,
            rows_small=small_rows,
            eval_wall_s=big.wall_s,
            eval_inner_wall_s=float(summary.get("wall_s") or 0.0),
            eval_rollouts_per_s=big_rows / big.wall_s,
            eval_cpu_s=big.cpu_s,
            rss_mib=big.rss_mib,
            rss_small_mib=small.rss_mib,
            first_line_s=big.first_line_s,
            first_line_small_s=small.first_line_s,
            small_wall_s=small.wall_s,
            resume_wall_s=resume.wall_s,
            resume_cpu_s=resume.cpu_s,
            resume_rss_mib=resume.rss_mib,
            report_json_s=as_json.wall_s,
            report_json_rss_mib=as_json.rss_mib,
            summary_identical=same,
            report_html_s=as_html.wall_s,
            report_html_rss_mib=as_html.rss_mib,
            html_mb=html_mb,
            report_junit_s=as_junit.wall_s,
            report_junit_rss_mib=as_junit.rss_mib,
            junit_mb=junit.stat().st_size / 1e6,
            compare_s=compared.wall_s,
            compare_rss_mib=compared.rss_mib,
            results_mb=(out / "results.jsonl").stat().st_size / 1e6,
            harness_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        )


def _summary(out: Path, rows: int, name: str) -> dict[str, Any]:
    path = out / "summary.json"
    if not path.is_file():
        raise HarnessError(f"osmosis-run eval ({name}) left no {path}")
    summary: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    counts = summary.get("counts", {})
    if summary.get("rollouts") != rows or counts.get("success") != rows or not summary["complete"]:
        raise HarnessError(
            f"osmosis-run eval ({name}) did not finish {rows} successful rollouts: "
            f"rollouts={summary.get('rollouts')} counts={counts}"
        )
    return summary


def _same_summary(reported: dict[str, Any], stored: dict[str, Any]) -> bool:
    """Whether report --json's summary is summary.json's, number for number."""
    if reported == stored:
        return True
    differ = sorted(k for k in stored.keys() | reported.keys() if stored.get(k) != reported.get(k))
    log(f"report --json's summary differs from summary.json's in: {', '.join(differ)}")
    return False


def main(argv: list[str] | None = None) -> int:
    """Run W16; print its JSON line."""
    parser = argparse.ArgumentParser(prog="python -m tests.perf.scale")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply both row counts")
    parser.add_argument("--ram", action="store_true", help="run directories in /dev/shm")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--no-settle", action="store_true", help="on disk: measure at once")
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error("--scale must be positive")
    ws = Workspace(keep=args.keep)
    try:
        bench = Bench(ws, cli=osmosis_run_command(), floor=Path(os.devnull), scale=args.scale)
        wait = 0.0 if args.no_settle or args.ram else quiet_for()
        if wait:
            log(f"the last suite deleted its files {QUIET_S - wait:.0f}s ago: waiting {wait:.0f}s")
            time.sleep(wait)
        bench.warm_up()
        if args.ram and ws.memory_root is None:
            log("--ram: /dev/shm is missing or full; run directories go to disk")
        print(json.dumps(Scale(bench, in_memory=args.ram).w16()), flush=True)
    finally:
        ws.close()
    log("scale benchmark done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
