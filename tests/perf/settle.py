"""Measure on a settled disk: after the previous suite's clean-up has stopped costing.

On ext4 without a journal (this machine's disk) the kernel walks past every inode freed in the
last 30 s, or 330 s when its inode-table block is dirty (and creating files dirties them), before
it reuses one. Right after a large tree is deleted, creating files costs several times more
system time, and whichever program ran first would pay for the deletion. The suite deletes
about a million files when it ends, so it leaves a stamp; a suite started within ``QUIET_S``
of that stamp first waits out the rest. A short probe then reads the disk's speed, reported on
every line (75-100 us per probe rollout when settled here; 200-700 right after a deletion).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

PROBE_ROWS = 5000
QUIET_S = 340.0  # 330 s of "recently deleted", and a margin
STAMP = Path(tempfile.gettempdir()) / "osmosis-run-perf.cleaned"


def mark_cleaned() -> None:
    """Record that the suite has just deleted its workspace."""
    STAMP.write_text(f"{time.time()}\n", encoding="utf-8")


def quiet_for() -> float:
    """Seconds still to wait since the last suite's clean-up (0 when none is recent)."""
    try:
        cleaned = float(STAMP.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0.0
    return max(0.0, cleaned + QUIET_S - time.time())


def probe(where: Path, rows: int = PROBE_ROWS) -> float:
    """Microseconds per floor-like rollout (two directories, a small file) under ``where``."""
    where.mkdir(parents=True)
    started = time.perf_counter()
    for i in range(rows):
        rollout = where / f"r{i:06d}"
        os.mkdir(rollout)
        os.mkdir(rollout / "artifacts")
        (rollout / "trajectory.json").write_bytes(b"{}")
    return (time.perf_counter() - started) / rows * 1e6
