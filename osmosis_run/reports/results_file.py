"""A run's results.jsonl read back as a sequence of its rollouts, without holding them.

``scan_results(run_dir, add)`` reads results.jsonl once, hands every result to ``add`` in file
order, and returns a ``ResultsFile``: the run's rollouts, one per id (the last line for an id
wins, at the place of its first, as ``load_run`` keeps them; torn and corrupt lines are left out,
as every reader leaves them). It keeps only where each rollout's line starts, 8 bytes a rollout;
iterating it reads the lines again, one at a time, so reading a run of a million rollouts costs
a report their time, not their memory. Lines written after the scan (a run still going) are not
part of it: every pass over it reads the same rollouts.

Repeated ids are found as the scan goes, in a table of the ids' hashes (16 to 24 bytes a rollout,
for the scan only; an equal hash is checked against the line it points to). A run directory holds
none, unless a crash and a resume raced; then ``add`` has seen the lines that lost, and
``scan_results`` says so: its caller folds the ``ResultsFile`` again. A caller that knows how
many rollouts the file holds (a finished run's summary.json: ``report.open_run``) scans without
the table (``ids=False``) and checks the count.
"""

from __future__ import annotations

import os
import weakref
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, overload

from osmosis_run.errors import RunDirError
from osmosis_run.results.records import ResultLine
from osmosis_run.store.layout import RESULTS
from osmosis_run.store.store import parse_line

__all__ = ["ResultsFile", "scan_results"]

_BUFFER = 1 << 20


class ResultsFile(Sequence[ResultLine]):
    """The rollouts of a run's results.jsonl, as ``scan_results`` found them, read on demand.

    The file stays open (the same file, even if a resume replaces results.jsonl meanwhile)
    until the object is collected or ``close()`` is called. A line that no longer reads as a
    result (the file was changed in place, which osmosis-run never does to what it scanned) is
    skipped, as a corrupt line always is.
    """

    def __init__(self, path: Path, fd: int | None, starts: array[int]) -> None:
        self.path = path
        self._fd = fd
        self._starts = starts
        self._closer = weakref.finalize(self, _close, fd)

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, index: int) -> ResultLine: ...

    @overload
    def __getitem__(self, index: slice) -> list[ResultLine]: ...

    def __getitem__(self, index: int | slice) -> ResultLine | list[ResultLine]:
        if isinstance(index, slice):
            return list(self._read(self._starts[index]))
        start = self._starts[index]
        if _pread is not None and self._fd is not None:
            line = parse_line(_line_at(self._fd, start))
        else:
            line = next(self._read(array("q", [start])), None)
        if line is None:
            raise RunDirError(f"{self.path} changed while it was being read; read it again")
        return line

    def __iter__(self) -> Iterator[ResultLine]:
        return self._read(self._starts)

    def _read(self, starts: array[int]) -> Iterator[ResultLine]:
        if not starts:
            return
        with self._open() as f:
            for start in starts:
                line = _read_at(f, start)
                if line is not None:
                    yield line

    def close(self) -> None:
        """Close the file (the sequence cannot be read after)."""
        self._closer()
        self._fd = None

    def _open(self) -> BinaryIO:
        if self._fd is None:
            raise ValueError(f"{self.path}: the results file is closed")
        return os.fdopen(os.dup(self._fd), "rb", buffering=_BUFFER)


_pread = getattr(os, "pread", None)  # one line read where it is, without a file object
_LINE_READ = 8192


def _line_at(fd: int, start: int) -> bytes:
    """The line that starts at ``start`` (with its newline), read by ``os.pread``."""
    assert _pread is not None
    pieces = []
    while chunk := _pread(fd, _LINE_READ, start):
        end = chunk.find(b"\n")
        if end >= 0:
            pieces.append(chunk[: end + 1])
            break
        pieces.append(chunk)
        start += len(chunk)
    return b"".join(pieces)


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _read_at(f: BinaryIO, start: int) -> ResultLine | None:
    f.seek(start)
    return parse_line(f.readline())


def scan_results(
    run_dir: Path, add: Callable[[ResultLine], None], *, ids: bool = True
) -> tuple[ResultsFile, bool]:
    """Read ``run_dir``'s results.jsonl once, handing each result to ``add``.

    Args:
        run_dir: the run directory.
        add: gets every valid result, in file order.
        ids: look for repeated ids; without, every valid line is a rollout of its own (for a
            caller that knows how many rollouts the file holds, and checks ``len``).

    Returns:
        The rollouts, and whether ``add`` saw exactly them: False when an id was repeated (the
        earlier line was handed to ``add`` too); fold the ``ResultsFile`` again then.

    Raises:
        OSError: results.jsonl exists and cannot be read.
    """
    path = run_dir / RESULTS
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return ResultsFile(path, None, array("q")), True
    try:
        starts, exact = _scan(os.fdopen(os.dup(fd), "rb", buffering=_BUFFER), add, ids=ids)
    except BaseException:
        os.close(fd)
        raise
    return ResultsFile(path, fd, starts), exact


def _scan(f: BinaryIO, add: Callable[[ResultLine], None], *, ids: bool) -> tuple[array[int], bool]:
    starts: array[int] = array("q")
    seen = _Ids() if ids else None
    exact = True
    with f:
        offset = 0
        for raw in f:
            line = parse_line(raw)
            if line is not None:
                earlier = (
                    None
                    if seen is None
                    else seen.add(line.rollout_id, len(starts), lambda at: _id_at(f, starts[at]))
                )
                if earlier is None:
                    starts.append(offset)
                else:  # the later line wins, where the first was
                    starts[earlier] = offset
                    exact = False
                add(line)
            offset += len(raw)
    return starts, exact


def _id_at(f: BinaryIO, start: int) -> str:
    """The rollout id of the line at ``start`` (and back to where the scan was)."""
    here = f.tell()
    try:
        line = _read_at(f, start)
    finally:
        f.seek(here)
    return "" if line is None else line.rollout_id


class _Ids:
    """The rollout ids seen so far, as their hashes in an open-addressing table.

    ``add`` returns the position of the earlier rollout with the same id, or None; a position
    whose hash is equal is checked by ``id_at`` (two ids of a run sharing a 64-bit hash are
    possible, and told apart).
    """

    def __init__(self) -> None:
        self._hashes: array[int] = array("q")
        self._slots: array[int] = array("i", bytes(4 * 1024))  # position + 1; 0: empty
        self._mask = len(self._slots) - 1

    def add(self, rollout_id: str, position: int, id_at: Callable[[int], str]) -> int | None:
        key = hash(rollout_id)
        slots, hashes, mask = self._slots, self._hashes, self._mask
        at = key & mask
        while taken := slots[at]:
            if hashes[taken - 1] == key and id_at(taken - 1) == rollout_id:
                return taken - 1
            at = (at + 1) & mask
        slots[at] = position + 1
        hashes.append(key)
        if 2 * len(hashes) > len(slots):
            self._grow()
        return None

    def _grow(self) -> None:
        size = 2 * len(self._slots)
        slots: array[int] = array("i", bytes(size * self._slots.itemsize))
        mask = size - 1
        for position, key in enumerate(self._hashes):
            at = key & mask
            while slots[at]:
                at = (at + 1) & mask
            slots[at] = position + 1
        self._slots, self._mask = slots, mask
