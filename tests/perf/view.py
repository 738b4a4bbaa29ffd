"""W18: ``osmosis-run view`` on a run of 100,000 rollouts, in Chromium: ``python -m tests.perf.view``.

A run directory is generated (results.jsonl, summary.json, run.toml, fingerprint.json): 100,000
rollouts with 2 KB transcripts (a user prompt and an assistant answer of random words), 90%
successes with random rewards, 5% failures and 5% timeouts, a metadata topic of ten. Then:

- the view starts (``--port 0``), and its index of the run is built once (the first request
  for the run: ``index_s``, reported, not a target: it is paid once per view, at start, by its
  warming thread);
- Chromium (Debian's, driven by Playwright) navigates to the run page: ``table_s`` is from
  ``goto`` until the table's first rows are drawn and the page says it is ready;
- a filter (status = failure) and a sort (reward, highest first): ``filter_ms`` and
  ``sort_ms``, from the action until the table shows the new rows (the median of 3 each);
- a search for a word in 1% of the transcripts: ``search_first_hit_s``, from Enter until the
  first hit is drawn, and ``search_done_s`` until the last;
- the view's peak RSS (``VmHWM`` of its process) and the page's JS heap (Chromium's
  ``Performance.getMetrics``, ``JSHeapUsedSize``, after everything above).

Targets (bench/README.md): table <= 1.5 s; a filter or a sort <= 300 ms; first hits <= 1 s;
server RSS <= 250 MiB; JS heap <= 150 MB.

    python -m tests.perf.view                 # one JSON line
    python -m tests.perf.view --scale 0.1     # 10,000 rollouts: a quick look
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .workloads import Check, log, report

ROLLOUTS = 100_000
TRANSCRIPT_BYTES = 2048
RARE = "zebracorn"  # in 1% of the transcripts: what the search looks for
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]  # fmt: skip
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma", "omega", "answer", "tool", "call", "result", "value", "check", "step", "plan", "reason", "model", "token", "prompt"]  # fmt: skip


def generate(run_dir: Path, rollouts: int, seed: int = 7) -> None:
    """A finished run of ``rollouts`` rollouts with 2 KB transcripts, written directly."""
    rng = random.Random(seed)
    (run_dir / "rollouts").mkdir(parents=True)
    (run_dir / "fingerprint.json").write_text(json.dumps({"dataset_sha256": "generated"}))
    (run_dir / "run.toml").write_text('dataset = "generated.jsonl"\nworkflow = "bench:Agent"\n')
    counts = {"success": 0, "failure": 0, "timeout": 0}
    total = 0.0
    with (run_dir / "results.jsonl").open("w", encoding="utf-8") as out:
        for i in range(rollouts):
            roll = rng.random()
            status = "success" if roll < 0.9 else "failure" if roll < 0.95 else "timeout"
            counts[status] += 1
            words = [rng.choice(WORDS) for _ in range(TRANSCRIPT_BYTES // 7)]
            if i % 100 == 37:
                words[rng.randrange(len(words))] = RARE
            answer = " ".join(words)[: TRANSCRIPT_BYTES - 200]
            reward = round(rng.random(), 3) if status == "success" else None
            total += reward or 0.0
            line = {
                "rollout_id": f"row-{i:06d}.s0",
                "row_index": i,
                "line": i + 1,
                "sample_index": 0,
                "status": status,
                "error_category": None
                if status == "success"
                else ("agent_error" if status == "failure" else "timeout"),
                "error_message": None if status == "success" else f"step {i % 7} failed",
                "reward": reward,
                "passed": None if reward is None else reward >= 1.0,
                "workflow_ms": round(rng.uniform(5, 500), 3),
                "grader_ms": round(rng.uniform(0.1, 20), 3),
                "messages": [
                    {
                        "role": "user",
                        "content": f"Question {i}: "
                        + " ".join(rng.choice(WORDS) for _ in range(20)),
                    },
                    {"role": "assistant", "content": answer},
                ],
                "metadata": {"topic": f"topic-{i % 10}"},
                "finished_at": 1.7e9 + i,
            }
            out.write(json.dumps(line) + "\n")
    summary = {"rollouts": rollouts, "planned": rollouts, "complete": True, "interrupted": False,
               "counts": counts, "wall_s": 100.0}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary))


def rss_peak_mib(pid: int) -> float:
    """The peak resident memory of a process (``VmHWM``), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def until(page: Any, expression: str, timeout: float = 30.0) -> float:
    """Poll ``expression`` until true; return the seconds it took."""
    started = time.perf_counter()
    while not page.evaluate(f"() => Boolean({expression})"):
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"not true within {timeout} s: {expression}")
        time.sleep(0.005)
    return time.perf_counter() - started


