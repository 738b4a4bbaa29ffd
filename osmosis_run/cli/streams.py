"""The process's standard streams: stdout for a command's product, stderr for people.

stdout carries what a command makes: ``--jsonl`` results lines, ``--json`` documents, and the
text of the commands whose product is text (report, compare, show, validate's findings, through
``product()``), so that ``> file``, ``| less`` and ``| grep`` work. stderr is the human channel
for progress, notices and errors (``err``, a rich Console made on first use): losing it
(closed, or its reader gone, as with ``2>&1 | head -1``) silences what the CLI says and never
fails the run.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any, BinaryIO, cast

if TYPE_CHECKING:
    from rich.console import Console


class _Stderr(io.TextIOBase):
    """``sys.stderr`` as it is at each write; once writing to it fails, nothing.

    The first failure points file descriptor 2 at /dev/null, so that later writes (user code's,
    logging's, the interpreter's at exit) cannot fail either. No stderr at all (started with
    it closed): nothing.
    """

    def write(self, text: str) -> int:
        stream = _current_stderr()
        try:
            if stream is not None:
                stream.write(text)
        except (OSError, ValueError):  # ValueError: the stream object itself was closed
            _lose_stderr()
        return len(text)

    def flush(self) -> None:
        stream = _current_stderr()
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            _lose_stderr()

    def isatty(self) -> bool:
        stream = _current_stderr()
        try:
            return stream is not None and stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        stream = _current_stderr()
        if stream is None:
            raise io.UnsupportedOperation("no stderr")
        return stream.fileno()


def _current_stderr() -> IO[str] | None:
    """sys.stderr, or what it stands for while a live display redirects it (as rich does)."""
    stream = sys.stderr
    return cast("IO[str] | None", getattr(stream, "rich_proxied_file", stream))


def _lose_stderr() -> None:
    """stderr is gone: point it (and stdout, when that is the same pipe) at /dev/null."""
    stream = _current_stderr()
    try:
        if stream is None or stream.fileno() != 2:
            return  # not the process's stderr (a test's capture): only drop the output
    except (OSError, ValueError):
        return
    shared = _same_file(1, 2)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(devnull, 2)
        if shared:
            os.dup2(devnull, 1)
    except OSError:
        pass  # no descriptors to point (not a real process's streams)
    finally:
        os.close(devnull)


def _same_file(a: int, b: int) -> bool:
    try:
        return os.path.samestat(os.fstat(a), os.fstat(b))
    except OSError:
        return False


class _Human:
    """The people's channel: rich's Console on ``stderr``, made (and rich loaded) on first use.

    Commands that print nothing, and ``--help``, never import rich.
    """

    def __init__(self, file: _Stderr) -> None:
        self.file = file
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        """The rich Console on stderr."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(
                file=cast("IO[str]", self.file), highlight=False, soft_wrap=True
            )
        return self._console

    def print(self, *objects: Any, markup: bool | None = None, emoji: bool | None = None) -> None:
        """``Console.print(*objects, markup=..., emoji=...)`` on stderr."""
        self.console.print(*objects, markup=markup, emoji=emoji)


stderr = _Stderr()
err = _Human(stderr)


@contextlib.contextmanager
def product() -> Iterator[Console]:
    """A rich Console on stdout for a command's text; a reader that went away (``| head``) ends
    the text quietly: the rest is dropped, and the command's exit code stands."""
    from rich.console import Console

    class Product(Console):
        def on_broken_pipe(self) -> None:
            """Not rich's own (exit 1 at once): raise, for ``product`` to end quietly."""
            self.quiet = True
            raise BrokenPipeError

    console = Product(file=sys.stdout, highlight=False, soft_wrap=True)
    try:
        yield console
        sys.stdout.flush()
    except BrokenPipeError:
        silence(sys.stdout)


def silence(out: IO[Any]) -> None:
    """Point a results stream at /dev/null, so that flushing it at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # not a real file (a test's capture)
        pass


@contextlib.contextmanager
def results_channel(*, jsonl: bool) -> Iterator[BinaryIO | None]:
    """Where --jsonl lines go; with --jsonl, stdout is osmosis-run's alone while it runs.

    Everything else written to stdout (a workflow's print, a subprocess it starts) goes to
    stderr: file descriptor 1 points there, and results go to a private copy of the real
    stdout (close-on-exec, so no subprocess gets it). Under a test runner's captured streams
    (no descriptors) only ``sys.stdout`` is swapped. Without --jsonl: None, stdout untouched.
    """
    if not jsonl:
        yield None
        return
    if sys.stdout is None:  # started with stdout closed: the lines have nowhere to go
        with open(os.devnull, "wb") as nowhere:
            yield nowhere
        return
    sys.stdout.flush()
    try:
        real = sys.stdout.fileno() == 1
    except (OSError, ValueError):  # a test's capture: no descriptor
        real = False
    if not real:
        saved = sys.stdout
        sys.stdout = sys.stderr
        try:
            yield saved.buffer
        finally:
            sys.stdout = saved
        return
    results = os.fdopen(os.dup(1), "wb")  # os.dup: not inherited by subprocesses
    _point_stdout_at_stderr()
    try:
        yield results
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()  # what user code printed, to stderr still
        with contextlib.suppress(OSError):
            results.flush()
        os.dup2(results.fileno(), 1)
        with contextlib.suppress(OSError):
            results.close()


def _point_stdout_at_stderr() -> None:
    try:
        os.dup2(2, 1)
    except OSError:  # no stderr at all: user output goes nowhere rather than into results
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
