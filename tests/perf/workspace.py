"""The benchmark's temporary directory: datasets, the workflow module, fresh output folders.

Also finds the two programs the benchmark runs: the ``osmosis-run`` console script and
``bench/floor.py``.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

FLOWS_MODULE = "perf_flows"
ECHO = f"{FLOWS_MODULE}:Echo"
SLEEPY = f"{FLOWS_MODULE}:Sleepy"
EXACT_MATCH = f"{FLOWS_MODULE}:ExactMatch"
FLOOR_ENV = "OSMOSIS_BENCH_FLOOR"
REPO = Path(__file__).resolve().parents[2]


class HarnessError(Exception):
    """The benchmark itself cannot run (a missing program, an unreadable output)."""


class Workspace:
    """A temporary directory holding the datasets, ``perf_flows.py`` and every run's output."""

    def __init__(self, *, keep: bool) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="osmosis-perf-"))
        self.keep = keep
        self._datasets: dict[int, Path] = {}
        self._serial = itertools.count(1)
        shutil.copy(Path(__file__).with_name(f"{FLOWS_MODULE}.py"), self.root)

    def dataset(self, rows: int) -> Path:
        """A JSONL dataset of ``rows`` rows whose prompts equal their labels (written once)."""
        if rows not in self._datasets:
            path = self.root / f"rows-{rows}.jsonl"
            with path.open("w", encoding="utf-8") as f:
                for i in range(rows):
                    text = f"Row {i}: repeat this sentence back to me, word for word."
                    f.write(json.dumps({"user_prompt": text, "ground_truth": text}) + "\n")
            self._datasets[rows] = path
        return self._datasets[rows]

    def fresh(self, name: str) -> Path:
        """A path that does not exist yet, for one run's output."""
        return self.root / f"{next(self._serial):02d}-{name}"

    def close(self) -> None:
        """Delete the directory, or say where it was kept.

        Nothing is deleted before: on ext4 without a journal (this machine's disk) the kernel
        walks past every inode freed in the last minutes before it reuses one, so creating
        files right after deleting a large tree costs up to ten times more system time, and
        whichever program ran next would pay for the previous one's clean-up.
        """
        if self.keep:
            print(f"perf: kept {self.root}", file=sys.stderr)
        else:
            shutil.rmtree(self.root, ignore_errors=True)


def osmosis_run_command() -> list[str]:
    """The ``osmosis-run`` console script of this interpreter (not a pyenv shim in front of it)."""
    beside = Path(sys.executable).with_name("osmosis-run")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("osmosis-run")
    if found:
        return [found]
    return [sys.executable, "-c", "from osmosis_run.cli import main; main()"]


def find_floor() -> Path:
    """``$OSMOSIS_BENCH_FLOOR``, else ``<repo>/../shared/bench/floor.py``.

    Raises:
        HarnessError: neither exists.
    """
    configured = os.environ.get(FLOOR_ENV)
    path = Path(configured) if configured else REPO.parent / "shared" / "bench" / "floor.py"
    if not path.is_file():
        raise HarnessError(
            f"the I/O floor {path} does not exist: set {FLOOR_ENV} to bench/floor.py "
            "(the benchmark compares osmosis-run with it and cannot run without it)"
        )
    return path
