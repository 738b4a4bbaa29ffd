"""The benchmark's temporary directory: datasets, the workflow module, fresh output folders.

Also finds the two programs the benchmark runs: the ``osmosis-run`` console script and
``bench/floor.py``.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .settle import mark_cleaned

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
        self.memory_root = _memory_dir()
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

    def fresh(self, name: str, *, in_memory: bool = False) -> Path:
        """A path that does not exist yet, for one run's output (in RAM if asked and possible)."""
        root = self.memory_root if in_memory and self.memory_root is not None else self.root
        return root / f"{next(self._serial):02d}-{name}"

    def drop_from_memory(self, *paths: Path) -> None:
        """Delete run outputs kept in RAM at once (tmpfs has no slow-after-delete problem)."""
        for path in paths:
            if self.memory_root is not None and path.is_relative_to(self.memory_root):
                shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        """Delete the directory (and leave the stamp settle.py reads), or say where it was kept.

        Nothing is deleted before: on ext4 without a journal (this machine's disk) creating
        files right after deleting a large tree costs several times more system time (see
        settle.py), and whichever program ran next would pay for the previous one's clean-up.
        """
        roots = [self.root] if self.memory_root is None else [self.root, self.memory_root]
        if self.keep:
            print(f"perf: kept {', '.join(map(str, roots))}", file=sys.stderr)
            return
        print(f"perf: deleting {', '.join(map(str, roots))}", file=sys.stderr, flush=True)
        big = self._rollouts_on_disk() >= BIG_DELETE
        for root in roots:
            if shutil.which("rm"):  # several times faster than shutil.rmtree on a million files
                subprocess.run(["rm", "-rf", str(root)], check=False)
            shutil.rmtree(root, ignore_errors=True)
        if big:
            mark_cleaned()

    def _rollouts_on_disk(self) -> int:
        """How many rollout folders the runs left in the (on-disk) workspace."""
        runs = (run / "rollouts" for run in self.root.iterdir())
        return sum(len(os.listdir(rollouts)) for rollouts in runs if rollouts.is_dir())


BIG_DELETE = 20_000  # rollout folders whose deletion slows the disk down for the next suite
MEMORY_DIR = Path("/dev/shm")
MEMORY_NEEDED = 4 << 30  # W4's 200,000-rollout tree takes about 1.7 GB


def _memory_dir() -> Path | None:
    """A fresh directory in RAM (tmpfs), if this machine has one with room; else None."""
    try:
        if os.statvfs(MEMORY_DIR).f_bavail * os.statvfs(MEMORY_DIR).f_frsize < MEMORY_NEEDED:
            return None
        return Path(tempfile.mkdtemp(prefix="osmosis-perf-", dir=MEMORY_DIR))
    except OSError:
        return None


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
