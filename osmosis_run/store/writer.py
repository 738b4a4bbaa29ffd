"""Who makes rollout directories and writes rollout files: a writer process, or this one.

The store drives either through one protocol, ``Writer``; ``MemoryWriter`` is its fake, for
tests of the store and of the engine (it keeps what it is handed and writes nothing).

A trivial rollout costs tens of microseconds of Python and about as much in system calls
(two directories, two files, a line). Threads cannot overlap the two: every system call hands
the interpreter lock back and waits to get it again behind the event loop. A child process
(``_writer_child.py``, standard library only, started in milliseconds) has its own interpreter,
so the file system work runs on another core while the event loop runs the next rollouts.

``WriterProcess`` sends it frames through a pipe and reads its replies without blocking (the
event loop watches ``reply_fd``); ``InlineWriter`` does the same work in this process, for small
runs and as the fallback when no child can be started. Both write through the same functions,
so the run directory they leave is the same byte for byte.

Nothing waits for the pipe on the event loop: a thread of the writer (``_Pipe``) writes the
frames into it, as fast as the child takes them, so that handing over a batch of long
transcripts (tens of megabytes) costs the loop no more than a small one. ``write`` returns at
once unless the writer is far behind: beyond ``queue`` rollouts or ``queue_bytes`` bytes
unanswered it waits, which bounds memory and what a power loss can take. Well before that
``behind`` says so, and rollouts wait to start (``RunStore.room``) while running ones go on: the
run slows down to the disk's pace without holding the loop.

Durability: the child commits a batch (appends its results lines) after writing its files. If
the runner is killed, the child still finishes every batch it was sent, then exits; a resume
waits for it (the run directory's lock is inherited by the child). A batch is sent once all of
it is in the pipe: until then it is ``unsent``, and the store counts its rollouts as not handed
over yet (a killed runner loses them, and they run again on resume).

Every error names the file it was writing. The run directory's lock and the pipes to the child
are released in a child that user code makes with ``os.fork()``: a forked workflow that lives on
must not keep the run locked, nor the writer process waiting for the end of its input.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Protocol

from osmosis_run.store import _writer_child as child
from osmosis_run.store.layout import ARTIFACTS, RESULT_JSON, TRAJECTORY_JSON

__all__ = [
    "InlineWriter",
    "Item",
    "MemoryWriter",
    "Writer",
    "WriterLost",
    "WriterProcess",
    "child_command",
    "keep_from_forks",
    "release_fd",
    "start_writer",
]

Item = tuple[str, bytes, bytes, bytes | None]  # rollout id, results line, result.json, trajectory
_PIPE_BYTES = 1 << 20  # room for a few batches of small rollouts
_READ_BYTES = 1 << 16
_IOV_MAX = 1024  # buffers one writev takes at most (POSIX's minimum for IOV_MAX)
# How long a child whose pipe closed gets to be reaped, for its exit code.
_REAP_S = 1.0
# How often a wait for the writer process looks whether its pipe broke.
_LOOK_S = 0.1


class WriterLost(OSError):
    """The writer process exited (killed, say) before it answered everything it was sent.

    ``results`` is the results.jsonl it was writing; ``returncode`` its exit (None: unknown).
    """

    def __init__(self, returncode: int | None, results: Path) -> None:
        how = "still running" if returncode is None else f"exit code {returncode}"
        super().__init__(errno.EIO, f"the writer process exited ({how})")
        self.returncode = returncode
        self.results = results


_NOT_FOR_FORKS: set[int] = set()


def keep_from_forks(fd: int) -> int:
    """Release ``fd`` in children made by ``os.fork()`` (it stays open here); return it."""
    _NOT_FOR_FORKS.add(fd)
    return fd


def release_fd(fd: int) -> None:
    """Close a descriptor given to ``keep_from_forks``."""
    _NOT_FOR_FORKS.discard(fd)
    os.close(fd)


def _release_in_forked_child() -> None:
    """Point the child's copies at /dev/null: the lock and the pipes are the parent's alone.

    Not closed: objects the child inherited may close their descriptor later, and a number
    closed now could belong to another file by then.
    """
    if not _NOT_FOR_FORKS:
        return
    try:
        devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return
    for fd in _NOT_FOR_FORKS:
        with contextlib.suppress(OSError):
            os.dup2(devnull, fd, inheritable=False)
    os.close(devnull)
    _NOT_FOR_FORKS.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_release_in_forked_child)


class Writer(Protocol):
    """What the store writes finished rollouts through.

    ``write`` a batch: the rollouts' files, then their results lines (the commit point), or
    raise the ``OSError`` of this batch or of an earlier one. End with ``finish`` (everything
    written and durable) or, when the run failed, ``abandon``; nothing is called after either.
    """

    @property
    def in_background(self) -> bool:
        """Whether another process writes: the store batches for it, it makes directories."""
        ...

    @property
    def reply_fd(self) -> int | None:
        """A descriptor readable when the writer answers (call ``poll`` then), or None."""
        ...

    @property
    def error(self) -> OSError | None:
        """The error a write met, once known (``poll`` takes it), or None: ``write`` raises it."""
        ...

    @property
    def unsent(self) -> int:
        """Rollouts given to ``write`` that are not all with the writer yet (0: none)."""
        ...

    @property
    def behind(self) -> bool:
        """Whether so much is unanswered that new rollouts should wait (``poll`` updates it)."""
        ...

    def make_dirs(self, rollout_ids: Sequence[str]) -> Future[list[str]] | None:
        """Make the rollouts' artifacts directories ahead, or None when this writer does not.

        The future resolves (in ``poll``) to the ids whose directory could not be made.
        """
        ...

    def write(self, items: Sequence[Item]) -> None:
        """Write a batch (see the class)."""
        ...

    def poll(self) -> None:
        """Take the answers that have arrived; never blocks, never raises."""
        ...

    def finish(self) -> None:
        """Write everything handed over, make results.jsonl durable, release the writer."""
        ...

    def abandon(self) -> None:
        """Release the writer without waiting for it (the run failed)."""
        ...


def child_command(results: Path, rollouts: Path) -> list[str]:
    """The command line of a writer process: its files, and the names of a rollout's files."""
    names = (RESULT_JSON, TRAJECTORY_JSON, ARTIFACTS)
    return [sys.executable, "-I", "-S", child.__file__, str(results), str(rollouts), *names]


