"""Wait, before measuring, until creating files costs what it normally does.

On ext4 without a journal (this machine's disk) the kernel walks past every inode freed in the
last minutes before it reuses one, so right after a large tree is deleted (the previous suite's
clean-up, a test run) creating files costs several times more system time, for a minute or two.
Whichever program ran first would pay for it. A probe (``PROBE_ROWS`` floor-like rollouts: two
directories and a small file each, never deleted) runs every few seconds until it is cheap.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .workloads import log

PROBE_ROWS = 5000
SETTLED_US = 130.0  # per probe rollout; 75-100 when settled here, 150-700 after a purge
PAUSE_S = 10.0
MOST_WAIT_S = 360.0
IN_A_ROW = 2  # cheap probes in a row that count as settled


def probe(where: Path, rows: int = PROBE_ROWS) -> float:
    """Microseconds per floor-like rollout written under ``where`` (a new directory)."""
    where.mkdir(parents=True)
    started = time.perf_counter()
    for i in range(rows):
        rollout = where / f"r{i:06d}"
        os.mkdir(rollout)
        os.mkdir(rollout / "artifacts")
        (rollout / "trajectory.json").write_bytes(b"{}")
    return (time.perf_counter() - started) / rows * 1e6


def settle(root: Path, *, most_wait_s: float = MOST_WAIT_S) -> float:
    """Probe until ``IN_A_ROW`` probes in a row cost at most ``SETTLED_US``; return the wait."""
    started = time.monotonic()
    cheap = 0
    for attempt in range(1_000):
        cost = probe(root / f"settle-{attempt:03d}")
        waited = time.monotonic() - started
        cheap = cheap + 1 if cost <= SETTLED_US else 0
        if cheap >= IN_A_ROW:
            log(f"file system settled: {cost:.0f} us per probe rollout (waited {waited:.0f}s)")
            return waited
        if waited >= most_wait_s:
            log(f"file system still slow after {waited:.0f}s ({cost:.0f} us); measuring anyway")
            return waited
        if not cheap:
            log(f"file system busy: {cost:.0f} us per probe rollout (settled: <= {SETTLED_US:.0f})")
            time.sleep(PAUSE_S)
    return time.monotonic() - started
