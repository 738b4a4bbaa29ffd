"""The only code that writes the run directory (its files: ``layout.py``).

A rollout is finished when its line is in results.jsonl: its files are written first, so a hard
kill leaves at most rollouts whose files exist but whose line does not; they run again on resume
and overwrite those files. A torn last line is cut off on resume. Large runs hand finished
rollouts to a writer process (``writer.py``) in small batches (``BATCH`` rollouts or
``BATCH_BYTES``), every few milliseconds; it finishes what it was sent even if the runner is
killed, so a crash loses only the rollouts running and those finished in the last few
milliseconds (or not yet in its pipe: ``pending``). When the disk is slower than the rollouts,
``room`` has new rollouts wait, rather than the event loop (``writer.py``). The store drives
the writer process, or a writer in this process, through one protocol (``Writer``), never
asking which it has. A lock on the directory keeps two runners (or a resume and the writer
process of a killed run) from writing it at once; it is taken before anything in the directory
changes (``--fresh`` included).

Everything written goes through one ``Redactor`` (``redact.py``): no secret reaches a file.
What fails on the machine before a run (opening the directory, its lock, run.toml) is a
``RunDirError``; what fails under a run (a full disk, a lost writer process) is an
``InfrastructureError`` naming the errno and the path: what finished before it is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from osmosis_run._redact import Redactor, register
from osmosis_run.errors import FingerprintMismatchError, InfrastructureError, RunDirError
from osmosis_run.results.outcome import is_error
from osmosis_run.results.records import ResultLine, Summary
from osmosis_run.store.layout import FINGERPRINT, RESULTS, ROLLOUTS, SUMMARY
from osmosis_run.store.writer import (
    Item,
    Writer,
    WriterLost,
    keep_from_forks,
    release_fd,
    start_writer,
)

__all__ = ["RunStore", "infrastructure_error", "parse_line", "read_results", "read_summary"]


# What an errno means for a run, in the words of its one-line message.
_PROBLEMS = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EIO: "I/O error",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EMFILE: "too many open files",
    errno.ENFILE: "too many open files",
    errno.ENOMEM: "out of memory",
    errno.EFBIG: "file too large",
    errno.ENOENT: "missing file or folder",
}


def infrastructure_error(
    exc: OSError, *, doing: str = "writing", path: Path | str | None = None
) -> InfrastructureError:
    """The one-line error for a machine failure under a run (raise it ``from exc``).

    For example ``disk full writing runs/x/results.jsonl: No space left on device``. ``path``
    names the file when ``exc`` names none.
    """
    if isinstance(exc, WriterLost):
        run_dir = exc.results.parent
        return InfrastructureError(f"the writer process of {run_dir} was lost ({_ended(exc)})")
    problem = _PROBLEMS.get(exc.errno or 0, "file system error")
    where = exc.filename if exc.filename is not None else path
    target = f" {os.fsdecode(where)}" if where is not None else ""
    return InfrastructureError(f"{problem} {doing}{target}: {exc.strerror or exc}")


def _ended(lost: WriterLost) -> str:
    code = lost.returncode
    if code is None:
        return "it stopped answering"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def read_results(run_dir: Path) -> Iterator[ResultLine]:
    """Yield the results of a run directory, skipping a torn or corrupt line."""
    path = run_dir / RESULTS
    if not path.exists():
        return
    with path.open("rb") as f:
        for raw in f:
            line = parse_line(raw)
            if line is not None:
                yield line


def read_summary(run_dir: Path) -> Summary | None:
    """The run's summary.json, or None when it has none yet."""
    path = run_dir / SUMMARY
    if not path.exists():
        return None
    return Summary.model_validate_json(path.read_bytes())


