"""The writer process: makes rollout directories and writes rollout files for ``writer.py``.

Started as ``python -I -S _writer_child.py RESULTS ROLLOUTS RESULT TRAJECTORY ARTIFACTS`` with
only the standard library, so it is running within milliseconds. It gets its own interpreter
lock: file creation, mostly system calls, overlaps the runner's Python work on another core
instead of contending with it. It cannot import ``layout.py``: the names of a rollout's files
and directory (RESULT, TRAJECTORY, ARTIFACTS) are its arguments (``writer.child_command``).

Protocol: frames on stdin, each ``HEADER`` (kind, sequence number, payload size) then the
payload; one reply per frame on stdout, in order, with the same header layout.

    D  make <ROLLOUTS>/<id>/<ARTIFACTS> for NUL-separated ids; reply A with the ids that failed
    W  write a batch of rollouts (``ITEM`` records): their files, then their results lines in
       one append to RESULTS (the commit point); reply A
    F  fsync RESULTS; reply A and exit
    E  (reply) an OSError: errno, then "strerror\0filename" (the file it was writing, always
       named); every later frame is ignored

At end of input (the runner exited, or was killed) it finishes every whole frame it has read and
exits: rollouts handed over before a crash still reach the disk. A torn last frame is dropped.
"""

from __future__ import annotations

import os
import struct
import sys

TYPE_CHECKING = False  # typing costs milliseconds of start-up; mypy reads this name alike

if TYPE_CHECKING:
    from typing import BinaryIO

HEADER = struct.Struct("<cII")
ITEM = struct.Struct("<IIiI")  # sizes of: rollout id, result.json, trajectory.json (-1: none), line
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


def write_file(path: str, data: bytes | memoryview) -> None:
    """Create or replace a file in three system calls (``open()`` makes six).

    Raises:
        OSError: naming ``path`` (a full disk fails ``write``, which names no file).
    """
    fd = os.open(path, _CREATE, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise named(exc, path) from None
    finally:
        os.close(fd)


def named(exc: OSError, path: str) -> OSError:
    """``exc`` with ``path`` as its file name, unless it names one already."""
    if exc.filename is not None:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), path)


class Tree:
    """Where rollouts go: ``<root>/<id>/`` holding ``result``, ``trajectory`` and ``artifacts``/.

    Args:
        root: the rollouts directory.
        result: the name of result.json (``layout.RESULT_JSON``), and so on.
    """

    __slots__ = ("artifacts", "result", "root", "trajectory")

    def __init__(self, root: str, *, result: str, trajectory: str, artifacts: str) -> None:
        self.root = root
        self.result = result
        self.trajectory = trajectory
        self.artifacts = artifacts


def make_dirs(tree: Tree, payload: bytes) -> bytes:
    """Make each id's artifacts directory; return the ids that could not be made."""
    root, artifacts = tree.root, tree.artifacts
    failed = []
    for raw in payload.split(b"\0"):
        if not raw:
            continue
        where = os.path.join(root, os.fsdecode(raw))
        try:
            for path in (where, os.path.join(where, artifacts)):
                try:
                    os.mkdir(path)
                except FileExistsError:
                    continue
        except OSError:
            failed.append(raw)
    return b"\0".join(failed)


def write_batch(tree: Tree, results: int, payload: bytes) -> None:
    """Write each rollout's files, then append all their results lines at once."""
    root, result_name, trajectory_name = tree.root, tree.result, tree.trajectory
    view = memoryview(payload)
    lines = []
    at = 0
    while at < len(view):
        id_size, result_size, trajectory_size, line_size = ITEM.unpack_from(view, at)
        at += ITEM.size
        where = os.path.join(root, os.fsdecode(bytes(view[at : at + id_size])))
        at += id_size
        result = view[at : at + result_size]
        at += result_size
        try:
            write_file(os.path.join(where, result_name), result)
        except FileNotFoundError:  # no artifacts directory was made (an invalid row)
            os.makedirs(where, exist_ok=True)
            write_file(os.path.join(where, result_name), result)
        if trajectory_size >= 0:
            write_file(os.path.join(where, trajectory_name), view[at : at + trajectory_size])
            at += trajectory_size
        lines.append(view[at : at + line_size])
        at += line_size
    write_all(results, b"".join(lines))


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def error_body(exc: OSError) -> bytes:
    """The payload of an E frame describing ``exc``."""
    text = f"{exc.strerror or exc}\0{exc.filename or ''}".encode(errors="replace")
    return struct.pack("<i", exc.errno or 0) + text


class Replies:
    """Replies to the runner; once it is gone (killed), the work goes on unanswered."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    def send(self, kind: bytes, seq: int, body: bytes) -> None:
        """Send one reply frame, unless nobody reads them any more."""
        if self.fd is None:
            return
        try:
            write_all(self.fd, HEADER.pack(kind, seq, len(body)) + body)
        except BrokenPipeError:
            self.fd = None


def answer_frame(kind: bytes, payload: bytes, results: int, tree: Tree) -> bytes:
    """Do what a D, W or F frame asks; the body of its A reply."""
    if kind == b"D":
        return make_dirs(tree, payload)
    if kind == b"W":
        write_batch(tree, results, payload)
    elif kind == b"F":
        os.fsync(results)
    return b""


def serve(
    source: BinaryIO,
    replies: Replies,
    results: int,
    tree: Tree,
    *,
    results_path: str = "",
    error: OSError | None = None,
) -> None:
    """Answer frames from ``source`` until it ends or sends F; after an error, only read.

    ``error`` (RESULTS could not be opened) is the answer to the first frame.
    """
    failed = False
    while True:
        head = source.read(HEADER.size)
        if len(head) < HEADER.size:
            return
        kind, seq, size = HEADER.unpack(head)
        payload = source.read(size)
        if len(payload) < size:
            return  # a torn last frame: the runner died while sending it
        if failed:
            continue
        try:
            if error is not None:
                raise error
            answer = answer_frame(kind, payload, results, tree)
        except OSError as exc:  # what names no file was RESULTS: its append, its fsync
            failed = True
            replies.send(b"E", seq, error_body(named(exc, results_path)))
            continue
        replies.send(b"A", seq, answer)
        if kind == b"F":
            return


def main() -> None:
    """``_writer_child.py RESULTS ROLLOUTS RESULT TRAJECTORY ARTIFACTS``."""
    results_path, root, result, trajectory, artifacts = sys.argv[1:6]
    tree = Tree(root, result=result, trajectory=trajectory, artifacts=artifacts)
    error = None
    try:
        results = os.open(
            results_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
        )
    except OSError as exc:
        results, error = -1, named(exc, results_path)
    with os.fdopen(0, "rb", buffering=1 << 20, closefd=False) as source:
        serve(source, Replies(1), results, tree, results_path=results_path, error=error)
    if results >= 0:
        os.close(results)


if __name__ == "__main__":
    main()
