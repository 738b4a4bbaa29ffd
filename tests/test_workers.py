"""The worker pool: order of work, growth under backlog, errors, cancellation."""

from __future__ import annotations

import threading

import pytest

from osmosis_run.workers import WorkerPool


def test_runs_work_and_returns_results() -> None:
    pool = WorkerPool("t", most=1, backlog=10)
    futures = [pool.submit(pow, 2, n) for n in range(5)]
    assert [f.result(timeout=5) for f in futures] == [1, 2, 4, 8, 16]
    pool.shutdown()
    assert pool.threads == 0


def test_grows_only_while_work_waits_and_never_past_most() -> None:
    gate = threading.Event()
    pool = WorkerPool("t", most=3, backlog=1)
    assert pool.threads == 1
    futures = [pool.submit(gate.wait, 5) for _ in range(10)]
    assert pool.threads == 3
    gate.set()
    assert all(f.result(timeout=5) for f in futures)
    pool.shutdown()


def test_an_exception_reaches_whoever_waits() -> None:
    pool = WorkerPool("t", most=1, backlog=10)
    future = pool.submit(int, "not a number")
    with pytest.raises(ValueError, match="invalid literal"):
        future.result(timeout=5)
    assert pool.submit(int, "7").result(timeout=5) == 7
    pool.shutdown()


def test_shutdown_with_cancel_drops_work_not_started() -> None:
    gate, started = threading.Event(), threading.Event()

    def first() -> bool:
        started.set()
        return gate.wait(5)

    pool = WorkerPool("t", most=1, backlog=100)
    running = pool.submit(first)
    assert started.wait(5)
    waiting = [pool.submit(gate.wait, 5) for _ in range(3)]
    threading.Timer(0.2, gate.set).start()
    pool.shutdown(cancel=True)
    assert running.result(timeout=5) is True
    assert all(f.cancelled() for f in waiting)