def _tree(rollouts: Path) -> child.Tree:
    """The layout's names for the rollouts directory, as the writer process gets them."""
    return child.Tree(
        str(rollouts), result=RESULT_JSON, trajectory=TRAJECTORY_JSON, artifacts=ARTIFACTS
    )


def pack(items: Sequence[Item]) -> bytes:
    """The payload of a W frame."""
    return b"".join(payload(items))


def payload(items: Sequence[Item]) -> list[bytes]:
    """The payload of a W frame, in pieces: the documents themselves, not copies."""
    parts: list[bytes] = []
    for rollout_id, line, result, trajectory in items:
        name = os.fsencode(rollout_id)
        size = -1 if trajectory is None else len(trajectory)
        parts += (child.ITEM.pack(len(name), len(result), size, len(line) + 1), name, result)
        if trajectory is not None:
            parts.append(trajectory)
        parts += (line, b"\n")
    return parts


class InlineWriter:
    """Write rollouts in this process, as each is handed over (a ``Writer``).

    Directories are not made ahead: the backend makes each rollout's as it starts.
    """

    in_background = False
    reply_fd = None
    error = None  # a write that fails raises at once
    unsent = 0  # every write is done when ``write`` returns
    behind = False

    def __init__(self, results: Path, rollouts: Path) -> None:
        self._tree = _tree(rollouts)
        self._path = str(results)
        self._wrote = False
        self._results = os.open(
            results, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
        )

    def write(self, items: Sequence[Item]) -> None:
        """Write the rollouts' files, then append their lines.

        Raises:
            OSError: naming the file that could not be written.
        """
        self._wrote = True
        try:
            child.write_batch(self._tree, self._results, pack(items))
        except OSError as exc:  # one that names no file was the append to results.jsonl
            raise child.named(exc, self._path) from None

    def make_dirs(self, rollout_ids: Sequence[str]) -> None:  # noqa: ARG002
        """None: this writer makes no directories ahead."""
        return None

    def poll(self) -> None:
        """Nothing to take: every write is done when ``write`` returns."""

    def finish(self) -> None:
        """Make results.jsonl durable (if anything was written) and close it."""
        try:
            if self._wrote:
                os.fsync(self._results)
        except OSError as exc:
            raise child.named(exc, self._path) from None
        finally:
            os.close(self._results)

    def abandon(self) -> None:
        """Close without waiting (the run failed)."""
        os.close(self._results)


