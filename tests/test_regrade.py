"""The re-grade plan and executor (run/regrade.py, backends/regrade.py) on hand-made sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_dirs import finished, line, write_run

from osmosis_run.backends.regrade import RegradeExecutor
from osmosis_run.errors import ConfigError, RunDirError
from osmosis_run.run.loop import run_to_completion
from osmosis_run.run.regrade import NoWorkflow, RecordedRun, prepare_grade
from osmosis_run.run.scheduler import Scheduler
from osmosis_run.sdk.context import AgentWorkflowContext
from osmosis_run.sdk.types import AgentWorkflowConfig, RolloutErrorCategory, RolloutStatus
from osmosis_run.store.store import read_results

SAMPLE = {
    "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hi!"}],
    "label": "hi!",
    "reward": 0.0,
    "remove_sample": True,
    "metrics": {"turns": 1.0},
    "extra_fields": {},
}


def result_json(run_dir: Path, rollout_id: str, doc: dict[str, object]) -> None:
    folder = run_dir / "rollouts" / rollout_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(json.dumps(doc))


def a_source(run_dir: Path) -> Path:
    """a.s0 recorded twice (the last wins), b.s0 without a result.json, a torn last line."""
    lines = [
        line("a.s0", reward=1.0, label="old"),
        line("b.s0", reward=1.0, label="hi!"),
        line("a.s0", reward=0.0, label="hi!"),
    ]
    write_run(run_dir, lines, summary=finished(2), torn_tail='{"rollout_id": "c.s0"')
    request = {"id": "a.s0", "prompt": [{"role": "user", "content": "hi"}], "label": "hi!"}
    result_json(
        run_dir,
        "a.s0",
        {"request": request, "workflow": {"status": "success"}, "sample": SAMPLE},
    )
    return run_dir


def test_the_last_line_of_each_rollout_is_replayed_with_its_sample_ungraded(
    tmp_path: Path,
) -> None:
    recorded = RecordedRun(a_source(tmp_path / "src"))

    jobs = list(recorded.jobs())

    assert recorded.count == 2
    assert [job.rollout_id for job in jobs] == ["b.s0", "a.s0"]
    assert (jobs[1].row.label, jobs[1].row.prompt) == ("hi!", [{"role": "user", "content": "hi"}])
    replay = recorded.take("a.s0").workflow
    assert replay.status == RolloutStatus.SUCCESS
    assert replay.sample is not None
    assert (replay.sample.reward, replay.sample.remove_sample) == (None, False)
    assert replay.sample.messages == SAMPLE["messages"]
    missing = recorded.take("b.s0").workflow
    assert (missing.status, missing.err_category, missing.err_message) == (
        RolloutStatus.FAILURE,
        RolloutErrorCategory.VALIDATION_ERROR,
        "cannot re-grade: the source run has no readable result.json for this rollout",
    )
    assert [job.rollout_id for job in recorded.jobs(skip={"b.s0"})] == ["a.s0"]
    with pytest.raises(KeyError):
        recorded.take("zzz.s0")


def test_a_hand_edited_rollout_id_cannot_leave_the_run_directory(tmp_path: Path) -> None:
    write_run(tmp_path / "src", [line("a.s0"), line("../../x.s0")])

    with pytest.raises(RunDirError) as caught:
        RecordedRun(tmp_path / "src")

    assert str(caught.value) == (
        f"{tmp_path / 'src/results.jsonl'}:2: rollout id '../../x.s0' is not one osmosis-run "
        "writes (one safe path segment); this results.jsonl was edited by hand"
    )


def test_a_source_with_nothing_finished_is_refused(tmp_path: Path) -> None:
    write_run(tmp_path / "src", [])

    with pytest.raises(ConfigError) as caught:
        prepare_grade(tmp_path / "src", {"grader": "grade_flows:Strict"})

    assert (
        str(caught.value)
        == f"{tmp_path / 'src'} has no finished rollouts to grade; run its eval first"
    )


def test_the_stand_in_workflow_refuses_to_run() -> None:
    ctx: AgentWorkflowContext[AgentWorkflowConfig] = AgentWorkflowContext(
        prompt=[], config=None, metadata=None, artifacts_dir=None
    )
    with pytest.raises(RuntimeError, match="never runs the workflow"):
        run_to_completion(NoWorkflow().run(ctx))


def test_the_engine_grades_a_hand_made_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    source = a_source(tmp_path / "src")
    plan = prepare_grade(
        source,
        {"grader": "grade_flows:Strict", "out": str(tmp_path / "new"), "max_error_rate": 5},
    )
    assert (plan.planned, plan.concurrency, plan.settings.execution.retries) == (2, 4, 0)

    outcome = run_to_completion(
        Scheduler.open(plan, RegradeExecutor.from_plan(plan), writer_process_from=None).run()
    )

    assert outcome.summary.complete is True
    graded = {
        line.rollout_id: (line.status, line.reward) for line in read_results(tmp_path / "new")
    }
    assert graded == {"a.s0": ("success", 1.0), "b.s0": ("failure", None)}
    assert (tmp_path / "new/rollouts/a.s0/artifacts").is_dir()


def test_compare_notes_runs_graded_by_different_graders(tmp_path: Path) -> None:
    from osmosis_run.results.compare import compare_runs
    from osmosis_run.store.rundata import load_run

    write_run(tmp_path / "a", [line("r.s0")], summary=finished(1), grader="m:G1")
    write_run(tmp_path / "b", [line("r.s0")], summary=finished(1), grader="m:G2")

    cmp = compare_runs(load_run(tmp_path / "a"), load_run(tmp_path / "b"))

    assert cmp.notes == ["the runs use different graders (A m:G1, B m:G2)"]
