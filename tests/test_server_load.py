"""Load: 10,000 rollouts admitted at once to ``osmosis-run serve`` (a real subprocess), a
sleeping workflow at concurrency 1,000: all complete, memory stays bounded, and once the
retention has passed nothing is held (no lease, no timer, no result), round after round."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from conftest import subprocess_env
from serving import LEASE, free_port

ROLLOUTS = 10_000
CONCURRENCY = 1_000
SLEEP_S = 0.5
RETENTION_S = 30.0  # longer than a poll can be held up on a loaded machine
# Admissions in flight at once, and the trainer's polling workers (one per executing rollout).
ADMIT_WINDOW, POLLERS = 200, CONCURRENCY
# Peak RSS allowed for the server process (what it held at its busiest: 10,000 rollouts).
PEAK_RSS_MIB = 400
# One round by default; OSMOSIS_RUN_LOAD_ROUNDS=2 runs a second and checks that resident
# memory, once each round's results are released, does not grow with what was served.
ROUNDS = tuple(range(1, int(os.environ.get("OSMOSIS_RUN_LOAD_ROUNDS", "1")) + 1))
GROWTH_MIB = 25


def _rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of ``pid`` in MiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def _round(url: str, prefix: str) -> tuple[float, float, int]:
    """Admit ROLLOUTS at once; poll each from its admission to its end, as a trainer does.

    The trainer here is one process: ``POLLERS`` workers take the admitted rollouts in order
    and long-poll each to its end, so every rollout executing on the server has a poll waiting
    for it (the server holds 1,000 at a time), and a finished result never waits for a poll
    longer than the retention. Returns when the last was admitted (s), when all were done
    (s), and how many succeeded. The client is aiohttp: httpx's pool, at 1,200 connections,
    took 7x the CPU and fell minutes behind the server.
    """
    # At most CONCURRENCY connections (serve keeps 1,024 open and closes the longest idle past
    # that, maybe under a request); idle ones close before serve's 10 s keep-alive would.
    connector = aiohttp.TCPConnector(limit=CONCURRENCY, keepalive_timeout=5)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(url, connector=connector, timeout=timeout) as client:
        admit_window = asyncio.Semaphore(ADMIT_WINDOW)
        admitted: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        started = time.perf_counter()
        last_admitted = 0.0
        ok = 0

        async def admit(i: int) -> None:
            nonlocal last_admitted
            rid = f"{prefix}-{i}"
            body = {
                "initial_messages": [{"role": "user", "content": "sleep"}],
                "rollout_id": rid,
                "chat_completions_url": "http://127.0.0.1:9/v1",
                "metadata": {"sleep": SLEEP_S},
            }
            async with admit_window, client.post("/rollout", json=body) as response:
                assert response.status == 202, await response.text()
                token = (await response.json())["polling_lease_token"]
            last_admitted = time.perf_counter() - started
            admitted.put_nowait((rid, token))

        async def poller() -> None:
            nonlocal ok
            while (item := await admitted.get()) is not None:
                rid, token = item
                while True:
                    async with client.get(
                        f"/rollout/{rid}/result", headers={LEASE: token}
                    ) as response:
                        assert response.status == 200, await response.text()
                        status = (await response.json())["status"]
                    if status in ("success", "failure", "cancelled"):
                        ok += status == "success"
                        break

        pollers = [asyncio.create_task(poller()) for _ in range(POLLERS)]
        await asyncio.gather(*(admit(i) for i in range(ROLLOUTS)))
        for _ in pollers:
            admitted.put_nowait(None)
        await asyncio.gather(*pollers)
        return last_admitted, time.perf_counter() - started, ok


def _health(url: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/health", timeout=10).json()
    return body


def _released(url: str) -> dict[str, Any]:
    deadline = time.monotonic() + RETENTION_S + 20
    while True:
        held = _health(url)["rollouts"]
        if held["held"] == 0 or time.monotonic() > deadline:
            return held  # type: ignore[no-any-return]
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ten_thousand_rollouts_at_once_stay_bounded(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out = tmp_path / "load"
    command = [
        sys.executable, "-m", "osmosis_run", "serve",
        "-w", "server_flows:Sleeper",
        "-c", str(CONCURRENCY),
        "--port", str(port),
        "--out", str(out),
        "--result-wait", "5",
        "--lease", "120",
        "--retention", str(RETENTION_S),
    ]  # fmt: skip
    proc = subprocess.Popen(command, env=subprocess_env(), stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith("osmosis-run serve: listening on")
        figures: dict[str, Any] = {}
        for round_ in ROUNDS:
            admitted, wall, ok = asyncio.run(_round(url, f"r{round_}"))
            assert ok == ROLLOUTS
            _, peak = _rss_mib(proc.pid)
            held = _released(url)
            assert held == {
                "held": 0,
                "leases": 0,
                "timers": 0,
                "polls_waiting": 0,
                "admitted": ROLLOUTS * round_,
            }
            released_rss, peak = _rss_mib(proc.pid)
            figures[f"round{round_}"] = {
                "admit_s": round(admitted, 2),
                "all_done_s": round(wall, 2),
                "rss_after_release_mib": round(released_rss, 1),
            }
            figures["peak_rss_mib"] = round(peak, 1)
        print(json.dumps({"load": figures}))
        assert figures["peak_rss_mib"] < PEAK_RSS_MIB
        if len(ROUNDS) > 1:
            first, last = figures["round1"], figures[f"round{ROUNDS[-1]}"]
            growth = last["rss_after_release_mib"] - first["rss_after_release_mib"]
            assert growth < GROWTH_MIB, figures
        assert _health(url)["lifecycle"]["active_rollouts"] == 0
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert proc.returncode == 0
    with (out / "results.jsonl").open("rb") as f:
        assert sum(1 for _ in f) == len(ROUNDS) * ROLLOUTS
