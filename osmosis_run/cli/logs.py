"""``-v/--verbose``: log records (osmosis-run's and the user's workflows') on stderr.

The library never configures logging; the command line does, only when asked. Without
``-v``, Python's own last-resort handler still shows a workflow's warnings and errors.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

# -v: INFO and above; -vv (or more): DEBUG too.
_LEVELS = {0: logging.WARNING, 1: logging.INFO}
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"


def level_of(verbose: int) -> int:
    """The logging level that ``verbose`` (the count of -v) asks for."""
    return _LEVELS.get(verbose, logging.DEBUG)


@contextlib.contextmanager
def to_stderr(verbose: int) -> Iterator[None]:
    """With ``verbose`` >= 1, send every logger's records at its level to stderr, then undo.

    One handler on the root logger, writing to the CLI's stderr (which goes quiet, rather than
    failing, once stderr is gone, and prints above a live progress bar).
    """
    if verbose <= 0:
        yield
        return
    from osmosis_run.cli.render import stderr

    root = logging.getLogger()
    handler = logging.StreamHandler(stderr)
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    before = root.level
    root.addHandler(handler)
    root.setLevel(level_of(verbose))
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(before)
