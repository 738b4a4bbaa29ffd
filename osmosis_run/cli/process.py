"""Process control for the commands that run rollouts (eval, grade, serve): signals, gc, threads.

``Interrupts`` holds SIGINT and SIGTERM while a command runs: the first stops the work cleanly,
the second exits 130 at once. ``run_loop`` runs the command's coroutine on one event loop with
worker threads of its own and fewer cyclic garbage collections, and says which blocking calls
it ended without waiting for.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import signal
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from osmosis_run.cli import exit_codes
from osmosis_run.cli.streams import err

T = TypeVar("T")


class Interrupts:
    """SIGINT and SIGTERM, from ``__enter__`` until ``__exit__``.

    Inside ``stopping(stop)``, the first signal calls ``stop`` on the event loop and the second
    exits 130 at once. Before it, a signal exits 130 at once; after it (the work has ended, only
    its summary is left), the first signal prints ``ended_note``, if any, and exits 130. Plain
    ``signal`` handlers rather than the loop's: they run even while user code blocks the event
    loop, so the second Ctrl-C always ends the process.
    """

    def __init__(self, *, ended_note: str | None = None) -> None:
        self._ended_note = ended_note
        self._signals = 0
        self._stop: Callable[[], object] | None = None
        self._ended = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Interrupts:
        self._previous = {
            sig: signal.signal(sig, self._on_signal) for sig in exit_codes.STOP_SIGNALS
        }
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @contextlib.contextmanager
    def stopping(self, stop: Callable[[], object]) -> Iterator[None]:
        """While inside, the first signal calls ``stop`` on the running event loop."""
        loop = asyncio.get_running_loop()
        self._stop = functools.partial(loop.call_soon_threadsafe, stop)
        try:
            yield
        finally:
            self._stop = None
            self._ended = True

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self._signals += 1
        stop = self._stop
        if stop is not None and self._signals == 1:
            stop()
            return
        if self._signals == 1 and self._ended and self._ended_note:  # the line is all there is
            with contextlib.suppress(OSError):
                os.write(2, f"{self._ended_note}\n".encode())
        os._exit(exit_codes.INTERRUPTED)


def run_loop(main: Coroutine[Any, Any, T], *, concurrency: int | None, who: str) -> T:
    """Run ``main`` to its end on an event loop of its own; ``who`` starts what it says.

    Not ``asyncio.run``: it would wait at the end for every blocking call a cancelled rollout
    left in ``asyncio.to_thread`` (``run/loop.py``). The worker threads are one per rollout in
    flight (``concurrency``).
    """
    from osmosis_run.run.loop import run_to_completion
    from osmosis_run.run.threads import WorkerThreads, default_size

    threads = WorkerThreads(default_size(concurrency))
    try:
        with fewer_collections():
            return run_to_completion(main, threads)
    finally:
        _say_if_threads_left(threads.running, who)


def _say_if_threads_left(running: int, who: str) -> None:
    """Name the blocking calls (``asyncio.to_thread``) the loop ended without waiting for."""
    if not running:
        return
    calls = "1 blocking call was" if running == 1 else f"{running} blocking calls were"
    err.print(
        f"{who}: {calls} still running in worker threads (asyncio.to_thread) after "
        "their rollouts were cancelled; not waiting for them",
        markup=False,
    )


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Collect cyclic garbage less often while rollouts run.

    A rollout allocates a few dozen short-lived objects, nearly all freed by reference
    counting; the default threshold (700) makes the collector walk every live task and module
    object thousands of times a run. Freezing what startup loaded and raising the first
    threshold cut that work without letting memory grow with the dataset.
    """
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
