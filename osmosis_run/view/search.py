"""Full-text search across a run's rollouts, on the server, streaming hits as they are found.

What is searched is what the report's own search box searches in a rollout: its id, row id,
status, error category and message, label, metadata, and its transcript (every message's
content and reasoning, tool names and tool-call arguments), case-insensitively. The results
lines hold all of it; they are read from the file in large chunks, and a chunk is first
searched as raw bytes (fast, ``bytes.find``): only the lines that hold the words somewhere
(a key's name, an escape, the text itself) are parsed, and a line counts as a hit when the
words are in its text. So the first hits go out while the rest of the file is still being read,
and memory holds one chunk.

Each hit is one JSON line: the rollout's id and a snippet of the text around the first match,
with where the match is in it (``[start, end]``), for the page to highlight; the last line says
how many rollouts were searched and how many matched (``done``), and whether the search stopped
at ``MAX_HITS``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from osmosis_run.reports.message_text import message_text
from osmosis_run.store.layout import RESULTS
from osmosis_run.view.index import RunIndex

__all__ = ["MAX_HITS", "SNIPPET_CHARS", "haystack", "search"]

MAX_HITS = 1000
SNIPPET_CHARS = 80  # on each side of the match
_CHUNK = 4 << 20
_SPACES = re.compile(r"\s+")


def search(index: RunIndex, words: str) -> Iterator[bytes]:
    """The hits of ``words`` in ``index``'s rollouts as NDJSON lines, then the ``done`` line."""
    needle = words.strip().lower()
    with index.lock:  # what the index holds now: rollouts appended meanwhile are not searched
        starts, sizes, ids = index.starts, index.sizes, index.ids
        count = len(ids)
        end = starts[-1] + sizes[-1] if count else 0
    hits = 0
    if needle and count:
        for rollout_id, text, at in _matches(index.run_dir / RESULTS, needle, starts, end, ids):
            yield _hit(rollout_id, text, at, len(needle))
            hits += 1
            if hits >= MAX_HITS:
                break
    done = {"done": True, "searched": count, "hits": hits, "capped": hits >= MAX_HITS}
    yield orjson.dumps(done) + b"\n"


def _matches(
    path: Path, needle: str, starts: Any, end: int, ids: list[str]
) -> Iterator[tuple[str, str, int]]:
    """Each rollout whose text holds ``needle`` (lower case): its id, text, where it is."""
    raw = needle.encode("utf-8")
    # JSON writes these escaped, and bytes.lower() folds ASCII only: then every line is parsed.
    quick = needle.isascii() and needle.isprintable() and not any(c in needle for c in '"\\')
    with path.open("rb") as f:
        offset = 0
        while offset < end:
            f.seek(offset)
            block = f.read(min(_CHUNK, end - offset))
            cut = block.rfind(b"\n") + 1
            if cut == 0:  # one line longer than a chunk: read it whole
                block += f.readline()
                cut = len(block)
            block = block[:cut]
            first = bisect.bisect_left(starts, offset)
            if quick:
                lowered, position = block.lower(), 0
                while (found := lowered.find(raw, position)) >= 0:
                    line = bisect.bisect_right(starts, offset + found) - 1
                    line_end = _end_of(starts, line, offset, cut)
                    hit = _check(block[starts[line] - offset : line_end], needle)
                    if hit is not None:
                        yield ids[line], *hit
                    position = line_end
            else:
                line = first
                while line < len(starts) and starts[line] < offset + cut:
                    line_end = _end_of(starts, line, offset, cut)
                    hit = _check(block[starts[line] - offset : line_end], needle)
                    if hit is not None:
                        yield ids[line], *hit
                    line += 1
            offset += cut


def _end_of(starts: Any, line: int, offset: int, cut: int) -> int:
    """Where line ``line`` ends in a block read from ``offset`` (``cut`` bytes long)."""
    return starts[line + 1] - offset if line + 1 < len(starts) else cut


def _check(raw: bytes, needle: str) -> tuple[str, int] | None:
    """A line's text and where ``needle`` is in it, when it is."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    text = haystack(doc) if isinstance(doc, dict) else ""
    at = text.lower().find(needle)
    return (text, at) if at >= 0 else None


def haystack(doc: dict[str, Any]) -> str:
    """A results line's searchable text, as the report's search box reads a rollout."""
    parts: list[str] = []
    for key in ("rollout_id", "row_id", "status", "error_category", "error_message", "label"):
        value = doc.get(key)
        if value is not None:
            parts.append(str(value))
    if doc.get("metadata") is not None:
        parts.append(orjson.dumps(doc["metadata"]).decode())
    for message in doc.get("messages") or ():
        if not isinstance(message, dict):
            continue
        parts.append(message_text(message.get("content")))
        for key in ("reasoning_content", "reasoning", "name"):
            if isinstance(message.get(key), str):
                parts.append(message[key])
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                parts += [str(function.get("name") or ""), str(function.get("arguments") or "")]
    return "\n".join(part for part in parts if part)


def _hit(rollout_id: str, text: str, at: int, length: int) -> bytes:
    """A hit's line: the id, the text around the match on one line, where the match is."""
    start = max(0, at - SNIPPET_CHARS)
    stop = min(len(text), at + length + SNIPPET_CHARS)
    lead = ("…" if start > 0 else "") + _flat(text[start:at])
    match = _flat(text[at : at + length])
    body = lead + match + _flat(text[at + length : stop]) + ("…" if stop < len(text) else "")
    return (
        orjson.dumps({"i": rollout_id, "s": body, "m": [len(lead), len(lead) + len(match)]}) + b"\n"
    )


def _flat(text: str) -> str:
    """Runs of whitespace (newlines included) as one space: a snippet is one line."""
    return _SPACES.sub(" ", text)
