"""The run directory, and the only code that writes it.

    run.toml            the resolved configuration; ``--config run.toml`` reproduces the run
    fingerprint.json    what the run was made from; a resume with other inputs is refused
    results.jsonl       one ResultLine per finished rollout, appended as it finishes
    summary.json        the Summary, rewritten at the end and on interrupt
    rollouts/<id>/      artifacts/, trajectory.json (ATIF v1.7), result.json

A rollout is finished when its line is in results.jsonl: its files are written first, so a hard
kill leaves at most rollouts whose files exist but whose line does not; they run again on resume
and overwrite those files. A torn last line is cut off on resume. Writer threads take finished
rollouts in small batches, handed over every few milliseconds, so what a hard kill can lose
beyond the rollouts running is bounded (``BATCH * (WRITE_QUEUE + 1)``) and milliseconds old.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from osmosis_run.errors import FingerprintMismatchError, RunDirError
from osmosis_run.records import ResultLine, Summary
from osmosis_run.workers import WorkerPool

__all__ = ["RunStore", "read_results", "read_summary"]

RESULTS = "results.jsonl"
_FAILED = frozenset({"failure", "timeout", "invalid"})
SUMMARY = "summary.json"
FINGERPRINT = "fingerprint.json"
RUN_CONFIG = "run.toml"
ROLLOUTS = "rollouts"
REDACTED = "[REDACTED]"


def read_results(run_dir: Path) -> Iterator[ResultLine]:
    """Yield the results of a run directory, skipping a torn or corrupt line."""
    path = run_dir / RESULTS
    if not path.exists():
        return
    with path.open("rb") as f:
        for raw in f:
            line = _parse_line(raw)
            if line is not None:
                yield line


def read_summary(run_dir: Path) -> Summary | None:
    """The run's summary.json, or None when it has none yet."""
    path = run_dir / SUMMARY
    if not path.exists():
        return None
    return Summary.model_validate_json(path.read_bytes())


def _parse_line(raw: bytes) -> ResultLine | None:
    if not raw.endswith(b"\n"):
        return None
    try:
        return ResultLine.model_validate_json(raw)
    except ValidationError:
        return None


