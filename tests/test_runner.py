"""The Runner as a library: progress events, stalls, summaries."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from conftest import TESTS_DIR, Recorder, open_scheduler, qa_rows, write_jsonl

from osmosis_run.run.settings import EvalSettings


def settings(tmp_path: Path, **kw: object) -> EvalSettings:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2, metadata={"sleep": 0.4}))
    return EvalSettings.model_validate(
        {"dataset": str(data), "workflow": "eval_flows:Sleepy", "out": str(tmp_path / "run"), **kw}
    )


@pytest.fixture(autouse=True)
def _flows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def test_a_long_running_rollout_is_reported_once(tmp_path: Path) -> None:
    recorder = Recorder()
    runner = open_scheduler(settings(tmp_path, concurrency=1), reporter=recorder, stall_after_s=0.2)
    outcome = asyncio.run(runner.run())
    assert outcome.summary.rollouts == 2
    stalls = [rid for kind, rid in recorder.events if kind == "stalled"]
    assert stalls == ["q0.s0", "q1.s0"]
    assert recorder.events[0] == ("started", (2, 0, 0))


def test_no_stall_reports_when_a_deadline_bounds_rollouts(tmp_path: Path) -> None:
    recorder = Recorder()
    runner = open_scheduler(
        settings(tmp_path, agent_timeout=5), reporter=recorder, stall_after_s=0.1
    )
    asyncio.run(runner.run())
    assert [kind for kind, _ in recorder.events] == ["started", "finished", "finished"]


@pytest.mark.parametrize("writer_process", [True, False])
def test_results_are_the_same_with_or_without_a_writer_process(
    tmp_path: Path, writer_process: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [*qa_rows(70), "not json"])
    s = EvalSettings.model_validate(
        {
            "dataset": str(data),
            "workflow": "eval_flows:Echo",
            "grader": "eval_flows:ExactMatch",
            "out": str(tmp_path / "run"),
            "concurrency": 8,
        }
    )
    runner = open_scheduler(s, writer_process_from=1 if writer_process else None)
    outcome = asyncio.run(runner.run())
    assert runner.store is not None
    assert runner.store.background is writer_process
    assert outcome.summary.rollouts == 71
    assert outcome.summary.counts == {"invalid": 1, "success": 70}
    lines = (tmp_path / "run/results.jsonl").read_text().splitlines()
    assert len(lines) == 71
    for i in range(70):
        where = tmp_path / "run/rollouts" / f"q{i}.s0"
        assert sorted(p.name for p in where.iterdir()) == [
            "artifacts",
            "result.json",
            "trajectory.json",
        ]
        assert (where / "artifacts/echo.txt").read_text() == f"p{i}"


def test_small_runs_write_in_process(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(3))
    s = EvalSettings.model_validate(
        {"dataset": str(data), "workflow": "eval_flows:Echo", "out": str(tmp_path / "run")}
    )
    runner = open_scheduler(s)
    assert runner.store is not None
    assert runner.store.background is False  # 3 rollouts: a writer process would cost more
    asyncio.run(runner.run())
    assert len((tmp_path / "run/results.jsonl").read_text().splitlines()) == 3
