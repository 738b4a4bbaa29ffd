"""``-v/--verbose``: log records (osmosis-run's and the user's workflows') on stderr.

The library never configures logging; the command line does, only when asked. Without
``-v``, Python's own last-resort handler still shows a workflow's warnings and errors.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

# -v: INFO and above; -vv (or more): DEBUG too.
_LEVELS = {0: logging.WARNING, 1: logging.INFO}
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"


def level_of(verbose: int) -> int:
    """The logging level that ``verbose`` (the count of -v) asks for."""
    return _LEVELS.get(verbose, logging.DEBUG)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each record to stderr as it is at that moment: above a live progress bar while
    one is drawn (through rich's proxy of stderr), else to the CLI's stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        from osmosis_run.cli.streams import stderr

        current = sys.stderr
        self.stream = current if hasattr(current, "rich_proxied_file") else stderr
        super().emit(record)


@contextlib.contextmanager
def to_stderr(verbose: int) -> Iterator[None]:
    """With ``verbose`` >= 1, send every logger's records at its level to stderr, then undo.

    One handler on the root logger, writing to the CLI's stderr (which goes quiet, rather than
    failing, once stderr is gone, and prints above a live progress bar).
    """
    if verbose <= 0:
        yield
        return
    root = logging.getLogger()
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    before = root.level
    root.addHandler(handler)
    root.setLevel(level_of(verbose))
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(before)