class RunStore:
    """Open (or create) a run directory and write its files.

    Args:
        run_dir: the directory.
        secrets: strings that must never be written (an API key); replaced by ``[REDACTED]``.
    """

    def __init__(
        self, run_dir: Path, *, secrets: tuple[str, ...] = (), background: bool = False
    ) -> None:
        self.dir = run_dir
        self.rollouts_dir = run_dir / ROLLOUTS
        self._secrets = tuple(s for s in secrets if s)
        self._secret_bytes = tuple(s.encode() for s in self._secrets)
        self._background = background
        self._writer: _Writer | None = None

    @property
    def has_secrets(self) -> bool:
        """Whether anything must be redacted."""
        return bool(self._secrets)

    def is_run_dir(self) -> bool:
        """Whether the directory holds an osmosis-run run."""
        return (self.dir / FINGERPRINT).exists()

    def open(self, fingerprint: Mapping[str, Any], *, fresh: bool) -> None:
        """Create the directory, or check that it holds the same run; ``fresh`` starts over.

        Raises:
            FingerprintMismatchError: the directory holds a run with other inputs.
            RunDirError: the directory exists and is not a run directory, or cannot be written.
        """
        self._claim(fresh)
        path = self.dir / FINGERPRINT
        if path.exists():
            _compare(self.dir, json.loads(path.read_text(encoding="utf-8")), fingerprint)
        try:
            self.rollouts_dir.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                self.write_file(
                    FINGERPRINT, json.dumps(dict(fingerprint), indent=2, sort_keys=True)
                )
        except OSError as exc:
            raise RunDirError(f"cannot write run directory {self.dir}: {exc.strerror}") from None

    def _claim(self, fresh: bool) -> None:
        if not self.dir.exists():
            return
        if not self.dir.is_dir():
            raise RunDirError(f"--out {self.dir} is a file; choose a directory")
        if not self.is_run_dir() and any(self.dir.iterdir()):
            raise RunDirError(
                f"--out {self.dir} is not empty and is not an osmosis-run run directory; "
                "choose another --out"
            )
        if fresh and self.is_run_dir():
            shutil.rmtree(self.dir)

    def load_finished(
        self, *, drop_failed: bool, on_line: Callable[[ResultLine], None]
    ) -> set[str]:
        """Read the finished rollouts back, one at a time; return their ids.

        Memory holds the ids, not the results. A torn or corrupt line, a repeated id and, with
        ``drop_failed``, failed, timed-out and invalid rollouts are left out, and results.jsonl
        is rewritten without them so that they run again.
        """
        path = self.dir / RESULTS
        finished: set[str] = set()
        if not path.exists():
            return finished
        dropped = False
        with path.open("rb") as f:
            for raw in f:
                line = _parse_line(raw)
                if (
                    line is None
                    or line.rollout_id in finished
                    or (drop_failed and line.status in _FAILED)
                ):
                    dropped = True
                    continue
                finished.add(line.rollout_id)
                on_line(line)
        if dropped:
            self._rewrite_results(path, finished)
        return finished

    def _rewrite_results(self, path: Path, keep: set[str]) -> None:
        """Copy the kept lines, byte for byte, to a new results.jsonl."""
        temporary = path.with_name(f".{RESULTS}.tmp")
        seen: set[str] = set()
        with path.open("rb") as old, temporary.open("wb") as new:
            for raw in old:
                line = _parse_line(raw)
                if line is not None and line.rollout_id in keep and line.rollout_id not in seen:
                    seen.add(line.rollout_id)
                    new.write(raw)
        os.replace(temporary, path)

    def write_file(self, name: str, text: str) -> None:
        """Write a whole top-level file: to a temporary name, then renamed into place."""
        target = self.dir / name
        temporary = target.with_name(f".{name}.tmp")
        temporary.write_text(self.redact(text), encoding="utf-8")
        os.replace(temporary, target)

    def redact(self, text: str) -> str:
        """Replace every secret in ``text``."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def redact_bytes(self, data: bytes) -> bytes:
        """Replace every secret in UTF-8 ``data``."""
        for secret in self._secret_bytes:
            if secret in data:
                data = data.replace(secret, REDACTED.encode())
        return data

    def write_rollout(
        self, rollout_id: str, *, line: bytes, result: bytes, trajectory: bytes | None
    ) -> None:
        """Write one finished rollout: its files, then its results line (the commit point).

        With ``background=True`` a writer thread does it while the event loop runs other
        rollouts; at most ``BATCH * (WRITE_QUEUE + 1)`` finished rollouts wait for it (call
        ``hand_off`` every few milliseconds), and a hard kill loses those with the ones running
        (they run again on resume).
        """
        item = (
            rollout_id,
            self.redact_bytes(line),
            self.redact_bytes(result),
            self.redact_bytes(trajectory) if trajectory is not None else None,
        )
        if self._writer is None:
            self._writer = _Writer(
                self.dir / RESULTS, self.rollouts_dir, background=self._background
            )
        self._writer.put(item)

    def hand_off(self) -> None:
        """Send finished rollouts gathered for the writer thread on their way (call it often)."""
        if self._writer is not None:
            self._writer.hand_off()

    def write_summary(self, summary: Summary) -> None:
        """Write summary.json."""
        self.write_file(SUMMARY, summary.model_dump_json(indent=2) + "\n")

    def close(self) -> None:
        """Write everything queued and make results.jsonl durable.

        Raises:
            OSError: the results could not be written (a full disk, say).
        """
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.finish()


BATCH = 32
WRITE_QUEUE = 4
# File creation is slow mostly for waiting on storage, not for CPU, and on a slow disk several
# requests in flight at once go through faster: up to this many writer threads.
WRITER_THREADS = 3
_Item = tuple[str, bytes, bytes, bytes | None]
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


class _Writer:
    """The one writer of rollout files and results.jsonl (STYLE: one writer per file).

    In the foreground it writes each rollout as it is handed over. In the background worker
    threads write, and rollouts travel to them in batches (``BATCH`` of them, or whatever
    ``hand_off`` finds); at most ``WRITE_QUEUE`` batches wait, which bounds both memory and what
    a hard kill can lose. The pool grows past one thread only while batches pile up (a slow
    disk), since on a fast one extra threads only contend for the interpreter lock.
    """

    def __init__(self, results: Path, rollouts: Path, *, background: bool) -> None:
        self._rollouts = rollouts
        self._out = results.open("ab")
        self._lines = threading.Lock()
        self._batch: list[_Item] = []
        self._pending: deque[Future[None]] = deque()
        self._pool = (
            WorkerPool("osmosis-run-writer", most=WRITER_THREADS, backlog=3) if background else None
        )

    def put(self, item: _Item) -> None:
        if self._pool is None:
            self._commit(item)
            self._out.flush()
            return
        self._batch.append(item)
        if len(self._batch) >= BATCH:
            self.hand_off()

    def hand_off(self) -> None:
        """Send the rollouts gathered so far to the writer threads; raise what they raised."""
        if self._pool is not None and self._batch:
            batch, self._batch = self._batch, []
            self._pending.append(self._pool.submit(self._write_batch, batch))
        while self._pending and (self._pending[0].done() or len(self._pending) > WRITE_QUEUE):
            self._pending.popleft().result()  # waits when the writers are behind

    def finish(self) -> None:
        try:
            self.hand_off()
            if self._pool is not None:
                self._pool.shutdown()
            while self._pending:
                self._pending.popleft().result()
            self._out.flush()
            os.fsync(self._out.fileno())
        finally:
            self._out.close()

    def _write_batch(self, batch: list[_Item]) -> None:
        for item in batch:
            self._write_files(item)
        lines = b"".join(line + b"\n" for _, line, _, _ in batch)
        with self._lines:  # a batch's lines reach the OS in one system call
            self._out.write(lines)
            self._out.flush()

    def _commit(self, item: _Item) -> None:
        self._write_files(item)
        self._out.write(item[1] + b"\n")

    def _write_files(self, item: _Item) -> None:
        rollout_id, _, result, trajectory = item
        where = self._rollouts / rollout_id
        try:
            _write(where / "result.json", result)
        except FileNotFoundError:  # no artifacts directory was made (an invalid row)
            where.mkdir(parents=True, exist_ok=True)
            _write(where / "result.json", result)
        if trajectory is not None:
            _write(where / "trajectory.json", trajectory)


def _write(path: Path, data: bytes) -> None:
    """Create or replace a file in three system calls (``open()`` makes six)."""
    fd = os.open(path, _CREATE, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _compare(run_dir: Path, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    new = json.loads(json.dumps(dict(new)))  # compare as JSON: tuples are lists there
    changed = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
    if changed:
        raise FingerprintMismatchError(
            f"{run_dir} holds a run made with other inputs (changed: {', '.join(changed)}); "
            "add --fresh to start it over, or choose another --out"
        )
