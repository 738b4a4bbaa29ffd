"""The rollouts a server holds: their leases, their status changes, and how long they stay.

One ``Entry`` per admitted rollout, from its 202 until ``retention`` seconds after its result
is final. A server that runs for days holds only what is in flight and what finished within the
retention window; nothing else grows with the rollouts it served.

Timers cost nothing per rollout: every lease has the same length, so the order in which leases
run out is the order in which they were last renewed, and one ordered dict (renewing moves an
entry to its end) with one timer on its first entry watches them all. Retention is the same
with finish times: a queue and one timer.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from osmosis_run.sdk.types import RolloutStatus

__all__ = ["Entry", "InvalidLease", "RolloutTable", "UnknownRollout"]

# A timer may fire a hair before the time it was set for (the loop's clock resolution).
_EARLY_S = 1e-3


class UnknownRollout(Exception):
    """No rollout of that id is held (never admitted, or its retention ended)."""


class InvalidLease(Exception):
    """The lease token does not match the rollout's."""


@dataclass(slots=True, eq=False)
class Entry:
    """One admitted rollout.

    Attributes:
        rollout_id: its id.
        digest: SHA-256 of its lease token (the token itself is not kept).
        deadline: when its lease runs out (event-loop time), unless a poll renews it.
        status: where it is; terminal once ``body`` is set.
        body: its final result, encoded for the wire.
        task: what executes it.
        disposition: what cancelling it answered (set once).
        changed: resolved at its next status change, when someone waits for one.
        job: what the server records it as (its row, seed).
        secret: the model key the request brought, redacted from its records.
    """

    rollout_id: str
    digest: bytes
    deadline: float
    status: RolloutStatus = RolloutStatus.QUEUED
    body: bytes | None = None
    task: asyncio.Task[None] | None = None
    disposition: str | None = None
    changed: asyncio.Future[None] | None = None
    retained_until: float = 0.0
    release_when_done: bool = False
    job: Any = None
    secret: str | None = None  # the request's llm_api_key: kept out of what is recorded

    @property
    def finished(self) -> bool:
        """Whether its result is final."""
        return self.body is not None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).digest()


