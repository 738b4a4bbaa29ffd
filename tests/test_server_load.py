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

import httpx
import pytest
from conftest import subprocess_env
from serving import LEASE, free_port

ROLLOUTS = 10_000
CONCURRENCY = 1_000
SLEEP_S = 0.5
RETENTION_S = 60.0
CLIENT_CONNECTIONS = 500
# Admissions and polls get windows of their own: polls never queue behind admissions.
ADMIT_WINDOW, POLL_WINDOW = 200, 300
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
    """Admit ROLLOUTS at once, each polled from its admission to its end, as a trainer does.

    Returns when the last was admitted (s), when all were done (s), and how many succeeded.
    """
    limits = httpx.Limits(
        max_connections=CLIENT_CONNECTIONS, max_keepalive_connections=CLIENT_CONNECTIONS
    )
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        admit_window, poll_window = asyncio.Semaphore(ADMIT_WINDOW), asyncio.Semaphore(POLL_WINDOW)
        started = time.perf_counter()
        admitted: list[float] = []

        async def rollout(i: int) -> bool:
            rid = f"{prefix}-{i}"
            body = {
                "initial_messages": [{"role": "user", "content": "sleep"}],
                "rollout_id": rid,
                "chat_completions_url": "http://127.0.0.1:9/v1",
                "metadata": {"sleep": SLEEP_S},
            }
            async with admit_window:
                response = await client.post("/rollout", json=body)
            assert response.status_code == 202, response.text
            admitted.append(time.perf_counter() - started)
            token = response.json()["polling_lease_token"]
            while True:
                async with poll_window:
                    response = await client.get(f"/rollout/{rid}/result", headers={LEASE: token})
                assert response.status_code == 200, response.text
                status = response.json()["status"]
                if status in ("success", "failure", "cancelled"):
                    return bool(status == "success")

        done = await asyncio.gather(*(rollout(i) for i in range(ROLLOUTS)))
        return max(admitted), time.perf_counter() - started, sum(done)


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
        "--result-wait", "0.5",
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