class WriterProcess:
    """Hand directories and rollouts to a writer process (a ``Writer``).

    Args:
        results: results.jsonl.
        rollouts: the rollouts/ directory.
        queue: rollouts handed over and unanswered at most; ``write`` waits beyond it.
        queue_bytes: the same in bytes (``write`` waits beyond either).
        keep_open: file descriptors the child inherits (the run directory's lock).

    Raises:
        OSError: the child cannot be started.
    """

    in_background = True

    def __init__(
        self,
        results: Path,
        rollouts: Path,
        *,
        queue: int,
        queue_bytes: int = 1 << 62,
        keep_open: Sequence[int] = (),
    ) -> None:
        self._queue = queue
        self._queue_bytes = queue_bytes
        self._results = results
        self._process = subprocess.Popen(
            child_command(results, rollouts),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            start_new_session=True,  # Ctrl-C reaches the runner, which decides what to finish
            pass_fds=tuple(keep_open),
        )
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._to = keep_from_forks(self._process.stdin.fileno())
        self._from = keep_from_forks(self._process.stdout.fileno())
        _grow(self._to)
        os.set_blocking(self._to, False)
        os.set_blocking(self._from, False)
        self._pipe = _Pipe(self._to)
        self._seq = 0
        # seq, its directory batch's future (None: a W or F frame), its rollouts, its bytes
        self._unanswered: deque[tuple[int, Future[list[str]] | None, int, int]] = deque()
        self._rollouts = 0  # rollouts unanswered
        self._bytes = 0  # bytes of frames unanswered
        self._behind = False
        self._replies = bytearray()
        self._error: OSError | None = None
        self._ended = False

    @property
    def pid(self) -> int:
        """The writer process's id."""
        return self._process.pid

    @property
    def reply_fd(self) -> int:
        """Readable when replies arrive: call ``poll`` then."""
        return self._from

    @property
    def error(self) -> OSError | None:
        """The first error the child reported (or its loss), once ``poll`` has taken it."""
        return self._error

    @property
    def unsent(self) -> int:
        """Rollouts handed to ``write`` whose batch is not all in the pipe yet."""
        return self._pipe.unsent

    @property
    def behind(self) -> bool:
        """Whether so much is unanswered that new rollouts should wait (``_update_behind``)."""
        return self._behind

    def make_dirs(self, rollout_ids: Sequence[str]) -> Future[list[str]]:
        """Have the child make the rollouts' artifacts directories.

        The future resolves (in ``poll``) to the ids whose directory could not be made.
        """
        future: Future[list[str]] = Future()
        self._send(b"D", [b"\0".join(os.fsencode(i) for i in rollout_ids)], future)
        return future

    def write(self, items: Sequence[Item]) -> None:
        """Hand over a batch; wait only beyond ``queue`` rollouts or ``queue_bytes`` unanswered.

        Raises:
            OSError: the child could not write an earlier batch, or died.
        """
        self._send(b"W", payload(items), None, rollouts=len(items))
        while self._rollouts > self._queue or self._bytes > self._queue_bytes:
            self._wait()

    def poll(self) -> None:
        """Take the replies that have arrived; never blocks, never raises (see ``write``)."""
        while self._error is None and not self._ended:
            try:
                data = os.read(self._from, _READ_BYTES)
            except BlockingIOError:
                return
            if not data:  # the child exited: after F, or it died
                self._ended = True
                if self._unanswered:
                    self._fail(WriterLost(self._exit_code(), self._results))
                return
            self._replies += data
            self._take_replies()

    def finish(self) -> None:
        """Wait for everything handed over, make results.jsonl durable, stop the child.

        Raises:
            OSError: something could not be written.
        """
        try:
            self._send(b"F", [], None)
            while self._unanswered:
                self._wait()
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Stop sending and close the pipes; the child finishes what it was sent, then exits.

        What was not all in the pipe yet is dropped (the child drops a torn last frame).
        """
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        _NOT_FOR_FORKS.difference_update((self._to, self._from))
        # Replies first: a child blocked on a full reply pipe would never read the rest.
        self._process.stdout.close()
        self._pipe.close()
        with contextlib.suppress(OSError):
            self._process.stdin.close()
        self._process.wait()

    def _exit_code(self) -> int | None:
        """The exit code of a child whose pipe has closed (None: still running after 1 s).

        The pipe closes as the child dies, a moment before it can be reaped: ``poll()`` alone
        would often say "still running" of a child killed by a signal.
        """
        try:
            return self._process.wait(timeout=_REAP_S)
        except subprocess.TimeoutExpired:
            return None

    def _send(
        self,
        kind: bytes,
        parts: list[bytes],
        future: Future[list[str]] | None,
        *,
        rollouts: int = 0,
    ) -> None:
        self._raise()
        self._seq += 1
        size = sum(map(len, parts))
        self._unanswered.append((self._seq, future, rollouts, size))
        self._rollouts += rollouts
        self._bytes += size
        self._update_behind()
        self._pipe.send([child.HEADER.pack(kind, self._seq, size), *parts], rollouts)

    def _wait(self) -> None:
        self._raise()
        select.select([self._from], [], [], _LOOK_S)
        self.poll()
        self._raise()

    def _raise(self) -> None:
        if self._error is None and self._pipe.error is not None:  # the child died
            self.poll()  # its last words, if any
            self._fail(WriterLost(self._exit_code(), self._results))
        if self._error is not None:
            raise self._error

    def _take_replies(self) -> None:
        header = child.HEADER
        while len(self._replies) >= header.size:
            kind, seq, size = header.unpack_from(self._replies)
            if len(self._replies) < header.size + size:
                break
            body = bytes(self._replies[header.size : header.size + size])
            del self._replies[: header.size + size]
            expected, future, rollouts, sent = self._unanswered.popleft()
            assert seq == expected, f"writer process replied to {seq}, expected {expected}"
            if kind == b"E":
                (code,) = struct.unpack_from("<i", body)
                message, _, filename = body[4:].decode(errors="replace").partition("\0")
                self._fail(OSError(code, message, filename or None))
                return
            self._rollouts -= rollouts
            self._bytes -= sent
            if future is not None:
                future.set_result([os.fsdecode(i) for i in body.split(b"\0") if i])
        self._update_behind()

    def _update_behind(self) -> None:
        """Behind from 3/4 of ``queue`` or 1/4 of ``queue_bytes``, until below 1/2 and 1/8.

        Rollouts are counted for the many small ones, a batch or two behind as a rule: the
        child is still busy when they start again. Bytes are counted early for long transcripts:
        the rollouts running when new ones start waiting still fit within ``queue_bytes``.
        """
        rollouts, size = self._rollouts, self._bytes
        if self._behind:
            self._behind = rollouts * 2 >= self._queue or size * 8 >= self._queue_bytes
        else:
            self._behind = rollouts * 4 >= self._queue * 3 or size * 4 >= self._queue_bytes

    def _fail(self, error: OSError) -> None:
        """Remember the first error; fail every directory batch still waiting with it."""
        if self._error is None:
            self._error = error
        self._behind = False  # nothing more will be answered: nobody should wait for it
        while self._unanswered:
            _, future, _, _ = self._unanswered.popleft()
            if future is not None and not future.done():
                future.set_exception(error)


class _Pipe:
    """Write frames into the writer process's stdin, in order, never waiting on the caller.

    A frame that fits in the pipe is written at once (the usual case: a batch of small
    rollouts); the rest of one that does not, and every frame after it, is written by a thread
    of its own, which waits for room without the interpreter lock. ``unsent`` counts the
    rollouts of frames not all in the pipe yet. Frames are written from the documents
    themselves: no copy is packed.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._frames: deque[tuple[list[memoryview], int]] = deque()  # waiting for the thread
        self._writing = False  # the thread holds a frame
        self._ready = threading.Condition(threading.Lock())
        self._closing = False
        self.unsent = 0
        self.error: OSError | None = None  # set when the pipe broke (the child died)
        self._thread = threading.Thread(target=self._run, name="osmosis-run writer pipe")
        self._thread.daemon = True  # a runner that dies must not wait for it
        self._thread.start()

    def send(self, frame: list[bytes], rollouts: int) -> None:
        """Write a frame (its header and payload pieces) holding ``rollouts`` rollouts."""
        views = [memoryview(piece) for piece in frame if piece]
        with self._ready:
            if not self._frames and not self._writing and self.error is None:
                try:
                    views = _write_some(self._fd, views)
                except OSError as exc:  # a broken pipe: the writer process died
                    self.error = exc
                    return
                if not views:
                    return
            self._frames.append((views, rollouts))
            self.unsent += rollouts
            self._ready.notify()

    def close(self) -> None:
        """Stop writing (a frame half written is left torn: the child drops it); end the thread."""
        with self._ready:
            self._closing = True
            self._ready.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._ready:
                self._writing = False
                while not self._frames and not self._closing:
                    self._ready.wait()
                if self._closing:
                    return
                views, rollouts = self._frames.popleft()
                self._writing = True
            try:
                self._write(views)
            except OSError as exc:  # a broken pipe: the writer process died
                self.error = exc
                return
            with self._ready:
                self.unsent -= rollouts

    def _write(self, views: list[memoryview]) -> None:
        """Write all of ``views``, waiting for room in the pipe, unless the pipe is closing."""
        room = select.poll()  # not select(): a serve with many connections has high descriptors
        room.register(self._fd, select.POLLOUT)
        while not self._closing:
            views = _write_some(self._fd, views)
            if not views:
                return
            room.poll(_LOOK_S * 1000)


