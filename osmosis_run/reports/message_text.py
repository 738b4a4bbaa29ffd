"""A chat message's content as text: what ``osmosis-run show`` and the HTML report both print."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["message_text"]


def message_text(content: Any) -> str:
    """The text of a message's ``content``: a string as it is, a list of parts one per line.

    A part with a ``text`` string is that text; any other part is its type in brackets
    (``[image_url]``, or ``[part]`` without one). Anything else is its compact JSON.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_part_text(part) for part in content)
    return _json(content)


def _part_text(part: Any) -> str:
    if isinstance(part, dict):
        if isinstance(part.get("text"), str):
            return str(part["text"])
        return f"[{part.get('type') or 'part'}]"
    return part if isinstance(part, str) else _json(part)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
