"""The rollout lifecycle (run/lifecycle.py), as each of its two drivers shows it: eval's scheduler
and the rollout server's service, both with the shipped fake executor. Attempts (retries and
their back-off, lost attempts, the policy for an executor's exception), then records (the run's
pass threshold, the cancelled category, redaction of a rollout's own key, output JSON cannot
hold)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS_DIR, open_scheduler, results
from conftest import fake_run_settings as settings

from osmosis_run._construct import construct
from osmosis_run.backends.fake import FakeExecutor, Handler
from osmosis_run.run.lifecycle import RETRY_BASE_S, RETRY_MAX_S, retry_delay
from osmosis_run.run.loop import run_to_completion
from osmosis_run.run.scheduler import RunOutcome
from osmosis_run.run.seam import LOST_LIMIT, Attempt, AttemptLost
from osmosis_run.run.settings import EvalSettings
from osmosis_run.sdk.backend import LocalBackend
from osmosis_run.sdk.types import (
    ExecutionOutcome,
    ExecutionResult,
    RolloutErrorCategory,
    RolloutStatus,
)
from osmosis_run.server.protocol import RolloutInitRequest
from osmosis_run.server.service import RolloutService

KEY = "sk-rollout-key-0123456789abcdef"


@pytest.fixture(autouse=True)
def _flows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def run(s: EvalSettings, executor: FakeExecutor, **options: Any) -> RunOutcome:
    return run_to_completion(open_scheduler(s, executor, **options).run())


# --- the two drivers, each giving the run directory's results lines ------------------------


def by_eval(tmp_path: Path, handler: Handler, *, pass_threshold: float = 1.0) -> Path:
    """One rollout (``q0.s0``) through eval's scheduler; the run's key is ``KEY``."""
    s = settings(tmp_path, rows=1, pass_threshold=pass_threshold, api_key=KEY)
    run(s, FakeExecutor(handler))
    return tmp_path / "run"


def by_server(tmp_path: Path, handler: Handler, *, pass_threshold: float = 1.0) -> Path:
    """One rollout (``q0.s0``) through the rollout service; the request brings ``KEY``."""
    run_dir = tmp_path / "run"

    async def main() -> None:
        service = RolloutService(
            LocalBackend(workflow="server_flows:Upper", grader="server_flows:Exact"),
            run_dir=run_dir,
            result_wait_s=1.0,
            lease_s=30.0,
            retention_s=60.0,
            concurrency=None,
            pass_threshold=pass_threshold,
            executor=FakeExecutor(handler),
        )
        await service.start()
        init = RolloutInitRequest(
            rollout_id="q0.s0",
            initial_messages=[{"role": "user", "content": "p0"}],
            chat_completions_url="http://127.0.0.1:9/v1",
            llm_api_key=KEY,
        )
        service.admit(init)
        await service.shutdown()  # drains: the rollout runs to its end and is recorded

    asyncio.run(main())
    return run_dir


DRIVERS = [by_eval, by_server]
Driver = Callable[..., Path]


def only_line(run_dir: Path) -> dict[str, Any]:
    [raw] = (run_dir / "results.jsonl").read_text().splitlines()
    line: dict[str, Any] = json.loads(raw)
    return line


def outcome_of(result: ExecutionResult) -> ExecutionOutcome:
    return construct(ExecutionOutcome, workflow=result, grader=None)


# --- records: the same rules whichever driver ran the rollout ------------------------------


@pytest.mark.parametrize("driver", DRIVERS, ids=["eval", "serve"])
@pytest.mark.parametrize(("threshold", "passed"), [(0.5, True), (0.7, False)])
def test_a_rollout_passes_by_the_runs_threshold(
    tmp_path: Path, driver: Driver, threshold: float, passed: bool
) -> None:
    run_dir = driver(tmp_path, lambda _: FakeExecutor.success(reward=0.6), pass_threshold=threshold)
    assert (only_line(run_dir)["reward"], only_line(run_dir)["passed"]) == (0.6, passed)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["pass_threshold"] == threshold


@pytest.mark.parametrize("driver", DRIVERS, ids=["eval", "serve"])
def test_a_cancelled_result_is_recorded_with_the_cancelled_category(
    tmp_path: Path, driver: Driver
) -> None:
    cancelled = ExecutionResult(status=RolloutStatus.CANCELLED, err_message="cancelled")
    line = only_line(driver(tmp_path, lambda _: outcome_of(cancelled)))
    assert (line["status"], line["error_category"], line["error_message"]) == (
        "failure",
        "cancelled",
        "cancelled",
    )


@pytest.mark.parametrize("driver", DRIVERS, ids=["eval", "serve"])
def test_the_rollouts_key_is_in_no_file_of_the_run(tmp_path: Path, driver: Driver) -> None:
    def echoes_the_key(attempt: Attempt) -> ExecutionOutcome:
        key = attempt.context.api_key
        assert key == KEY
        return FakeExecutor.failure(f"bad key {key}", traceback=f"Traceback: uses {key}")

    run_dir = driver(tmp_path, echoes_the_key)
    assert only_line(run_dir)["error_message"] == "bad key [REDACTED]"
    written = [path for path in run_dir.rglob("*") if path.is_file()]
    assert any(path.name == "result.json" for path in written)
    assert [path for path in written if KEY.encode() in path.read_bytes()] == []


@pytest.mark.parametrize("driver", DRIVERS, ids=["eval", "serve"])
def test_output_json_cannot_hold_is_that_rollouts_validation_error(
    tmp_path: Path, driver: Driver
) -> None:
    def lone_surrogate(_: Attempt) -> ExecutionOutcome:
        return FakeExecutor.success(messages=[{"role": "assistant", "content": "a\ud800"}])

    line = only_line(driver(tmp_path, lone_surrogate))
    assert (line["status"], line["error_category"], line["error_message"]) == (
        "failure",
        "validation_error",
        "the rollout's output cannot be written as JSON: "
        "sample.messages[0].content holds a lone surrogate (\\ud800); text must be valid Unicode",
    )


# --- an executor's exception: one explicit policy per driver --------------------------------


def test_eval_stops_on_an_executors_exception_and_raises_it_with_its_traceback(
    tmp_path: Path,
) -> None:
    def broken(attempt: Attempt) -> Any:
        if attempt.request.id == "q2.s0":
            raise RuntimeError("executor bug")
        return FakeExecutor.success()

    s = settings(tmp_path, rows=3, concurrency=1)
    with pytest.raises(RuntimeError, match="executor bug") as raised:
        run(s, FakeExecutor(broken))
    assert raised.traceback[-1].name == "broken"
    assert [line.rollout_id for line in results(tmp_path / "run")] == ["q0.s0", "q1.s0"]
    # The run directory is released: the same run resumes.
    outcome = run(s, FakeExecutor())
    assert outcome.summary.rollouts == 3


def test_the_server_fails_the_rollout_on_an_executors_exception_and_logs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(_: Attempt) -> Any:
        raise RuntimeError("executor bug")

    with caplog.at_level(logging.ERROR, logger="osmosis_run"):
        run_dir = by_server(tmp_path, broken)
    line = only_line(run_dir)
    assert (line["status"], line["error_category"], line["error_message"]) == (
        "failure",
        "internal_error",
        "executor bug",
    )
    doc = json.loads((run_dir / "rollouts" / "q0.s0" / "result.json").read_text())
    assert (doc["error"]["stage"], doc["workflow"]["err_category"]) == ("backend", "internal_error")
    [record] = [r for r in caplog.records if r.name == "osmosis_run.run.lifecycle"]
    assert record.getMessage() == "rollout q0.s0: the executor raised"
    assert record.exc_text is not None  # the traceback, redacted (the record keeps its text)
    assert record.exc_text.splitlines()[-1] == "RuntimeError: executor bug"


# --- attempts: retries, back-off, lost attempts ---------------------------------------------


def test_retry_delays_grow_exponentially_with_jitter_and_honour_retry_after() -> None:
    rng = random.Random(7)
    for attempt in range(1, 12):
        ceiling = min(RETRY_MAX_S, RETRY_BASE_S * 2 ** (attempt - 1))
        delay = retry_delay(attempt, None, rng)
        assert ceiling / 2 <= delay <= ceiling
    assert retry_delay(1, 9.0, rng) == 9.0
    assert RETRY_BASE_S / 2 <= retry_delay(1, 0.0, rng) <= RETRY_BASE_S


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


def test_the_server_makes_one_attempt_the_trainer_retries(tmp_path: Path) -> None:
    executor_attempts: list[int] = []

    def hiccup(attempt: Attempt) -> ExecutionOutcome:
        executor_attempts.append(attempt.number)
        return FakeExecutor.failure("upstream hiccup")

    line = only_line(by_server(tmp_path, hiccup))
    assert (line["status"], line["attempts"], executor_attempts) == ("failure", 1, [1])


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


def test_each_attempt_gets_a_fresh_context_with_the_rollouts_id_and_seed(tmp_path: Path) -> None:
    def twice(attempt: Attempt) -> ExecutionOutcome:
        if attempt.number == 1:
            return FakeExecutor.failure("hiccup")
        return FakeExecutor.success()

    executor = FakeExecutor(twice)
    run(settings(tmp_path, rows=1, retries=1), executor, sleep=_no_wait)
    first, second = (attempt.context for attempt in executor.attempts)
    assert first is not second
    assert (first.rollout_id, first.seed) == (second.rollout_id, second.seed)
    assert first.rollout_id == "q0.s0"


async def _no_wait(_: float) -> None:
    pass
