"""Row feeds: the jobs a run's dataset gives, handed to the event loop a batch at a time.

A regular file's rows are made on the event loop (``InlineFeed``: its reads return at once). A
stream's (stdin, a FIFO) are made by a thread (``ThreadFeed``), so a slow producer never holds
the event loop: the thread blocks, the rollouts keep running and Ctrl-C acts at once. Both give
``await next_batch()`` (a list of jobs, or None at the end) and ``close()``. ``open_stream``
opens the stream a dataset of ``-`` or a FIFO is read from. Memory stays O(concurrency +
look-ahead): batches of at most ``FEED_BATCH`` jobs, ``FEED_AHEAD`` batches at most waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from osmosis_run.errors import DatasetError
from osmosis_run.run.rollouts import Job

__all__ = ["FEED_AHEAD", "FEED_BATCH", "Feed", "InlineFeed", "ThreadFeed", "open_stream"]

FEED_BATCH = 64
FEED_AHEAD = 4

# What makes a feed's jobs: called with the hand-over to call before a read that may block.
MakeJobs = Callable[[Callable[[], None]], Iterator[Job]]


class Feed(Protocol):
    """Jobs handed to the event loop a batch at a time."""

    async def next_batch(self) -> list[Job] | None:
        """The next batch of jobs, or None at the end of the rows.

        Raises:
            DatasetError: the dataset could not be read, or is not the one recorded.
        """
        ...

    def close(self) -> None:
        """Stop reading."""
        ...


class ThreadFeed:
    """Jobs made by a thread from the dataset's rows, handed to the event loop in batches.

    Reading a row can block (a stdin or FIFO whose producer is slow): the thread blocks, never
    the event loop, so rollouts keep running and Ctrl-C acts at once. The thread hands over what
    it has before each read that may block, so a live producer's rows start as they arrive.
    """

    def __init__(self, make: MakeJobs, loop: asyncio.AbstractEventLoop) -> None:
        self._make = make
        self._loop = loop
        self._queue: asyncio.Queue[list[Job] | BaseException | None] = asyncio.Queue()
        self._room = threading.Semaphore(FEED_AHEAD)
        self._closed = threading.Event()
        self._batch: list[Job] = []
        self._thread = threading.Thread(target=self._read, name="osmosis-run rows", daemon=True)
        self._thread.start()

    async def next_batch(self) -> list[Job] | None:
        """The next batch of jobs, or None at the end of the rows.

        Raises:
            DatasetError: the dataset could not be read, or is not the one recorded.
        """
        item = await self._queue.get()
        self._room.release()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Stop reading (a thread blocked on a read is left to end with the process)."""
        self._closed.set()
        self._room.release()

    def _read(self) -> None:
        try:
            for job in self._make(self._flush):
                self._batch.append(job)
                if len(self._batch) >= FEED_BATCH:
                    self._flush()
            self._flush()
            self._put(None)
        except _Closed:
            return
        except BaseException as exc:  # handed to the event loop, raised there
            self._put_quietly(exc)

    def _flush(self) -> None:
        if self._batch:
            batch, self._batch = self._batch, []
            self._put(batch)

    def _put(self, item: list[Job] | BaseException | None) -> None:
        self._room.acquire()
        if self._closed.is_set():
            raise _Closed
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed: the run is over
            raise _Closed from None

    def _put_quietly(self, item: BaseException) -> None:
        with contextlib.suppress(_Closed):
            self._put(item)


class InlineFeed:
    """Jobs from a regular file, made on the event loop, a batch at a time.

    A regular file has no producer to wait for: its reads return at once. A reader thread
    would only contend with the event loop for the interpreter lock (each system call of the
    loop hands the lock to the thread, which then parses a batch before giving it back).
    """

    def __init__(self, make: MakeJobs) -> None:
        self._jobs = make(_nothing)
        self._done = False

    async def next_batch(self) -> list[Job] | None:
        """The next batch of jobs, or None at the end of the rows.

        Raises:
            DatasetError: the dataset could not be read.
        """
        await asyncio.sleep(0)  # let the rollouts started so far run between batches
        if self._done:
            return None
        batch = list(itertools.islice(self._jobs, FEED_BATCH))
        if not batch:
            self._done = True
            return None
        return batch

    def close(self) -> None:
        """Stop reading (the dataset file is closed)."""
        close = getattr(self._jobs, "close", None)
        if close is not None:
            close()


def _nothing() -> None:
    """A reader that never waits needs no hand-over."""


class _Closed(Exception):
    """The feed was closed while its thread was handing a batch over."""


class _RawStream:
    """A file descriptor read with plain ``os.read`` calls (no buffered object, no lock).

    The feed thread may be blocked reading a stdin that stays open when the run ends; a
    buffered stream's lock held by that thread would abort the interpreter's shutdown.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def read1(self, size: int = -1) -> bytes:
        return os.read(self._fd, size if size > 0 else 1 << 16)

    def close(self) -> None:
        os.close(self._fd)


class _Borrowed:
    """A stream read but not owned: closing it leaves it open."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def read1(self, size: int = -1) -> bytes:
        read = getattr(self._stream, "read1", self._stream.read)
        data: bytes = read(size if size > 0 else 1 << 16)
        return data

    def close(self) -> None:
        pass


def open_stream(dataset: str) -> Any:
    """The stream a dataset of ``-`` (stdin) or a FIFO is read from (in the feed's thread).

    The process's real stdin is read through its file descriptor; a replaced ``sys.stdin``
    (a test harness, an embedding program) through its binary buffer. Either has ``read1``
    and ``close`` (closing a borrowed ``sys.stdin`` leaves it open).

    Raises:
        DatasetError: the FIFO cannot be opened.
    """
    if dataset == "-":
        stdin = getattr(sys.stdin, "buffer", sys.stdin)
        try:
            if stdin.fileno() == 0:
                return _RawStream(os.dup(0))
        except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError
            pass
        return _Borrowed(stdin)
    try:
        return _RawStream(os.open(dataset, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {dataset}: {exc.strerror or exc}") from None
