"""JSON encoding for what a run writes: strict JSON (no NaN), never failing on odd values."""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["dumps", "finite"]


def dumps(value: Any, *, indent: int | None = None) -> str:
    """Encode as strict JSON: non-finite floats become null, unknown objects their ``str()``."""
    try:
        return json.dumps(value, allow_nan=False, default=str, indent=indent, ensure_ascii=False)
    except ValueError:
        return json.dumps(finite(value), default=str, indent=indent, ensure_ascii=False)


def finite(value: Any) -> Any:
    """A copy of nested dicts and lists with NaN and infinities replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value
