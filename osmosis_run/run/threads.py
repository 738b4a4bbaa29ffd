"""The event loop's default executor: what ``asyncio.to_thread`` and ``run_in_executor(None)`` use.

Workflows call blocking clients through ``asyncio.to_thread`` (osmosis-run's own advice for
blocking code), and a thread cannot be interrupted: when its rollout times out or a stop cancels
it, the rollout is recorded and the blocking call goes on in its thread. asyncio's default
executor would then hold the run twice: ``asyncio.run`` waits for it at the end
(``shutdown_default_executor``), and the interpreter joins its threads at exit, so a run whose
results are all written hangs until the call returns, and Ctrl-C cannot end it.

``WorkerThreads`` runs the same work on daemon threads that nothing joins: the run waits
``grace`` seconds at most for calls still running (``WorkerThreads.settle``) and then leaves them
to the process's exit. It is also sized to the run's concurrency, so ``-c 64`` with a blocking
client really makes 64 calls at once rather than asyncio's ``min(32, cores + 4)``.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["WorkerThreads", "default_size"]

T = TypeVar("T")

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


def default_size(concurrency: int | None) -> int:
    """Threads for a run of ``concurrency`` rollouts: one each, and never fewer than asyncio's."""
    floor = min(32, (os.cpu_count() or 1) + 4)
    return floor if concurrency is None else max(floor, concurrency)


class WorkerThreads(ThreadPoolExecutor):
    """A thread pool whose threads are daemons, started on demand up to ``max_workers``.

    It subclasses ``ThreadPoolExecutor`` only because ``loop.set_default_executor`` accepts
    nothing else; ``submit`` and ``shutdown`` are its own, and none of the base class's threads or
    queues are used.
    """

    def __init__(self, max_workers: int) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        super().__init__(max_workers=max_workers)
        self._limit = max_workers
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._workers: list[threading.Thread] = []
        self._queued = 0  # submitted, not yet taken by a thread
        self._waiting = 0  # threads blocked on the queue
        self._unfinished = 0  # submitted and neither done nor cancelled
        self._closed = False

    @property
    def running(self) -> int:
        """Calls submitted and not yet finished (queued ones included)."""
        with self._lock:
            return self._unfinished

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` on a worker thread; its future carries the outcome."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queued += 1
            self._unfinished += 1
            self._work.put((future, fn, args, kwargs))
            if self._queued > self._waiting and len(self._workers) < self._limit:
                thread = threading.Thread(
                    target=self._serve,
                    name=f"osmosis-run worker {len(self._workers)}",
                    daemon=True,
                )
                self._workers.append(thread)
                thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more work; with ``cancel_futures``, cancel what no thread has started.

        ``wait`` waits for every call to finish, as ``ThreadPoolExecutor.shutdown`` does; the
        run itself uses ``settle`` to wait a bounded time instead.
        """
        with self._lock:
            self._closed = True
            threads = list(self._workers)
        if cancel_futures:
            self._cancel_queued()
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                thread.join()

    def settle(self, grace: float) -> int:
        """Shut down, wait ``grace`` seconds at most for calls still running; return how many are.

        Queued calls are cancelled; those still running after ``grace`` are left to their daemon
        threads, which the process's exit does not wait for.
        """
        self.shutdown(wait=False, cancel_futures=True)
        with self._settled:
            self._settled.wait_for(lambda: self._unfinished == 0, timeout=grace)
            return self._unfinished

    def _cancel_queued(self) -> None:
        while True:
            try:
                work = self._work.get_nowait()
            except queue.Empty:
                return
            if work is None:
                continue
            future = work[0]
            future.cancel()
            with self._lock:
                self._queued -= 1
                self._done()

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._waiting += 1
            work = self._work.get()
            with self._lock:
                self._waiting -= 1
                if work is not None:
                    self._queued -= 1
            if work is None:
                return
            future, fn, args, kwargs = work
            del work
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # as ThreadPoolExecutor: the future carries it
                    future.set_exception(exc)
                    del exc
                else:
                    future.set_result(result)
                    del result
            del future, fn, args, kwargs
            with self._lock:
                self._done()

    def _done(self) -> None:  # under self._lock
        self._unfinished -= 1
        if self._unfinished == 0:
            self._settled.notify_all()