def _write_some(fd: int, views: list[memoryview]) -> list[memoryview]:
    """Write what the non-blocking ``fd`` takes of ``views``; return what is left.

    What is left is what the full pipe did not take, its first piece cut where it stopped.

    Raises:
        OSError: the pipe broke.
    """
    at = 0
    while at < len(views):
        try:
            written = os.writev(fd, views[at : at + _IOV_MAX])
        except BlockingIOError:
            break
        if not written:
            break
        while at < len(views) and written >= views[at].nbytes:
            written -= views[at].nbytes
            at += 1
        if written:
            views[at] = views[at][written:]
    return views[at:]


class MemoryWriter:
    """A ``Writer`` that keeps what it is handed and writes nothing: the fake tests use.

    ``batches`` holds every batch written, in order, and ``dirs`` every ``make_dirs`` call.
    Set ``error`` to have every later call fail with it, as a full disk or a lost writer process
    would; add ids to ``unmade`` to have ``make_dirs`` report their directories unmade. Set
    ``behind`` (and ``unsent``) to act as a writer process that has fallen behind.

    Args:
        in_background: act as a writer process (the store batches for it; it makes
            directories, answering at once) rather than as one in this process.
    """

    reply_fd = None

    def __init__(self, *, in_background: bool = False) -> None:
        self.in_background = in_background
        self.batches: list[list[Item]] = []
        self.dirs: list[list[str]] = []
        self.unmade: set[str] = set()
        self.error: OSError | None = None
        self.behind = False
        self.unsent = 0
        self.finished = False
        self.abandoned = False

    @property
    def items(self) -> list[Item]:
        """Every rollout written, in order."""
        return [item for batch in self.batches for item in batch]

    def make_dirs(self, rollout_ids: Sequence[str]) -> Future[list[str]] | None:
        """Record the ids, or raise ``error``; the future is resolved already (nothing to poll)."""
        if not self.in_background:
            return None
        self._check()
        self.dirs.append(list(rollout_ids))
        future: Future[list[str]] = Future()
        future.set_result([i for i in rollout_ids if i in self.unmade])
        return future

    def write(self, items: Sequence[Item]) -> None:
        """Keep the batch, or raise ``error``."""
        self._check()
        self.batches.append(list(items))

    def poll(self) -> None:
        """Nothing to take."""

    def finish(self) -> None:
        """End; raise ``error`` if set (ending all the same, as a writer process does)."""
        self._ended()
        self.finished = True
        if self.error is not None:
            raise self.error

    def abandon(self) -> None:
        """End without finishing."""
        self._ended()
        self.abandoned = True

    def _check(self) -> None:
        self._ended()
        if self.error is not None:
            raise self.error

    def _ended(self) -> None:
        """A store that uses a writer after ending it has a bug: say so."""
        if self.finished or self.abandoned:
            how = "finished" if self.finished else "abandoned"
            raise RuntimeError(f"the writer was used after it was {how}")


def start_writer(
    results: Path,
    rollouts: Path,
    *,
    background: bool,
    queue: int,
    queue_bytes: int,
    keep_open: Sequence[int] = (),
) -> Writer:
    """A writer process when ``background`` and one can start (POSIX), else an inline writer.

    ``queue`` and ``queue_bytes``: see ``WriterProcess``.
    """
    if background and os.name == "posix" and sys.executable and os.path.isfile(child.__file__):
        try:
            return WriterProcess(
                results, rollouts, queue=queue, queue_bytes=queue_bytes, keep_open=keep_open
            )
        except OSError:
            pass  # no child processes here: write inline
    return InlineWriter(results, rollouts)


def _grow(fd: int) -> None:
    """Enlarge a pipe's buffer (Linux only), so that handing a batch over rarely waits."""
    try:
        import fcntl
    except ImportError:
        return
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if set_size is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, set_size, _PIPE_BYTES)
