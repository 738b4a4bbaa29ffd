"""What the gateway counts: each rollout's usage, and the live figures of the whole run.

The gateway thread adds to a rollout's ``RolloutUsage`` as its calls end; the engine opens a
rollout's account when an attempt starts (``open``: its sample index and deadline) and takes
it when the rollout is recorded (``take``). Both sides go through one lock, held for a few
dictionary operations at a time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from osmosis_run.results.records import ModelUsage

__all__ = ["LiveStats", "Ledger", "RolloutUsage", "usage_of"]


@dataclass(slots=True)
class RolloutUsage:
    """One rollout's account: its sample index, deadline and what its calls used (``usage``,
    its wait unrounded, its cost not yet priced)."""

    sample_index: int = 0
    deadline: float | None = None  # time.monotonic() past which no retry starts
    usage: ModelUsage = field(default_factory=ModelUsage)
    calls: int = 0  # calls numbered so far (model_calls.jsonl's "call")
    seen: dict[str, int] = field(default_factory=dict)  # request digest -> times asked
    fresh: bool = True  # model_calls.jsonl not yet started over in this invocation
    opened: bool = False  # a rollout of this run (the engine opened it): its calls are recorded

    def occurrence(self, digest: str) -> int:
        """How many identical requests this rollout made before this one."""
        n = self.seen.get(digest, 0)
        self.seen[digest] = n + 1
        return n

    def add_tokens(self, usage: dict[str, Any] | None, live: LiveStats, *, billed: bool) -> int:
        """Count a response's ``usage`` here and in the run's ``live`` figures (``billed``: the
        upstream answered it, not the cache); return its total tokens."""
        if not isinstance(usage, dict):
            return 0
        prompt = _count(usage.get("prompt_tokens"))
        completion = _count(usage.get("completion_tokens"))
        total = _count(usage.get("total_tokens")) or prompt + completion
        counted = self.usage
        counted.prompt_tokens += prompt
        counted.completion_tokens += completion
        counted.total_tokens += total
        live.tokens += total
        if billed:
            live.billed_prompt_tokens += prompt
            live.billed_completion_tokens += completion
            live.billed_tokens += total
        return total


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def usage_of(account: RolloutUsage, price: tuple[float, float] | None) -> ModelUsage:
    """A rollout's account as its results line's ``usage`` (``price``: per million tokens)."""
    usage = account.usage
    cost = None
    if price is not None:
        cost = round((usage.prompt_tokens * price[0] + usage.completion_tokens * price[1]) / 1e6, 8)
    return usage.model_copy(update={"model_wait_ms": round(usage.model_wait_ms, 3), "cost": cost})


@dataclass(slots=True)
class LiveStats:
    """The whole run's figures so far, for the live progress (read without a lock)."""

    started: float = field(default_factory=time.monotonic)
    in_flight: int = 0
    calls: int = 0
    tokens: int = 0
    # Tokens the upstream answered (not the cache): what the run budgets count (run/budgets.py).
    billed_tokens: int = 0
    billed_prompt_tokens: int = 0
    billed_completion_tokens: int = 0
    rate_limited: int = 0
    retries: int = 0
    cache_hits: int = 0
    errors: int = 0

    def tokens_per_s(self) -> float:
        """Tokens a second since the gateway started."""
        elapsed = time.monotonic() - self.started
        return self.tokens / elapsed if elapsed > 0 else 0.0


class Ledger:
    """Every rollout's account, shared by the engine's thread and the gateway's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._accounts: dict[str, RolloutUsage] = {}
        self.live = LiveStats()

    def open(self, rollout_id: str, *, sample_index: int, timeout_s: float | None) -> None:
        """An attempt of a rollout starts: its calls may retry until ``timeout_s`` from now."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            account = self._accounts.get(rollout_id)
            if account is None:
                account = self._accounts[rollout_id] = RolloutUsage(sample_index, deadline)
            account.sample_index, account.deadline, account.opened = sample_index, deadline, True

    def account(self, rollout_id: str) -> RolloutUsage:
        """The account of a rollout (opened now if the engine did not: a call from elsewhere)."""
        with self._lock:
            account = self._accounts.get(rollout_id)
            if account is None:
                account = self._accounts[rollout_id] = RolloutUsage()
            return account

    def take(self, rollout_id: str) -> RolloutUsage | None:
        """Close a rollout's account and return it (None if it made no call)."""
        with self._lock:
            return self._accounts.pop(rollout_id, None)
