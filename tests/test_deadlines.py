"""Deadlines and the watchdog (run/deadlines.py): the ``Deadlines`` object executors are handed,
on its own and through the scheduler, and the thread that names a rollout holding the loop."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS_DIR, open_scheduler, results
from conftest import fake_run_settings as settings

from osmosis_run.backends.fake import FakeExecutor
from osmosis_run.run.deadlines import Deadlines, Watchdog
from osmosis_run.run.loop import run_to_completion
from osmosis_run.run.scheduler import RunOutcome
from osmosis_run.run.seam import Attempt
from osmosis_run.run.settings import EvalSettings


@pytest.fixture(autouse=True)
def _flows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS_DIR))


async def _stubborn(attempt: Attempt | None = None) -> Any:
    """Work that swallows every cancellation and never ends."""
    while True:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            continue


def run(s: EvalSettings, executor: FakeExecutor, **options: Any) -> RunOutcome:
    # Not asyncio.run: it would wait for ever for an attempt that ignores its cancellation.
    return run_to_completion(open_scheduler(s, executor, **options).run())


# --- Deadlines on its own -------------------------------------------------------------------


def within(deadlines: Deadlines, seconds: float | None, work: Any) -> Any:
    return deadlines.within(
        "workflow", seconds, work, rollout_id="r", timed_out=lambda: "timed out"
    )


def test_work_within_its_deadline_gives_its_result_and_none_is_no_deadline() -> None:
    async def answer() -> str:
        await asyncio.sleep(0.01)
        return "done"

    async def main() -> list[Any]:
        deadlines = Deadlines()
        return [await within(deadlines, 1.0, answer()), await within(deadlines, None, answer())]

    assert asyncio.run(main()) == ["done", "done"]


def test_work_past_its_deadline_is_cancelled_and_timed_out() -> None:
    cancelled: list[bool] = []

    async def slow() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    async def main() -> Any:
        deadlines = Deadlines()
        answer = await within(deadlines, 0.05, slow())
        return answer, deadlines.abandoned

    assert asyncio.run(main()) == ("timed out", set())
    assert cancelled == [True]


def test_work_that_returns_after_its_deadline_is_a_timeout() -> None:
    async def blocks_the_loop() -> str:
        time.sleep(0.1)  # noqa: ASYNC251  (blocking code: the timer cannot fire)
        return "late"

    assert asyncio.run(within(Deadlines(), 0.02, blocks_the_loop())) == "timed out"


def test_work_that_ignores_its_cancellation_is_abandoned_kept_and_cancelled_again() -> None:
    async def main() -> tuple[Any, int, int]:
        deadlines = Deadlines(abandon_grace_s=0.05)
        started = time.monotonic()
        answer = await within(deadlines, 0.05, _stubborn())
        assert time.monotonic() - started < 1
        kept = len(deadlines.abandoned)
        return answer, kept, deadlines.cancel_abandoned()

    answer, kept, pending = run_to_completion(main())
    assert (answer, kept, pending) == ("timed out", 1, 1)


def test_a_caller_cancelled_while_it_waits_abandons_the_work_and_is_cancelled() -> None:
    async def main() -> tuple[bool, int]:
        deadlines = Deadlines(abandon_grace_s=0.05)
        waiting = asyncio.ensure_future(within(deadlines, 10.0, _stubborn()))
        await asyncio.sleep(0.02)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return waiting.cancelled(), len(deadlines.abandoned)

    assert run_to_completion(main()) == (True, 1)


# --- through the scheduler --------------------------------------------------------------------


def test_deadlines_count_from_the_start_of_running_not_from_the_queue(tmp_path: Path) -> None:
    async def slow(attempt: Attempt) -> Any:
        await asyncio.sleep(0.4)
        return FakeExecutor.success()

    # One at a time: the fourth waits 1.2 s in the queue, more than its 1 s deadline, which each
    # one's 0.4 s run stays well within on a loaded machine.
    run(settings(tmp_path, rows=4, concurrency=1, agent_timeout=1.0), FakeExecutor(slow))
    assert [line.status for line in results(tmp_path / "run")] == ["success"] * 4


def test_an_attempt_past_its_deadline_is_a_timeout(tmp_path: Path) -> None:
    async def forever(attempt: Attempt) -> Any:
        await asyncio.sleep(60)

    run(settings(tmp_path, rows=1, agent_timeout=0.1), FakeExecutor(forever))
    [line] = results(tmp_path / "run")
    assert (line.status, line.error_message) == ("timeout", "workflow exceeded its 0.1s deadline")


def test_an_attempt_that_ignores_cancellation_is_abandoned_after_the_grace(tmp_path: Path) -> None:
    outcome = run(
        settings(tmp_path, rows=1, agent_timeout=0.05),
        FakeExecutor(_stubborn),
        abandon_grace_s=0.05,
    )
    [line] = results(tmp_path / "run")
    assert line.status == "timeout"
    assert outcome.abandoned == 1


def test_executors_are_handed_the_runs_deadlines_not_the_scheduler(tmp_path: Path) -> None:
    handed: list[object] = []

    class Watching(FakeExecutor):
        async def run(self, attempt: Attempt, deadlines: Any) -> Any:
            handed.append(deadlines)
            return await super().run(attempt, deadlines)

    scheduler = open_scheduler(settings(tmp_path, rows=2), Watching())
    run_to_completion(scheduler.run())
    assert handed == [scheduler.deadlines, scheduler.deadlines]
    assert type(scheduler.deadlines) is Deadlines


# --- the watchdog ---------------------------------------------------------------------------


def test_the_watchdog_names_a_rollout_holding_the_loop_once_and_nothing_else() -> None:
    named: list[str | None] = []
    reported = threading.Event()

    def report(rollout_id: str | None, seconds: float) -> None:
        named.append(rollout_id)
        reported.set()

    async def hog() -> None:
        time.sleep(0.6)  # noqa: ASYNC251  (holds the loop: no beat)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        dog = Watchdog(loop, report, {"hog.s0": 0.0}, after_s=0.2, every_s=0.02)
        try:
            await loop.create_task(hog(), name="hog.s0")
            dog.beat = time.monotonic()
            await loop.create_task(hog(), name="hog.s0")  # the same rollout: not named again
            dog.beat = time.monotonic()
            await loop.create_task(hog(), name="not a rollout")
        finally:
            dog.stop()

    asyncio.run(main())
    assert reported.is_set()
    assert named == ["hog.s0"]
