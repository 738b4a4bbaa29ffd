"""The run directory, and the only code that writes it.

    run.toml            the resolved configuration; ``--config run.toml`` reproduces the run
    fingerprint.json    what the run was made from; a resume with other inputs is refused
    results.jsonl       one ResultLine per finished rollout, appended (and flushed) as it finishes
    summary.json        the Summary, rewritten at the end and on interrupt
    rollouts/<id>/      artifacts/, trajectory.json (ATIF v1.7), result.json

A rollout is finished when its line is in results.jsonl: its files are written first, so a hard
kill leaves at most rollouts whose files exist but whose line does not; they run again on resume
and overwrite those files. A torn last line is cut off on resume.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from osmosis_run.errors import FingerprintMismatchError, RunDirError
from osmosis_run.records import ResultLine, Summary

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

    def __init__(self, run_dir: Path, *, secrets: tuple[str, ...] = ()) -> None:
        self.dir = run_dir
        self.rollouts_dir = run_dir / ROLLOUTS
        self._secrets = tuple(s for s in secrets if s)
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

    def rollout_dir(self, rollout_id: str) -> Path:
        """``rollouts/<rollout_id>``, created if needed."""
        path = self.rollouts_dir / rollout_id
        path.mkdir(exist_ok=True)
        return path

    def write_rollout(
        self, rollout_id: str, *, line: str, result: str, trajectory: str | None
    ) -> None:
        """Queue one finished rollout for the writer thread.

        The writer writes its files, then appends its results line (the commit point), so the
        event loop goes on running rollouts while the kernel creates files. At most
        ``WRITE_QUEUE`` finished rollouts wait there; a hard kill loses those with the ones
        running, and they run again on resume.
        """
        if self._writer is None:
            self._writer = _Writer(self.dir / RESULTS, self.rollouts_dir)
            self._writer.start()
        self._writer.put(
            (rollout_id, self.redact(line), self.redact(result), self.redact(trajectory or ""))
        )

    def write_summary(self, summary: Summary) -> None:
        """Write summary.json."""
        self.write_file(SUMMARY, summary.model_dump_json(indent=2) + "\n")

    def close(self) -> None:
        """Write everything queued and make results.jsonl durable.

        Raises:
            OSError: the writer thread could not write (a full disk, say).
        """
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.finish()


WRITE_QUEUE = 256
_Item = tuple[str, str, str, str]


class _Writer(threading.Thread):
    """The one writer of rollout files and results.jsonl (STYLE: one writer per file)."""

    def __init__(self, results: Path, rollouts: Path) -> None:
        super().__init__(name="osmosis-run-writer", daemon=True)
        self._results = results
        self._rollouts = rollouts
        self._queue: queue.Queue[_Item | None] = queue.Queue(maxsize=WRITE_QUEUE)
        self._error: BaseException | None = None

    def put(self, item: _Item) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(item)

    def finish(self) -> None:
        self._queue.put(None)
        self.join()
        if self._error is not None:
            raise self._error

    def run(self) -> None:
        try:
            with self._results.open("a", encoding="utf-8") as out:
                self._drain(out)
                out.flush()
                os.fsync(out.fileno())
        except BaseException as exc:  # handed to the event loop's thread by put()/finish()
            self._error = exc

    def _drain(self, out: IO[str]) -> None:
        while (item := self._queue.get()) is not None:
            rollout_id, line, result, trajectory = item
            where = self._rollouts / rollout_id
            try:
                _write(where / "result.json", result)
            except FileNotFoundError:  # no artifacts directory was made (an invalid row)
                where.mkdir(parents=True, exist_ok=True)
                _write(where / "result.json", result)
            if trajectory:
                _write(where / "trajectory.json", trajectory)
            out.write(line + "\n")
            if self._queue.empty():  # a burst is written with one system call
                out.flush()


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _compare(run_dir: Path, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    new = json.loads(json.dumps(dict(new)))  # compare as JSON: tuples are lists there
    changed = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
    if changed:
        raise FingerprintMismatchError(
            f"{run_dir} holds a run made with other inputs (changed: {', '.join(changed)}); "
            "add --fresh to start it over, or choose another --out"
        )
