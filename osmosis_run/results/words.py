"""Counted nouns, said right: "1 rollout", "2 rollouts" (every output says counts this way)."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, plural unless the count is 1 (``many`` for an irregular plural)."""
    return f"{count} {noun if count == 1 else (many or noun + 's')}"
