"""Writing a report file whole: to a temporary name beside it, then renamed into place."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from osmosis_run.errors import ConfigError

__all__ = ["write_whole"]


def write_whole(path: Path, write: Callable[[Path], object], *, what: str = "") -> None:
    """Have ``write`` fill a temporary file beside ``path``, then rename it into place.

    The folder is made if it is missing. A failure leaves no temporary file behind.

    Raises:
        ConfigError: the file cannot be written (``cannot write <what><path>: <reason>; ...``).
    """
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(temporary)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise ConfigError(
            f"cannot write {what}{path}: {exc.strerror or exc}; choose another path"
        ) from None
