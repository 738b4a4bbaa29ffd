"""The record of every model call: one JSON line per call in ``rollouts/<id>/model_calls.jsonl``.

A line holds the call's number in its rollout, when it started and how long it took, the
status the workflow got, how many upstream attempts it took (and each earlier attempt's status
and error), whether it came from the cache, the request and response bodies, and its usage.
Bodies over ``max_body_bytes`` are cut, with a marker saying how long they were; a body JSON
cannot hold as it is (an upstream's answer with a lone surrogate, or nested past the encoder's
limit) is kept as its escaped text (``{"unencodable": true, ...}``). Every secret
(the provider key, the run's key) is redacted. The gateway is this file's only writer; a
rollout's first call in an invocation starts the file over, so a re-run rollout (``--retry-
failed``) keeps only its own calls.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, BinaryIO

from osmosis_run._json import encode
from osmosis_run._redact import Redactor
from osmosis_run.store.layout import MODEL_CALLS, rollout_dir

__all__ = ["MAX_BODY_BYTES", "CallRecorder", "capped", "stream_summary"]

MAX_BODY_BYTES = 64 * 1024


def capped(data: bytes, limit: int) -> Any:
    """A body as it is recorded: its JSON, or its text; past ``limit`` bytes, cut with a marker."""
    if len(data) > limit:
        head = data[:limit].decode("utf-8", "replace")
        return {"truncated": True, "bytes": len(data), "head": head}
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


def _as_text(value: Any, limit: int) -> dict[str, Any]:
    try:
        text = json.dumps(value)  # ASCII: a lone surrogate is escaped
    except (RecursionError, ValueError):
        text = "(too deeply nested to write)"
    return {"unencodable": True, "bytes": len(text), "head": text[:limit]}


def stream_summary(content: list[str], state: dict[str, Any]) -> dict[str, Any]:
    """What a stream said, put together as one completion (for the record, not the client)."""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
    if state.get("tool_calls"):
        message["tool_calls"] = list(state["tool_calls"].values())
    return {
        "object": "chat.completion",
        "streamed": True,
        "chunks": state.get("chunks", 0),
        "model": state.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": state.get("finish")}],
        "usage": state.get("usage"),
    }


class CallRecorder:
    """Appends call records beside their rollouts (a no-op when recording is off).

    The files of the last ``OPEN_FILES`` rollouts stay open (unbuffered: each record is one
    ``write``, in the file as soon as it returns); opening and closing a file for every call
    was a third of the gateway's own work per call.
    """

    OPEN_FILES = 256

    def __init__(
        self,
        run_dir: Path,
        redactor: Redactor,
        *,
        enabled: bool = True,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.run_dir = run_dir
        self.redactor = redactor
        self.enabled = enabled
        self.max_body_bytes = max_body_bytes
        self.failures = 0
        self._open: OrderedDict[str, BinaryIO] = OrderedDict()

    def write(self, rollout_id: str | None, record: dict[str, Any], *, fresh: bool) -> None:
        """Append one call's record (``fresh``: start the rollout's file over first).

        A call outside any rollout (no rollout id in its URL) is not recorded. A file that
        cannot be written costs the record, never the call.
        """
        if not self.enabled or not rollout_id:
            return
        try:
            data = encode(record) + b"\n"
        except ValueError:  # a body JSON cannot hold as it is: kept as text
            data = encode(self._writable(record)) + b"\n"
        if self.redactor:
            data = self.redactor.text_bytes(data)
        try:
            self._file(rollout_id, fresh=fresh).write(data)
        except OSError:
            self.failures += 1
            self._forget(rollout_id)

    def _writable(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` with each value ``encode`` refuses replaced by its escaped text."""
        writable = {}
        for key, value in record.items():
            try:
                encode(value)
            except ValueError:
                value = _as_text(value, self.max_body_bytes)
            writable[key] = value
        return writable

    def _file(self, rollout_id: str, *, fresh: bool) -> BinaryIO:
        file = self._open.get(rollout_id)
        if file is not None and not fresh:
            self._open.move_to_end(rollout_id)
            return file
        self._forget(rollout_id)
        where = rollout_dir(self.run_dir, rollout_id)
        if fresh:
            where.mkdir(parents=True, exist_ok=True)
        file = open(where / MODEL_CALLS, "wb" if fresh else "ab", buffering=0)  # noqa: SIM115
        self._open[rollout_id] = file
        while len(self._open) > self.OPEN_FILES:
            _, oldest = self._open.popitem(last=False)
            oldest.close()
        return file

    def _forget(self, rollout_id: str) -> None:
        file = self._open.pop(rollout_id, None)
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()

    def close(self) -> None:
        """Close the files kept open."""
        while self._open:
            _, file = self._open.popitem()
            with contextlib.suppress(OSError):
                file.close()