class RolloutTable:
    """Entries by id, their leases and their retention.

    Args:
        lease_s: how long a lease lasts after its last renewal.
        retention_s: how long a final result stays after it is final.
        on_expired: called with an entry whose lease ran out (its result is not final).
    """

    def __init__(
        self, *, lease_s: float, retention_s: float, on_expired: Callable[[Entry], None]
    ) -> None:
        self.lease_s = lease_s
        self.retention_s = retention_s
        self._on_expired = on_expired
        self.entries: dict[str, Entry] = {}
        self._leases: OrderedDict[str, Entry] = OrderedDict()  # by deadline, first runs out first
        self._retained: deque[Entry] = deque()  # by retained_until
        self._lease_timer: asyncio.TimerHandle | None = None
        self._retention_timer: asyncio.TimerHandle | None = None
        self.waiting = 0  # polls waiting for a status change

    @property
    def leases(self) -> int:
        """Leases being watched (one per rollout in flight)."""
        return len(self._leases)

    @property
    def timers(self) -> int:
        """Timers armed: at most two, whatever the number of rollouts."""
        return (self._lease_timer is not None) + (self._retention_timer is not None)

    def register(self, rollout_id: str) -> tuple[Entry, str] | None:
        """Hold a new rollout; its lease starts now. None when the id is held already."""
        if rollout_id in self.entries:
            return None
        token = secrets.token_urlsafe(32)
        loop = asyncio.get_running_loop()
        entry = Entry(rollout_id, _digest(token), loop.time() + self.lease_s)
        self.entries[rollout_id] = entry
        self._leases[rollout_id] = entry
        self._arm_leases(loop)
        return entry, token

    def discard(self, entry: Entry) -> None:
        """Forget a rollout at once (its admission failed)."""
        if self.entries.get(entry.rollout_id) is entry:
            del self.entries[entry.rollout_id]
        self._drop_lease(entry)

    def get(self, rollout_id: str, token: str) -> Entry:
        """The rollout, once its lease token is checked (constant-time).

        Raises:
            UnknownRollout: no such rollout is held.
            InvalidLease: the token is not its lease's.
        """
        entry = self.entries.get(rollout_id)
        if entry is None:
            raise UnknownRollout(rollout_id)
        if not hmac.compare_digest(entry.digest, _digest(token)):
            raise InvalidLease(rollout_id)
        return entry

    def renew(self, entry: Entry) -> bool:
        """Extend the lease of a rollout in flight; False when it had run out already."""
        now = asyncio.get_running_loop().time()
        if now >= entry.deadline:
            return False
        entry.deadline = now + self.lease_s
        self._leases.move_to_end(entry.rollout_id)
        return True

    def set_status(self, entry: Entry, status: RolloutStatus) -> None:
        """A rollout in flight moved on (running, grading): wake whoever waits for it."""
        if entry.body is None and entry.status != status:
            entry.status = status
            _wake(entry)

    def finish(self, entry: Entry, status: RolloutStatus, body: bytes) -> None:
        """Make a rollout's result final: wake its polls, stop its lease, start its retention."""
        entry.status = status
        entry.body = body
        _wake(entry)
        self._drop_lease(entry)
        loop = asyncio.get_running_loop()
        entry.retained_until = loop.time() + self.retention_s
        self._retained.append(entry)
        if self._retention_timer is None:
            self._retention_timer = loop.call_at(entry.retained_until, self._release)

    async def wait_for_change(
        self, entry: Entry, seconds: float, *, gone: asyncio.Future[None] | None
    ) -> None:
        """Wait up to ``seconds`` for the rollout's next status change (or for ``gone``)."""
        if entry.changed is None or entry.changed.done():
            entry.changed = asyncio.get_running_loop().create_future()
        waits: set[asyncio.Future[None]] = {entry.changed}
        if gone is not None:
            waits.add(gone)
        self.waiting += 1
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.waiting -= 1

    def select(self, *, ids: Iterable[str] | None, prefix: str | None, all: bool) -> list[str]:  # noqa: A002
        """The ids a cancel names, as the SDK's server picks them (finished ones included)."""
        if all:
            return list(self.entries)
        if prefix is not None:
            return [rid for rid in self.entries if rid.startswith(prefix)]
        return list(ids or [])

    def in_flight(self) -> list[Entry]:
        """The rollouts whose result is not final yet."""
        return [entry for entry in self.entries.values() if entry.body is None]

    def close(self) -> None:
        """Stop both timers (the server is shutting down)."""
        for timer in (self._lease_timer, self._retention_timer):
            if timer is not None:
                timer.cancel()
        self._lease_timer = self._retention_timer = None

    def _drop_lease(self, entry: Entry) -> None:
        self._leases.pop(entry.rollout_id, None)
        if not self._leases and self._lease_timer is not None:  # nothing left to watch
            self._lease_timer.cancel()
            self._lease_timer = None

    def _arm_leases(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._lease_timer is None and self._leases:
            first = next(iter(self._leases.values()))
            self._lease_timer = loop.call_at(first.deadline, self._expire_leases)

    def _expire_leases(self) -> None:
        self._lease_timer = None
        loop = asyncio.get_running_loop()
        now = loop.time() + _EARLY_S
        while self._leases:
            entry = next(iter(self._leases.values()))
            if entry.deadline > now:
                break
            del self._leases[entry.rollout_id]
            self._on_expired(entry)
        self._arm_leases(loop)

    def _release(self) -> None:
        """Forget the rollouts whose retention ended (one still executing: once it ends)."""
        self._retention_timer = None
        loop = asyncio.get_running_loop()
        now = loop.time() + _EARLY_S
        while self._retained and self._retained[0].retained_until <= now:
            entry = self._retained.popleft()
            # A result published before its execution ended (a lease ran out, a cancel that
            # is being ignored) keeps its id reserved until the execution is over.
            if entry.task is not None and not entry.task.done():
                entry.release_when_done = True
            else:
                self.release(entry)
        if self._retained:
            self._retention_timer = loop.call_at(self._retained[0].retained_until, self._release)

    def release(self, entry: Entry) -> None:
        """Forget one rollout whose retention ended."""
        if self.entries.get(entry.rollout_id) is entry:
            del self.entries[entry.rollout_id]


def _wake(entry: Entry) -> None:
    if entry.changed is not None and not entry.changed.done():
        entry.changed.set_result(None)
    entry.changed = None
