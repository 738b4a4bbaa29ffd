"""The model cache: upstream responses in SQLite, keyed by a canonical hash of the request.

The key is the SHA-256 of the request body as JSON with sorted keys (model after ``--model``,
messages, tools, sampling parameters, ``stream``: everything the client sent except
``stream_options``; the API key is a header and never part of it), plus the rollout's sample
index and how many identical requests the rollout made before this one. So ``-n 4`` with
``temperature > 0`` caches four samples per row and replays each sample's own; a workflow that
asks the same thing twice gets its first and second answers back in order. Only complete,
successful responses are stored: a 200 whose body is a JSON object without an ``error``, or a
200 stream's server-sent events as they came, when it ended with ``data: [DONE]`` and carried no
error event. A body cut short, a stream cut or ended early, an answer that says it failed is
never stored: a replay would serve it as a success.

Modes: ``read-write`` (hits are served, misses go upstream and are stored), ``read-only``
(misses are errors: the run works offline), ``refresh`` (never read, always stored).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Literal

from osmosis_run.errors import ConfigError

__all__ = ["CacheMode", "ModelCache", "cache_key", "request_digest"]

CacheMode = Literal["read-write", "read-only", "refresh"]
_LEFT_OUT = frozenset({"stream_options"})
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    body BLOB NOT NULL,
    stored_at REAL NOT NULL
)
"""


def request_digest(body: dict[str, Any]) -> str:
    """The canonical hash of a request body (everything but ``stream_options``)."""
    canonical = {k: v for k, v in body.items() if k not in _LEFT_OUT}
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def cache_key(digest: str, *, sample_index: int, occurrence: int) -> str:
    """The cache key of a request (its digest) for one sample's ``occurrence``-th asking."""
    return hashlib.sha256(f"{digest}:{sample_index}:{occurrence}".encode()).hexdigest()


class ModelCache:
    """A SQLite file of responses (standard library only; one connection, one thread).

    Raises:
        ConfigError: the file cannot be opened, is not a cache, or is missing in read-only mode.
    """

    def __init__(self, path: Path, mode: CacheMode) -> None:
        self.path = path
        self.mode = mode
        self.hits = 0
        self.misses = 0
        self.stored = 0
        if mode == "read-only" and not path.is_file():
            raise ConfigError(
                f"--model-cache {path}: no such file (read-only mode replays a cache a run "
                "filled; fill it with --model-cache-mode read-write)"
            )
        try:
            if mode != "read-only":
                path.parent.mkdir(parents=True, exist_ok=True)
            uri = f"{path.absolute().as_uri()}?mode={'ro' if mode == 'read-only' else 'rwc'}"
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            if mode != "read-only":
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute(_SCHEMA)
            self._db.execute("SELECT count(*) FROM responses").fetchone()
        except (sqlite3.Error, OSError) as exc:
            raise ConfigError(
                f"--model-cache {path}: cannot use it as a model cache ({exc}); choose another file"
            ) from None

    @property
    def reads(self) -> bool:
        """Whether hits are served (not in refresh mode)."""
        return self.mode != "refresh"

    @property
    def writes(self) -> bool:
        """Whether responses are stored (not in read-only mode)."""
        return self.mode != "read-only"

    def get(self, key: str) -> tuple[str, bytes] | None:
        """The stored ``(kind, body)`` of a key (kind ``json`` or ``sse``), or None."""
        row = self._db.execute("SELECT kind, body FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return str(row[0]), bytes(row[1])

    def put(self, key: str, kind: str, body: bytes) -> None:
        """Store a response (replacing what the key held)."""
        self._db.execute(
            "INSERT OR REPLACE INTO responses (key, kind, body, stored_at) VALUES (?, ?, ?, ?)",
            (key, kind, body, time.time()),
        )
        self.stored += 1

    def close(self) -> None:
        """Close the file."""
        self._db.close()
