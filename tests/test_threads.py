"""``WorkerThreads``, the event loop's default executor in a run (``osmosis_run/run/threads.py``)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError

import pytest

from osmosis_run.run.threads import WorkerThreads, default_size


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Set at the end of the test, so that no call a test leaves blocked outlives it."""
    event = threading.Event()
    yield event
    event.set()


def _hold(started: threading.Event, gate: threading.Event) -> bool:
    started.set()
    return gate.wait()


def test_calls_run_on_daemon_threads_and_their_futures_carry_the_outcome() -> None:
    pool = WorkerThreads(4)
    where = pool.submit(threading.current_thread)
    assert where.result(timeout=5).daemon
    assert where.result().name == "osmosis-run worker 0"
    assert pool.submit(pow, 2, exp=10).result(timeout=5) == 1024
    failed = pool.submit(int, "x")
    with pytest.raises(ValueError, match="invalid literal"):
        failed.result(timeout=5)
    pool.shutdown()
    assert pool.running == 0


def test_a_thread_is_started_only_when_none_is_waiting() -> None:
    pool = WorkerThreads(8)
    for _ in range(20):  # one after the other: the thread that ran the last one takes the next
        pool.submit(time.sleep, 0).result(timeout=5)
    names = {pool.submit(lambda: threading.current_thread().name).result(timeout=5)}
    pool.shutdown()
    assert names == {"osmosis-run worker 0"}


def test_at_most_max_workers_calls_run_at_once(gate: threading.Event) -> None:
    pool = WorkerThreads(2)
    started = threading.Semaphore(0)

    def hold() -> str:
        started.release()
        gate.wait()
        return threading.current_thread().name

    calls = [pool.submit(hold) for _ in range(3)]
    assert started.acquire(timeout=5)
    assert started.acquire(timeout=5)
    assert not started.acquire(timeout=0.2), "a third call ran beside the two"
    assert pool.running == 3
    gate.set()
    assert {c.result(timeout=5) for c in calls} == {"osmosis-run worker 0", "osmosis-run worker 1"}
    pool.shutdown()


def test_settle_cancels_what_is_queued_and_counts_what_still_runs(gate: threading.Event) -> None:
    pool = WorkerThreads(1)
    started = threading.Event()
    running = pool.submit(_hold, started, gate)
    assert started.wait(timeout=5)
    queued = pool.submit(time.sleep, 0)
    began = time.monotonic()
    assert pool.settle(0.2) == 1
    assert 0.2 <= time.monotonic() - began < 2
    assert queued.cancelled()
    assert not running.done()
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(time.sleep, 0)
    gate.set()
    assert running.result(timeout=5) is True
    assert pool.running == 0


def test_settle_returns_at_once_when_every_call_has_ended() -> None:
    pool = WorkerThreads(4)
    assert [pool.submit(abs, -i).result(timeout=5) for i in range(3)] == [0, 1, 2]
    began = time.monotonic()
    assert pool.settle(30) == 0
    assert time.monotonic() - began < 1


def test_a_call_cancelled_before_it_starts_never_runs(gate: threading.Event) -> None:
    pool = WorkerThreads(1)
    started = threading.Event()
    pool.submit(_hold, started, gate)
    assert started.wait(timeout=5)
    ran: list[int] = []
    later = pool.submit(ran.append, 1)
    assert later.cancel()
    gate.set()
    pool.shutdown(wait=True)
    assert ran == []
    assert pool.running == 0
    with pytest.raises(CancelledError):
        later.result()


def test_shutdown_with_wait_waits_for_running_calls() -> None:
    pool = WorkerThreads(2)
    done: list[str] = []

    def slow() -> None:
        time.sleep(0.2)
        done.append("slow")

    pool.submit(slow)
    pool.shutdown(wait=True)
    assert done == ["slow"]


def test_a_pool_needs_one_thread_at_least() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        WorkerThreads(0)


def test_the_size_follows_the_concurrency_and_never_goes_below_asyncios() -> None:
    floor = min(32, (os.cpu_count() or 1) + 4)
    assert default_size(None) == floor
    assert default_size(1) == floor
    assert default_size(floor + 60) == floor + 60
