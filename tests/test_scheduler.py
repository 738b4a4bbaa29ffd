"""The engine against the shipped fake executor: scheduling, deadlines, retries, stops and a
backend that fails, with no user code and no patched module constants."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS_DIR, open_scheduler, results, write_jsonl

from osmosis_run.backends.fake import FakeExecutor
from osmosis_run.run.scheduler import RunOutcome, retry_delay, run_to_completion
from osmosis_run.run.seam import LOST_LIMIT, Attempt, AttemptLost
from osmosis_run.run.settings import EvalSettings
from osmosis_run.sdk.types import RolloutErrorCategory


@pytest.fixture(autouse=True)
def _flows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def settings(tmp_path: Path, rows: int = 4, **kw: Any) -> EvalSettings:
    data = write_jsonl(
        tmp_path / "d.jsonl", [{"id": f"q{i}", "prompt": f"p{i}"} for i in range(rows)]
    )
    return EvalSettings.model_validate(
        {
            "dataset": str(data),
            "workflow": "eval_flows:Echo",  # the plan loads it; the fake executor never runs it
            "out": str(tmp_path / "run"),
            "max_error_rate": 1,
            **kw,
        }
    )


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


def test_deadlines_count_from_the_start_of_running_not_from_the_queue(tmp_path: Path) -> None:
    async def slow(attempt: Attempt) -> Any:
        await asyncio.sleep(0.15)
        return FakeExecutor.success()

    # One at a time: the third waits 0.3 s in the queue, more than its 0.25 s deadline.
    run(settings(tmp_path, rows=3, concurrency=1, agent_timeout=0.25), FakeExecutor(slow))
    assert [line.status for line in results(tmp_path / "run")] == ["success"] * 3


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


def test_transient_failures_are_retried_after_a_back_off_and_validation_errors_are_not(
    tmp_path: Path,
) -> None:
    def flaky(attempt: Attempt) -> Any:
        if attempt.request.id == "q0.s0" and attempt.number == 1:
            return FakeExecutor.failure("upstream hiccup", retry_after_s=3.0)
        if attempt.request.id == "q1.s0":
            return FakeExecutor.failure("bad", RolloutErrorCategory.VALIDATION_ERROR)
        return FakeExecutor.success()

    waited: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waited.append(seconds)

    executor = FakeExecutor(flaky)
    run(settings(tmp_path, rows=2, retries=2), executor, sleep=fake_sleep, rng=random.Random(3))
    lines = {line.rollout_id: line for line in results(tmp_path / "run")}
    assert (lines["q0.s0"].status, lines["q0.s0"].attempts) == ("success", 2)
    assert (lines["q1.s0"].status, lines["q1.s0"].attempts) == ("failure", 1)
    assert waited == [retry_delay(1, 3.0, random.Random(3))] == [3.0]
    assert [a.number for a in executor.attempts if a.request.id == "q0.s0"] == [1, 2]


def test_a_lost_attempt_runs_again_without_counting_as_a_retry(tmp_path: Path) -> None:
    lost: dict[str, int] = {}

    def actor_dies(attempt: Attempt) -> Any:
        rid = attempt.request.id
        lost[rid] = lost.get(rid, 0) + 1
        if rid == "q0.s0" and lost[rid] <= 2:
            raise AttemptLost("actor died")
        if rid == "q1.s0":
            raise AttemptLost("actor died")
        return FakeExecutor.success()

    run(settings(tmp_path, rows=2), FakeExecutor(actor_dies))
    lines = {line.rollout_id: line for line in results(tmp_path / "run")}
    assert (lines["q0.s0"].status, lines["q0.s0"].attempts) == ("success", 1)
    assert lines["q1.s0"].status == "failure"
    assert lines["q1.s0"].error_message == (
        f"the backend lost this rollout {LOST_LIMIT + 1} times in a row (actor died)"
    )
    assert lost == {"q0.s0": 3, "q1.s0": LOST_LIMIT + 1}


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


def test_an_executor_that_raises_is_a_bug_raised_with_its_traceback(tmp_path: Path) -> None:
    def broken(attempt: Attempt) -> Any:
        if attempt.request.id == "q2.s0":
            raise RuntimeError("executor bug")
        return FakeExecutor.success()

    s = settings(tmp_path, rows=3, concurrency=1)
    with pytest.raises(RuntimeError, match="executor bug"):
        run(s, FakeExecutor(broken))
    assert [line.rollout_id for line in results(tmp_path / "run")] == ["q0.s0", "q1.s0"]
    # The run directory is released: the same run resumes.
    outcome = run(s, FakeExecutor())
    assert outcome.summary.rollouts == 3