def parse_line(raw: bytes) -> ResultLine | None:
    """One results line (with its newline); None when it is torn or not a valid result."""
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
        secrets: strings that must never be written (an API key); replaced by ``[REDACTED]``
            in every file and, from now on, in osmosis-run's log records (see ``redact.py``).
        background: write the rollouts through a writer process, if one can start.
        writer: write the rollouts through this one instead of starting one (a test's
            ``MemoryWriter``); ``background`` is then unused.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        secrets: tuple[str, ...] = (),
        background: bool = False,
        writer: Writer | None = None,
    ) -> None:
        self.dir = run_dir
        self.rollouts_dir = run_dir / ROLLOUTS
        self.redactor: Redactor = register(secrets)
        self.background = background
        self._given = writer
        self._writer: Writer | None = None
        self._hand_at = BATCH  # rollouts gathered before a hand-off: 1 for a writer in this process
        self._started = False  # the run is under way: failures are infrastructure errors
        self._batch: list[Item] = []
        self._batch_bytes = 0
        self._room: asyncio.Event | None = None  # set when the writer is no longer behind
        self._lock: int | None = None

    @property
    def has_secrets(self) -> bool:
        """Whether anything must be redacted."""
        return bool(self.redactor)

    def is_run_dir(self) -> bool:
        """Whether the directory holds an osmosis-run run."""
        return (self.dir / FINGERPRINT).exists()

    def open(self, fingerprint: Mapping[str, Any], *, fresh: bool) -> None:
        """Create the directory, or check that it holds the same run; ``fresh`` starts over.

        The directory is locked first: one that another osmosis-run is writing is refused
        with nothing in it changed, ``--fresh`` or not.

        Raises:
            FingerprintMismatchError: the directory holds a run with other inputs.
            RunDirError: the directory exists and is not a run directory, is being written by
                another osmosis-run, or cannot be written.
        """
        self._check_claim()
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._lock = _lock(self.dir)
        except OSError as exc:
            raise RunDirError(f"cannot write run directory {self.dir}: {exc.strerror}") from None
        try:
            self._take(fingerprint, fresh=fresh)
        except BaseException:
            self._unlock()
            raise

    def _check_claim(self) -> None:
        if not self.dir.exists():
            return
        if not self.dir.is_dir():
            raise RunDirError(f"--out {self.dir} is a file; choose a directory")
        if not self.is_run_dir() and any(self.dir.iterdir()):
            raise RunDirError(
                f"--out {self.dir} is not empty and is not an osmosis-run run directory; "
                "choose another --out"
            )

    def _take(self, fingerprint: Mapping[str, Any], *, fresh: bool) -> None:
        """With the lock held: start over if asked, check the fingerprint, lay the run out."""
        path = self.dir / FINGERPRINT
        try:
            if fresh and self.is_run_dir():
                _empty(self.dir)  # the directory itself stays: the lock is on it
            if path.exists():
                _compare(self.dir, json.loads(path.read_text(encoding="utf-8")), fingerprint)
            self.rollouts_dir.mkdir(exist_ok=True)
            if not path.exists():
                self._write_whole(
                    FINGERPRINT, json.dumps(dict(fingerprint), indent=2, sort_keys=True)
                )
        except OSError as exc:
            raise RunDirError(f"cannot write run directory {self.dir}: {exc.strerror}") from None

    def load_finished(
        self, *, drop_failed: bool, on_line: Callable[[ResultLine, bytes], None]
    ) -> set[str]:
        """Read the finished rollouts back, one at a time; return their ids.

        ``on_line`` gets each kept result and its line (without the newline). Memory holds the
        ids, not the results. A torn or corrupt line, a repeated id and, with ``drop_failed``,
        failed, timed-out and invalid rollouts are left out, and results.jsonl is rewritten
        without them so that they run again.
        """
        path = self.dir / RESULTS
        finished: set[str] = set()
        if not path.exists():
            return finished
        dropped = False
        with path.open("rb") as f:
            for raw in f:
                line = parse_line(raw)
                if (
                    line is None
                    or line.rollout_id in finished
                    or (drop_failed and is_error(line.status))
                ):
                    dropped = True
                    continue
                finished.add(line.rollout_id)
                on_line(line, raw[:-1])
        if dropped:
            self._rewrite_results(path, finished)
        return finished

    @property
    def pending(self) -> int:
        """Rollouts given to ``write_rollout`` and not yet handed to the writer.

        A batch is handed over once all of it is in the writer process's pipe: a runner killed
        before loses it (a ``--jsonl`` line is printed only for rollouts handed over).
        """
        unsent = self._writer.unsent if self._writer is not None else 0
        return len(self._batch) + unsent

    def _rewrite_results(self, path: Path, keep: set[str]) -> None:
        """Copy the kept lines, byte for byte, to a new results.jsonl."""
        temporary = path.with_name(f".{RESULTS}.tmp")
        seen: set[str] = set()
        try:
            with path.open("rb") as old, temporary.open("wb") as new:
                for raw in old:
                    line = parse_line(raw)
                    if line is not None and line.rollout_id in keep and line.rollout_id not in seen:
                        seen.add(line.rollout_id)
                        new.write(raw)
            os.replace(temporary, path)
        except OSError as exc:
            _discard(temporary)
            raise RunDirError(f"cannot rewrite {path}: {exc.strerror or exc}") from None

    def write_file(self, name: str, text: str) -> None:
        """Write a whole top-level file: to a temporary name, then renamed into place.

        A file that already holds exactly ``text`` is left alone (a resume with nothing to do
        rewrites nothing). A JSON file (``.json``) is redacted inside its strings, so that it
        stays valid JSON.

        Raises:
            RunDirError: before the run starts (``start_writer``), the file cannot be written.
            InfrastructureError: under the run, the file cannot be written (a full disk).
        """
        try:
            self._write_whole(name, text)
        except OSError as exc:
            if not self._started:
                raise RunDirError(
                    f"cannot write {self.dir / name}: {exc.strerror or exc}"
                ) from None
            raise infrastructure_error(exc, path=self.dir / name) from exc

    def _write_whole(self, name: str, text: str) -> None:
        target = self.dir / name
        data = text.encode("utf-8")
        if name.endswith(".json"):
            data = self.redactor.json_bytes(data)
        else:
            data = self.redactor.text_bytes(data)
        try:
            if target.read_bytes() == data:
                return
        except OSError:
            pass  # not there yet (or unreadable): write it
        temporary = target.with_name(f".{name}.tmp")
        try:
            temporary.write_bytes(data)
            os.replace(temporary, target)
        except OSError as exc:
            _discard(temporary)  # a full disk must not keep a torn copy
            raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from None

    def redact(self, text: str) -> str:
        """Replace every secret in ``text`` (see ``redactor``)."""
        return self.redactor.text(text)

    def redact_bytes(self, data: bytes) -> bytes:
        """Replace every secret in UTF-8 ``data`` (for JSON, ``redactor.json_bytes``)."""
        return self.redactor.text_bytes(data)

    def start_writer(self) -> int | None:
        """Start writing rollouts (in a writer process when ``background``).

        From here on, a failure to write is an ``InfrastructureError``.

        Returns:
            A file descriptor that becomes readable when the writer process answers (call
            ``poll`` then), or None when rollouts are written in this process.

        Raises:
            InfrastructureError: results.jsonl cannot be opened.
        """
        self._started = True
        if self._writer is None:
            self._writer = self._start()
            # A writer in this process gains nothing by waiting: each rollout goes at once.
            self._hand_at = BATCH if self._writer.in_background else 1
        return self._writer.reply_fd

    def _start(self) -> Writer:
        given, self._given = self._given, None
        if given is not None:
            return given
        try:
            return start_writer(
                self.dir / RESULTS,
                self.rollouts_dir,
                background=self.background,
                queue=WRITE_QUEUE * BATCH,
                queue_bytes=WRITE_QUEUE_BYTES,
                keep_open=() if self._lock is None else (self._lock,),
            )
        except OSError as exc:
            raise infrastructure_error(exc, doing="opening", path=self.dir / RESULTS) from exc

    @property
    def writer_process(self) -> bool:
        """Whether a writer process writes the rollouts (and can make their directories)."""
        return self._writer is not None and self._writer.in_background

    def make_dirs(self, rollout_ids: list[str]) -> Future[list[str]] | None:
        """Have the writer process make the rollouts' artifacts directories, if there is one.

        The future resolves, in ``poll``, to the ids whose directory could not be made.
        """
        return self._writer.make_dirs(rollout_ids) if self._writer is not None else None

    def poll(self) -> None:
        """Take the writer process's answers (never blocks)."""
        if self._writer is not None:
            self._writer.poll()
            self._check_room()

    async def room(self) -> None:
        """Wait while the writer process is behind; return at once when it is not.

        A driver awaits it before running a rollout: when rollouts finish faster than the disk
        takes their files, new ones wait here while those running go on, and the event loop is
        never held (``hand_off`` would wait for the writer on it, at ``WRITE_QUEUE`` batches).
        The wait ends on the writer's answers (``poll``), a hand-off or ``close``.
        """
        while self._writer is not None and self._writer.behind:
            if self._room is None:
                self._room = asyncio.Event()
            await self._room.wait()

    def _check_room(self) -> None:
        """Wake the rollouts waiting in ``room`` once the writer is no longer behind."""
        if self._room is not None and (self._writer is None or not self._writer.behind):
            self._room.set()
            self._room = None

    def failure(self) -> InfrastructureError | None:
        """The error the writer met, once known (the next write raises it), or None."""
        error = self._writer.error if self._writer is not None else None
        return self._failure(error) if error is not None else None

    def write_rollout(
        self, rollout_id: str, *, line: bytes, result: bytes, trajectory: bytes | None
    ) -> None:
        """Write one finished rollout: its files, then its results line (the commit point).

        A writer process gets rollouts in batches of ``BATCH`` or ``BATCH_BYTES`` (or
        whatever ``hand_off`` finds; call it every few milliseconds), and ``WRITE_QUEUE``
        batches (``WRITE_QUEUE_BYTES``) at most wait for it. A killed runner loses only the
        rollouts not handed over yet (``pending``): they run again on resume.

        Raises:
            InfrastructureError: the writer could not write this or an earlier batch.
        """
        item: Item = (rollout_id, line, result, trajectory)
        if self.redactor:
            redact = self.redactor.json_bytes
            item = (
                rollout_id,
                redact(line),
                redact(result),
                redact(trajectory) if trajectory is not None else None,
            )
        if self._writer is None:
            self.start_writer()
        self._batch.append(item)
        self._batch_bytes += len(item[1]) + len(item[2]) + len(item[3] or b"")
        if len(self._batch) >= self._hand_at or self._batch_bytes >= BATCH_BYTES:
            self.hand_off()

    def hand_off(self) -> None:
        """Send the rollouts gathered so far to the writer (call it often).

        Raises:
            InfrastructureError: the writer could not write an earlier batch, or was lost.
        """
        try:
            if self._writer is not None and self._batch:
                batch, self._batch, self._batch_bytes = self._batch, [], 0
                self._writer.write(batch)
        except OSError as exc:
            raise self._failure(exc) from exc
        finally:
            self._check_room()  # a wait in ``write`` may have taken the answers

    def _failure(self, exc: OSError) -> InfrastructureError:
        # Every write names its file but the append to results.jsonl (and its fsync).
        return infrastructure_error(exc, path=self.dir / RESULTS)

    def write_summary(self, summary: Summary) -> None:
        """Write summary.json.

        Raises:
            InfrastructureError: it cannot be written (under a run; a RunDirError before).
        """
        self.write_file(SUMMARY, summary.model_dump_json(indent=2) + "\n")

    def close(self, summary: Summary | Callable[[bool], Summary] | None = None) -> None:
        """Write everything handed over and make it durable, then ``summary``; release the run.

        summary.json is written only once every result it counts is in results.jsonl. A
        callable ``summary`` is called once the writer is done, with whether everything handed
        over reached the disk, and its summary is written even when something did not (it
        counts what did), still under the run's lock.

        Raises:
            InfrastructureError: the results or the summary could not be written (a full
                disk, a lost writer process); the run is released all the same.
        """
        writer, self._writer = self._writer, None
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        self._check_room()  # nothing to wait for any more
        error: InfrastructureError | None = None
        try:
            if writer is not None:
                try:
                    self._finish(writer, batch)
                except InfrastructureError as exc:
                    error = exc
            final = summary(error is None) if callable(summary) else summary
            if final is not None and (error is None or callable(summary)):
                try:
                    self.write_summary(final)
                except InfrastructureError as exc:
                    error = error or exc
        finally:
            self._unlock()
        if error is not None:
            raise error

    def _finish(self, writer: Writer, batch: list[Item]) -> None:
        try:
            try:
                if batch:
                    writer.write(batch)
            except BaseException:
                writer.abandon()
                raise
            writer.finish()
        except OSError as exc:
            raise self._failure(exc) from exc

    def _unlock(self) -> None:
        if self._lock is not None:
            release_fd(self._lock)
            self._lock = None

    def current_summary(self) -> Summary | None:
        """summary.json, if results.jsonl has not changed since it was written."""
        try:
            results = (self.dir / RESULTS).stat().st_mtime_ns
            written = (self.dir / SUMMARY).stat().st_mtime_ns
            if results > written:
                return None
            return read_summary(self.dir)
        except (OSError, ValueError):  # gone, unreadable, or not a summary (ValidationError)
            return None


