"""A small pool of worker threads that grows only while work waits for it.

File creation costs little CPU but may wait long on storage. On a fast disk one worker thread
keeps up and every extra thread only adds contention for the interpreter lock; on a slow one,
several requests in flight at once go through several times faster. So the pool starts with
one thread and adds another (up to ``most``) whenever more than ``backlog`` tasks wait.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["WorkerPool"]

_Task = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


class WorkerPool:
    """Run submitted calls on daemon threads; ``shutdown`` waits for all of them."""

    def __init__(self, name: str, *, most: int, backlog: int) -> None:
        self._name = name
        self._most = most
        self._backlog = backlog
        self._queue: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._start()

    @property
    def threads(self) -> int:
        """How many worker threads run now."""
        return len(self._threads)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Queue ``fn(*args)``; add a thread when work piles up."""
        future: Future[Any] = Future()
        self._queue.put((future, fn, args))
        if self._queue.qsize() > self._backlog and len(self._threads) < self._most:
            self._start()
        return future

    def shutdown(self, *, cancel: bool = False) -> None:
        """Stop every thread after what was submitted (``cancel``: after what already started)."""
        while cancel:
            try:
                task = self._queue.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task[0].cancel()
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def _start(self) -> None:
        thread = threading.Thread(
            target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    def _work(self) -> None:
        while (task := self._queue.get()) is not None:
            future, fn, args = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to whoever waits on the future
                future.set_exception(exc)
