"""How the gateway paces the upstream: an adaptive limit on calls in flight, budgets, back-off.

- ``AdaptiveLimit``: at most ``limit`` calls in flight. A 429 halves the limit (once per burst:
  a 429 on a call sent before the last decrease does not decrease it again); each success adds
  ``1 / limit``, so the limit climbs back by about one per window of calls (AIMD, as TCP).
- ``Budget``: a token bucket for ``--rpm`` (requests) or ``--tpm`` (tokens) per minute, holding
  at most ``BURST_S`` seconds' worth. Tokens are charged when the response says how many were
  used, so the bucket may go into debt; calls wait while it is in debt.

Retries wait by ``osmosis_run.retry`` (the one back-off and Retry-After rule).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

__all__ = ["BURST_S", "AdaptiveLimit", "Budget"]

BURST_S = 5.0


class AdaptiveLimit:
    """A limit on calls in flight that halves on a burst of 429s and slowly grows back.

    Args:
        ceiling: the most calls in flight ever (``--max-model-connections``).
    """

    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.limit = float(ceiling)
        self.lowest = ceiling
        self.in_flight = 0
        self.peak = 0
        self.decreases = 0
        self._last_decrease = -1.0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def current(self) -> int:
        """The limit now, as a whole number of calls (at least 1)."""
        return max(1, int(self.limit))

    async def acquire(self) -> float:
        """Wait for a slot; return when the call was let through (for ``throttled``)."""
        while self.in_flight >= self.current:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # pass the wake-up on
                raise
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        return time.monotonic()

    def release(self) -> None:
        """A call ended (whatever its outcome)."""
        self.in_flight -= 1
        self._wake()

    def succeeded(self) -> None:
        """A call succeeded: grow the limit by ``1 / limit``."""
        if self.limit < self.ceiling:
            grown = self.limit < self.ceiling and int(self.limit + 1 / self.limit) > int(self.limit)
            self.limit = min(float(self.ceiling), self.limit + 1 / self.limit)
            if grown:
                self._wake()

    def throttled(self, sent_at: float) -> None:
        """A call sent at ``sent_at`` got a 429: halve the limit, once per burst."""
        if sent_at <= self._last_decrease:
            return
        self._last_decrease = time.monotonic()
        self.limit = max(1.0, self.limit / 2)
        self.lowest = min(self.lowest, self.current)
        self.decreases += 1

    def _wake(self) -> None:
        free = self.current - self.in_flight
        while free > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1


class Budget:
    """A token bucket of ``per_minute`` units a minute (requests or tokens), in debt allowed."""

    def __init__(self, per_minute: float) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * BURST_S)
        self.level = self.capacity
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
        self._stamp = now

    async def take(self, amount: float) -> None:
        """Wait until the bucket can pay ``amount`` (0: until it is out of debt), then pay it."""
        async with self._lock:  # first come, first served
            self._refill()
            need = max(amount, 1e-9) if amount else 0.0
            while self.level < need or self.level < 0:
                await asyncio.sleep(max(need - self.level, -self.level, 0.001) / self.rate)
                self._refill()
            self.level -= amount

    def charge(self, amount: float) -> None:
        """Pay ``amount`` afterwards (the tokens a response reported)."""
        self._refill()
        self.level -= amount
