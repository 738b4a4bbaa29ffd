"""Which run directories the view serves, by name, and what state each is in.

A PATH given to ``osmosis-run view`` is a run directory (it holds fingerprint.json) or a folder
of them (its children that are; looked at again on every runs list, so a run started after the
view appears). Each run has a name for its URLs: its folder's name, with ``~2``, ``~3`` after
it when two PATHs hold folders of the same name, so that a link copied stays the same as long
as the view is started with the same PATHs.

A run is ``running`` while an osmosis-run holds its directory's lock (``flock``, which ``eval``
and ``grade`` take for as long as they write it: asked for shared and without waiting, it is
refused exactly then), ``finished`` when its summary.json says it completed, and
``interrupted`` otherwise (stopped, or killed before it wrote a summary).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from osmosis_run.store.layout import FINGERPRINT

__all__ = ["RunState", "Runs", "is_run_dir", "run_state"]

RunState = Literal["running", "finished", "interrupted"]


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is an osmosis-run run directory."""
    return (path / FINGERPRINT).is_file()


def is_locked(run_dir: Path) -> bool:
    """Whether an osmosis-run is writing ``run_dir`` now (it holds the directory's lock)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no locks to look at
        return False
    try:
        fd = os.open(run_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a file system without locks
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def run_state(run_dir: Path, *, complete: bool | None) -> RunState:
    """``running``, ``finished`` or ``interrupted`` (``complete``: what summary.json says,
    None without one)."""
    if is_locked(run_dir):
        return "running"
    return "finished" if complete else "interrupted"


@dataclass(frozen=True, slots=True)
class Runs:
    """The PATHs the view was given; ``find()`` lists the run directories they hold now."""

    roots: tuple[Path, ...]

    @classmethod
    def of(cls, paths: Sequence[Path]) -> Runs:
        """The PATHs, resolved."""
        return cls(tuple(path.resolve() for path in paths))

    def find(self) -> dict[str, Path]:
        """Every run directory, by its name in URLs, in the order of the PATHs then by name."""
        found: dict[str, Path] = {}
        taken: dict[str, int] = {}
        for root in self.roots:
            for run_dir in _runs_in(root):
                if run_dir in found.values():
                    continue
                base = run_dir.name
                taken[base] = taken.get(base, 0) + 1
                name = base if taken[base] == 1 else f"{base}~{taken[base]}"
                found[name] = run_dir
        return found


def _runs_in(root: Path) -> list[Path]:
    if is_run_dir(root):
        return [root]
    try:
        children = sorted(root.iterdir())
    except OSError:
        return []
    return [child for child in children if child.is_dir() and is_run_dir(child)]
