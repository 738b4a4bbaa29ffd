"""Keeping secrets (the API key) out of everything osmosis-run writes: files, lines and logs.

A secret is replaced by ``[REDACTED]`` in its plain form and in the forms JSON gives it (``"``
and ``\\`` escaped; non-ASCII text escaped or not), so that a key quoted inside a result, a
transcript or a traceback is caught too. A secret shorter than ``MIN_SECRET_LENGTH`` cannot be
told apart from ordinary text (a key ``ok`` would blank every "ok" in every transcript): it is
used, but not redacted, and the CLI says so.

JSON is redacted inside its strings, so that what is written stays valid JSON whatever the
secret holds. osmosis-run's own log records are redacted before any handler sees them: the
library's loggers come from ``logger()``, which filters them with every secret a run registered.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from osmosis_run._json import encode

__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "Redactor", "logger", "register"]

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8


class Redactor:
    """Replace secrets of at least ``MIN_SECRET_LENGTH`` characters with ``[REDACTED]``.

    Args:
        secrets: the secrets; empty ones are ignored, shorter ones are kept in ``too_short``.
    """

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        given = [s for s in secrets if s]
        self.too_short = tuple(s for s in given if len(s) < MIN_SECRET_LENGTH)
        self.secrets = tuple(dict.fromkeys(s for s in given if len(s) >= MIN_SECRET_LENGTH))
        forms = {form for s in self.secrets for form in _forms(s)}
        # Longest first: a form that contains another is replaced whole.
        self._forms = tuple(sorted(forms, key=len, reverse=True))
        self._form_bytes = tuple(form.encode("utf-8", "surrogatepass") for form in self._forms)

    def __bool__(self) -> bool:
        """Whether anything is redacted."""
        return bool(self._forms)

    def text(self, value: str) -> str:
        """``value`` with every form of every secret replaced."""
        for form in self._forms:
            if form in value:
                value = value.replace(form, REDACTED)
        return value

    def text_bytes(self, data: bytes) -> bytes:
        """UTF-8 ``data`` with every form of every secret replaced (for text, not JSON)."""
        for form in self._form_bytes:
            if form in data:
                data = data.replace(form, REDACTED.encode())
        return data

    def json_bytes(self, data: bytes) -> bytes:
        """A JSON document with every secret replaced inside its strings (keys and values).

        The result is valid JSON: a document that holds no secret (the common case, found by
        a byte search) is returned as it is; one that does is parsed, redacted and re-encoded.
        """
        if not any(form in data for form in self._form_bytes):
            return data
        try:
            document = json.loads(data)
        except ValueError:  # not JSON after all: redact it as text
            return self.text_bytes(data)
        return encode(self._redact_value(document))

    def _redact_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self._redact_value(item) for item in value]
        if isinstance(value, dict):
            return {self.text(k): self._redact_value(v) for k, v in value.items()}
        return value


def _forms(secret: str) -> set[str]:
    """The secret as written in text and in JSON strings (escaped, with and without ASCII)."""
    return {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
    }


# -- logging ---------------------------------------------------------------------------------

_registered = Redactor()


def register(secrets: Iterable[str | None]) -> Redactor:
    """Redact ``secrets`` from osmosis-run's log records from now on; return their Redactor.

    Secrets are only ever added: a key this process used stays redacted for its lifetime.
    """
    global _registered  # one process-wide set: log records belong to no run
    redactor = Redactor(secrets)
    if redactor.secrets:
        _registered = Redactor((*_registered.secrets, *redactor.secrets))
    return redactor


class _RedactingFilter(logging.Filter):
    """Format a record's message, exception and stack now, with the secrets replaced.

    Runs on the logger that emits the record, before any handler (the user's
    ``logging.basicConfig()`` included) sees it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        redactor = _registered
        if not redactor:
            return True
        record.msg = redactor.text(record.getMessage())
        record.args = None
        if record.exc_info:
            text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            record.exc_text = redactor.text(text)
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = redactor.text(record.exc_text)
        if record.stack_info:
            record.stack_info = redactor.text(record.stack_info)
        return True


_FILTER = _RedactingFilter()


def logger(name: str) -> logging.Logger:
    """The logger ``name`` (an osmosis-run module), its records redacted at the source."""
    log = logging.getLogger(name)
    if _FILTER not in log.filters:
        log.addFilter(_FILTER)
    return log
