"""The loop runner: one event loop for a whole command, which does not wait for abandoned code.

``run_to_completion(main)`` is ``asyncio.run(main)`` for eval, grade and serve, on
``osmosis_run.eventloop.new_event_loop()`` (the one event-loop factory), except that user code
left running at the end (a rollout that swallowed its cancellation, a blocking call
still going on in a worker thread) gets ``CLOSE_GRACE_S`` and is then dropped with the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from osmosis_run.eventloop import new_event_loop
from osmosis_run.run.threads import WorkerThreads, default_size

__all__ = ["CLOSE_GRACE_S", "run_to_completion"]

T = TypeVar("T")

# At the end of a run, what is still running gets this long to end after its cancellation.
CLOSE_GRACE_S = 0.5


def run_to_completion(main: Coroutine[Any, Any, T], threads: WorkerThreads | None = None) -> T:
    """``asyncio.run(main)``, except that user code left running is not waited for at the end.

    ``asyncio.run`` cancels every task still running when ``main`` returns and waits for all
    of them, and then for every call in its default executor; a rollout that swallows its
    cancellation (and was abandoned), or whose blocking call goes on in ``asyncio.to_thread``
    after its timeout or a stop, would make it wait as long as they run. Here such tasks get
    ``CLOSE_GRACE_S`` and are then dropped with the loop, and the default executor is ``threads``
    (``run/threads.py``: daemon threads, waited for ``CLOSE_GRACE_S`` at most; afterwards its
    ``running`` says how many calls were left).
    """
    loop = new_event_loop()
    if threads is None:
        threads = WorkerThreads(default_size(None))
    loop.set_default_executor(threads)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=CLOSE_GRACE_S))
            left = {task for task in pending if not task.done()}
            if left:  # they are destroyed pending: that is the point, not an error to log
                loop.set_exception_handler(_quiet_about(left, loop.get_exception_handler()))
                for task in left:
                    _close_now(task)
            loop.run_until_complete(loop.shutdown_asyncgens())
            threads.settle(CLOSE_GRACE_S)
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _close_now(task: asyncio.Task[Any]) -> None:
    """Close an abandoned task's coroutine now rather than whenever it is garbage-collected.

    Its frames then unwind here (GeneratorExit), not in the middle of unrelated work later.
    """
    with contextlib.suppress(BaseException):  # it may ignore GeneratorExit too: drop it anyway
        task.get_coro().close()


def _quiet_about(
    abandoned: set[asyncio.Task[Any]], handler: Any
) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("task") in abandoned:
            return
        if handler is not None:
            handler(loop, context)
        else:
            loop.default_exception_handler(context)

    return handle