BATCH = 32
# A batch is handed over at this size too: long transcripts go in several frames, so that the
# writer process starts on them at once and a power loss takes fewer.
BATCH_BYTES = 4 << 20
# ``hand_off`` waits (holding the loop) beyond WRITE_QUEUE batches of rollouts, or
# WRITE_QUEUE_BYTES, unanswered; well before either, rollouts wait in ``room`` instead, which
# does not hold it.
WRITE_QUEUE = 4
WRITE_QUEUE_BYTES = 128 << 20
LOCK_WAIT_S = 10.0


def _lock(run_dir: Path) -> int | None:
    """Lock the run directory (``flock``): one osmosis-run writes a run at a time.

    A writer process left behind by a killed run holds it until it has written what it was
    sent (milliseconds), so a resume started at once waits for it rather than racing it.

    Raises:
        RunDirError: another osmosis-run holds it for longer than ``LOCK_WAIT_S``.
    """
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no lock
        return None
    fd = os.open(run_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # A workflow's os.fork() child must not hold the lock (a flock belongs to the
            # open file, which the child shares) once this process lets it go.
            return keep_from_forks(fd)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise RunDirError(
                    f"{run_dir} is being written by another osmosis-run; wait for it to finish "
                    "or choose another --out"
                ) from None
            time.sleep(0.05)
        except OSError:  # a file system without locks (some network mounts): run unlocked
            os.close(fd)
            return None


def _discard(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


def _empty(run_dir: Path) -> None:
    """Delete everything in ``run_dir``, keeping the directory (and the lock on it)."""
    for entry in run_dir.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _compare(run_dir: Path, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    new = json.loads(json.dumps(dict(new)))  # compare as JSON: tuples are lists there
    changed = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
    if changed:
        raise FingerprintMismatchError(
            f"{run_dir} holds a run made with other inputs (changed: {', '.join(changed)}); "
            "add --fresh to start it over, or choose another --out"
        )
