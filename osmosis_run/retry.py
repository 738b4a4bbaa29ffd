"""The one retry rule: exponential back-off with jitter, and the one Retry-After parser.

Every retry osmosis-run makes waits by these two functions: the engine between a rollout's
attempts (``--retries``), the model gateway between its upstream attempts, and ``eval --server``
after a 429 from the rollout server.

- ``backoff(n, base_s=, max_s=, rng=)``: the wait before retry ``n`` (1, 2, ...), uniform in
  ``[d/2, d]`` with ``d = min(max_s, base_s * 2**(n-1))`` ("equal jitter": never less than half
  the exponential step, so retries spread out without a zero wait).
- ``retry_after(value)``: what a ``Retry-After`` asks for, in seconds: a number of seconds
  (``"7"``, ``"1.5"``, an ``int`` or ``float`` an exception carries) or an HTTP date, RFC 9110
  §10.2.3. Negative, NaN or unreadable values are ``None`` (no wish expressed); a date in the
  past is 0. ``retry_after_headers(headers)`` reads ``retry-after-ms`` (OpenAI's and
  Anthropic's, in milliseconds) before ``retry-after``.

``MAX_RETRY_AFTER_S`` is the one cap on a Retry-After: 300 s. A peer that asks for longer is
waited for five minutes, then tried again: an hour-long wait (a provider's daily quota) would
hold a rollout's slot and the run with it, and a retry after five minutes that is refused
again costs one request.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping

__all__ = ["MAX_RETRY_AFTER_S", "backoff", "retry_after", "retry_after_headers"]

MAX_RETRY_AFTER_S = 300.0


def backoff(attempt: int, *, base_s: float, max_s: float, rng: random.Random) -> float:
    """Seconds before retry ``attempt`` (1, 2, ...): uniform in [d/2, d], d = base * 2**(n-1)."""
    ceiling = min(max_s, base_s * 2 ** (attempt - 1))
    return rng.uniform(ceiling / 2, ceiling)


def retry_after(value: object, *, now: float | None = None) -> float | None:
    """The seconds a ``Retry-After`` value asks for, at most ``MAX_RETRY_AFTER_S``.

    Args:
        value: a header's text (delta-seconds or an HTTP date) or a number of seconds.
        now: the current Unix time, for a date (default: ``time.time()``).
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str | bytes):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        try:
            seconds = float(text.strip())
        except ValueError:
            return _from_date(text, time.time() if now is None else now)
    else:
        return None
    if math.isnan(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER_S)


def retry_after_headers(headers: Mapping[str, str]) -> float | None:
    """The wait a response's headers ask for: ``retry-after-ms``, else ``retry-after``.

    ``headers`` is looked up with lower-case names (httpx's and the gateway's are
    case-insensitive or lower-case already).
    """
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            seconds = float(millis) / 1000
        except ValueError:
            seconds = math.nan
        found = retry_after(seconds)
        if found is not None:
            return found
    return retry_after(headers.get("retry-after"))


def _from_date(text: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return min(max(0.0, when.timestamp() - now), MAX_RETRY_AFTER_S)
