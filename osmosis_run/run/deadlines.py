"""Deadlines and the watchdog: how long a rollout's stages may run, and who holds the loop.

``Deadlines`` is what the engine hands every executor (``run/seam.py``): ``await
deadlines.within(stage, seconds, work, rollout_id=..., timed_out=...)`` runs ``work`` within
``seconds`` from now. Past it the work is cancelled and the answer is ``timed_out()``; work that
ignores its cancellation is abandoned after ``abandon_grace_s`` and kept in ``abandoned`` until
it ends (the driver cancels it once more, and counts it, when the run ends); work that returns
after its deadline (blocking code held the event loop, so the timer could not fire) is a timeout
too. The scheduler and the rollout server each make one ``Deadlines`` and hand it to their
executor; neither hands itself.

``Watchdog`` is a thread that names the rollout whose synchronous code holds the event loop:
the loop beats (``beat``) every few milliseconds, and a beat missing for ``after_s`` names the
task running on the loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = [
    "ABANDON_GRACE_S",
    "BLOCKED_AFTER_S",
    "Deadlines",
    "Watchdog",
    "within_deadline",
]

T = TypeVar("T")

# A stage past its deadline that ignores its cancellation this long is abandoned.
ABANDON_GRACE_S = 2.0
# The watchdog names a rollout that holds the event loop this long (blocking code).
BLOCKED_AFTER_S = 3.0
WATCH_EVERY_S = 0.5


class Deadlines:
    """The engine's deadline machinery, handed to executors (``run/seam.py``'s ``Deadlines``).

    Args:
        abandon_grace_s: past its deadline, how long a stage gets to honour its cancellation.

    Attributes:
        abandoned: user code left running (it ignored its cancellation), until it ends.
    """

    def __init__(self, *, abandon_grace_s: float = ABANDON_GRACE_S) -> None:
        self.abandon_grace_s = abandon_grace_s
        self.abandoned: set[asyncio.Future[Any]] = set()

    async def within(
        self,
        stage: str,  # noqa: ARG002  (executors name their stages; the engine treats all alike)
        seconds: float | None,
        work: Coroutine[Any, Any, T],
        *,
        rollout_id: str,
        timed_out: Callable[[], T],
    ) -> T:
        """Run a stage within ``seconds`` from now; past it, ``timed_out()``.

        Without a deadline (``seconds`` None) the stage is awaited as it is.
        """
        return await within_deadline(
            seconds,
            work,
            rollout_id=rollout_id,
            timed_out=timed_out,
            abandon_grace_s=self.abandon_grace_s,
            orphan=self.abandon,
        )

    def abandon(self, task: asyncio.Future[Any]) -> None:
        """Keep a reference to user code left running (in ``abandoned``), until it ends."""
        if not task.done():
            self.abandoned.add(task)
            task.add_done_callback(self.abandoned.discard)

    def cancel_abandoned(self) -> int:
        """Cancel abandoned user code once more; return how many may still be running."""
        pending = [task for task in self.abandoned if not task.done()]
        for task in pending:
            task.cancel()
        return len(pending)


async def within_deadline(
    seconds: float | None,
    work: Coroutine[Any, Any, T],
    *,
    rollout_id: str,
    timed_out: Callable[[], T],
    abandon_grace_s: float,
    orphan: Callable[[asyncio.Future[Any]], None],
) -> T:
    """Run ``work`` within ``seconds`` from now; past it, ``timed_out()``: the deadline rule.

    With a deadline the work runs in a task of its own (named ``rollout_id``), so that the
    caller can stop waiting for code that ignores its cancellation: it is handed to ``orphan``
    after ``abandon_grace_s``. Work that returns after its deadline (blocking code held the event
    loop, so the timer could not fire) is a timeout as well. ``Deadlines.within`` runs it (in
    the engine, the server and each Ray worker).
    """
    if seconds is None:
        return await work
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    task = loop.create_task(work, name=rollout_id)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
        if not done:
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=abandon_grace_s)
    except asyncio.CancelledError:  # the run is stopping: the stage goes with it
        task.cancel()
        orphan(task)
        raise
    if not done:
        orphan(task)
        return timed_out()
    if task.cancelled() or loop.time() > deadline:
        if not task.cancelled():
            task.exception()  # retrieved: a late result is dropped, not logged
        return timed_out()
    return task.result()


class Watchdog:
    """A thread that names the rollout holding the event loop (blocking code in a workflow).

    The event loop sets ``beat`` to ``time.monotonic()`` every few milliseconds; when it has
    not beaten for ``after_s``, the task running on it is the culprit. Each rollout is named
    once, and only a task whose name is a key of ``running`` (a rollout) is named.

    Args:
        loop: the event loop to watch.
        report: called from the watchdog's thread with the rollout id and the seconds held.
        running: rollout id -> when it started (the driver's own dict, read as it changes).
        after_s: how long a held loop goes unreported.
        every_s: how often the thread looks (at most ``after_s / 4``).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        report: Callable[[str | None, float], None],
        running: dict[str, float],
        *,
        after_s: float = BLOCKED_AFTER_S,
        every_s: float = WATCH_EVERY_S,
    ) -> None:
        self.beat = time.monotonic()
        self._after_s = after_s
        self._every_s = min(every_s, after_s / 4)
        self._loop = loop
        self._report = report
        self._running = running
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="osmosis-run watchdog", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the thread ends within ``every_s``)."""
        self._stop.set()

    def _watch(self) -> None:
        named: set[str | None] = set()
        suspect: tuple[float, str | None] | None = None
        while not self._stop.wait(self._every_s):
            beat = self.beat
            if time.monotonic() - beat < self._after_s:
                suspect = None
                continue
            task = asyncio.current_task(self._loop)
            name = task.get_name() if task is not None else None
            seen = (beat, name if name in self._running else None)
            # Named only when seen twice with no beat between: not a task that merely runs
            # for a moment right after the loop came back, before it could beat. What is not a
            # rollout (osmosis-run's own work, such as sorting a shuffled dataset) is not named.
            if seen == suspect and seen[1] is not None and seen[1] not in named:
                named.add(seen[1])
                self._report(seen[1], time.monotonic() - beat)
            suspect = seen
