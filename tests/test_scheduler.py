"""The scheduler against the shipped fake executor: the window of rollouts in flight, and
stops. Deadlines are in test_deadlines.py, attempts and records in test_lifecycle.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS_DIR, open_scheduler, results
from conftest import fake_run_settings as settings

from osmosis_run.backends.fake import FakeExecutor
from osmosis_run.run.loop import run_to_completion
from osmosis_run.run.scheduler import RunOutcome
from osmosis_run.run.seam import Attempt
from osmosis_run.run.settings import EvalSettings


@pytest.fixture(autouse=True)
def _flows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS_DIR))


async def _stubborn(attempt: Attempt) -> Any:
    """An attempt that swallows every cancellation and never ends."""
    while True:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            continue


def run(s: EvalSettings, executor: FakeExecutor, **options: Any) -> RunOutcome:
    # Not asyncio.run: it would wait for ever for an attempt that ignores its cancellation.
    return run_to_completion(open_scheduler(s, executor, **options).run())


def test_at_most_concurrency_attempts_run_at_once_and_each_rollout_is_recorded(
    tmp_path: Path,
) -> None:
    async def slow(attempt: Attempt) -> Any:
        await asyncio.sleep(0.02)
        return FakeExecutor.success()

    executor = FakeExecutor(slow)
    outcome = run(settings(tmp_path, rows=20, concurrency=3), executor)
    assert executor.peak_in_flight == 3
    assert (executor.opened, executor.closed) == (True, True)
    assert outcome.summary.rollouts == 20
    assert sorted(line.rollout_id for line in results(tmp_path / "run")) == sorted(
        f"q{i}.s0" for i in range(20)
    )


def test_the_executors_limit_is_the_default_concurrency(tmp_path: Path) -> None:
    async def slow(attempt: Attempt) -> Any:
        await asyncio.sleep(0.02)
        return FakeExecutor.success()

    executor = FakeExecutor(slow, limit=2)
    run(settings(tmp_path, rows=8), executor)
    assert executor.peak_in_flight == 2


def test_a_stop_cancels_what_is_in_flight_and_keeps_what_finished(tmp_path: Path) -> None:
    async def sometimes_slow(attempt: Attempt) -> Any:
        if attempt.request.id != "q0.s0":
            await asyncio.sleep(60)
        return FakeExecutor.success()

    async def main() -> RunOutcome:
        scheduler = open_scheduler(settings(tmp_path, rows=4), FakeExecutor(sometimes_slow))
        asyncio.get_running_loop().call_later(0.3, scheduler.stop)
        return await scheduler.run()

    outcome = run_to_completion(main())
    assert outcome.interrupted is True
    assert [line.rollout_id for line in results(tmp_path / "run")] == ["q0.s0"]
    assert (outcome.summary.interrupted, outcome.summary.complete) == (True, False)


def test_a_stop_abandons_attempts_that_ignore_it_after_the_grace(tmp_path: Path) -> None:
    async def main() -> RunOutcome:
        scheduler = open_scheduler(
            settings(tmp_path, rows=2), FakeExecutor(_stubborn), stop_grace_s=0.1
        )
        asyncio.get_running_loop().call_later(0.2, scheduler.stop)
        return await scheduler.run()

    outcome = run_to_completion(main())
    assert (outcome.interrupted, outcome.abandoned) == (True, 2)
    assert results(tmp_path / "run") == []
