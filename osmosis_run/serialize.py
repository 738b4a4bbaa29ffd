"""JSON encoding for what a run writes: strict JSON (no NaN), never failing on odd values."""

from __future__ import annotations

from typing import Any

import pydantic_core

__all__ = ["encode"]


def encode(value: Any) -> bytes:
    """Encode as compact UTF-8 JSON: NaN and infinities become null, unknown objects ``str()``.

    pydantic-core's encoder (already a dependency) is several times faster than ``json.dumps``,
    and this runs a few times per rollout.
    """
    return pydantic_core.to_json(value, inf_nan_mode="null", fallback=str)
