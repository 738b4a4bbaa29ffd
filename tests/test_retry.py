"""osmosis_run/retry.py: the one back-off and Retry-After rule every retry waits by."""

from __future__ import annotations

import email.utils
import math
import random

import pytest

from osmosis_run.retry import MAX_RETRY_AFTER_S, backoff, retry_after, retry_after_headers

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2", 2.0),
        (" 1.5 ", 1.5),
        (b"3", 3.0),
        (7, 7.0),
        (0.25, 0.25),
        ("0", 0.0),
        ("86400", MAX_RETRY_AFTER_S),
        (math.inf, MAX_RETRY_AFTER_S),
        (email.utils.formatdate(NOW + 42, usegmt=True), 42.0),
        (email.utils.formatdate(NOW - 42, usegmt=True), 0.0),
        (email.utils.formatdate(NOW + 86400, usegmt=True), MAX_RETRY_AFTER_S),
        ("soon", None),
        ("", None),
        ("-1", None),
        ("nan", None),
        (math.nan, None),
        (True, None),
        (None, None),
        ([], None),
    ],
)
def test_retry_after_reads_seconds_and_dates_within_one_cap(
    value: object, seconds: float | None
) -> None:
    assert retry_after(value, now=NOW) == seconds


def test_milliseconds_come_first_and_a_bad_value_falls_back() -> None:
    assert retry_after_headers({"retry-after-ms": "150", "retry-after": "9"}) == 0.15
    assert retry_after_headers({"retry-after-ms": "later", "retry-after": "9"}) == 9.0
    assert retry_after_headers({"retry-after-ms": "9000000"}) == MAX_RETRY_AFTER_S
    assert retry_after_headers({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after_headers({}) is None


def test_backoff_is_equal_jitter_under_its_ceiling() -> None:
    rng = random.Random(7)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (8, 30.0), (30, 30.0)]:
        waits = [backoff(attempt, base_s=0.5, max_s=30.0, rng=rng) for _ in range(200)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits)
        assert max(waits) - min(waits) > ceiling / 4  # jittered, not constant