def measure(root: Path, rollouts: int) -> dict[str, Any]:
    """Generate the run, start the view, drive Chromium; the raw figures."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for viewing.py
    from playwright.sync_api import sync_playwright
    from viewing import start_view

    run_dir = root / "runs" / "big"
    started = time.perf_counter()
    generate(run_dir, rollouts)
    size = (run_dir / "results.jsonl").stat().st_size
    log(
        f"W18: generated {rollouts} rollouts ({size / 1e6:.0f} MB) in {time.perf_counter() - started:.1f} s"
    )
    figures: dict[str, Any] = {"rollouts": rollouts, "results_mb": size / 1e6}
    with start_view([str(root / "runs")]) as view:
        started = time.perf_counter()
        view.get_json("/api/runs/big")
        figures["index_s"] = time.perf_counter() - started
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            started = time.perf_counter()
            page.goto(view.base + "/runs/big")
            figures["table_s"] = (
                time.perf_counter()
                - started
                + until(
                    page,
                    "document.documentElement.dataset.ready && document.querySelector('table[data-table=rollouts] tbody tr[data-id]')",
                )
            )
            filters, sorts = [], []
            for _ in range(3):
                page.select_option("select[name=status]", "failure")
                everything = f"'{rollouts:,} rollouts'"
                filters.append(
                    until(
                        page,
                        f"document.querySelector('.table-info .info').textContent !== {everything}",
                    )
                )
                page.select_option("select[name=status]", "")
                until(
                    page,
                    f"document.querySelector('.table-info .info').textContent === {everything}",
                )
                first = page.evaluate(
                    "() => document.querySelector('table[data-table=rollouts] tbody tr[data-id]').dataset.id"
                )
                page.click("th[data-col=reward]")
                sorts.append(
                    until(
                        page,
                        f"document.querySelector('table[data-table=rollouts] tbody tr[data-id]')?.dataset.id !== '{first}'",
                    )
                )
                page.goto(view.base + "/runs/big")
                until(
                    page,
                    "document.documentElement.dataset.ready && document.querySelector('table[data-table=rollouts] tbody tr[data-id]')",
                )
            figures["filter_ms"] = statistics.median(filters) * 1000
            figures["sort_ms"] = statistics.median(sorts) * 1000
            figures["filter_ms_all"] = [f * 1000 for f in filters]
            figures["sort_ms_all"] = [s * 1000 for s in sorts]
            page.fill("input[name=q]", RARE)
            started = time.perf_counter()
            page.press("input[name=q]", "Enter")
            figures["search_first_hit_s"] = (
                time.perf_counter() - started + until(page, "document.querySelector('.hits li')")
            )
            figures["search_done_s"] = (
                time.perf_counter()
                - started
                + until(page, "document.querySelector('.hits-info').dataset.state === 'done'", 120)
            )
            figures["search_hits"] = page.evaluate(
                "() => document.querySelectorAll('.hits li').length"
            )
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            figures["js_heap_mb"] = metrics["JSHeapUsedSize"] / 1e6
            figures["server_rss_mib"] = rss_peak_mib(view.process.pid)
            browser.close()
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run W18; print its JSON line."""
    parser = argparse.ArgumentParser(prog="python -m tests.perf.view")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the rollouts")
    parser.add_argument("--keep", action="store_true", help="keep the generated run")
    args = parser.parse_args(argv)
    rollouts = max(1000, round(ROLLOUTS * args.scale))
    root = Path(tempfile.mkdtemp(prefix="osmosis-view-perf-"))
    try:
        f = measure(root, rollouts)
    finally:
        if args.keep:
            log(f"W18: kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    line = report(
        "W18",
        [
            Check("table interactive after navigation (s)", f["table_s"], 1.5, " s"),
            Check("a filter (ms)", f["filter_ms"], 300, " ms"),
            Check("a sort (ms)", f["sort_ms"], 300, " ms"),
            Check("first search hits (s)", f["search_first_hit_s"], 1.0, " s"),
            Check("server peak RSS (MiB)", f["server_rss_mib"], 250, " MiB"),
            Check("page JS heap (MB)", f["js_heap_mb"], 150, " MB"),
        ],
        f"a generated run of {rollouts} rollouts with 2 KB transcripts in osmosis-run view, "
        "driven in Debian's Chromium by Playwright; the view's index built first (index_s, "
        "its one-time cost); filter and sort: median of 3, from the action until the table "
        "shows the new rows; server RSS: VmHWM; JS heap: Performance.getMetrics",
        **f,
    )
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
