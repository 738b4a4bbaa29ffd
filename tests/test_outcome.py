"""osmosis_run.results.outcome: the one rule, and every reader of results agreeing with it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from run_dirs import finished, line, write_run
from test_html_report import page_data

from osmosis_run.reports.html_report import render_run_html
from osmosis_run.reports.junit import write_junit
from osmosis_run.reports.step_summary import markdown_summary
from osmosis_run.results import outcome
from osmosis_run.results.compare import compare_runs, row_key
from osmosis_run.results.metrics import MetricsAccumulator, summarize
from osmosis_run.results.records import ERROR_STATUSES as RECORDS_ERROR_STATUSES
from osmosis_run.results.records import STATUSES, ResultLine, Summary
from osmosis_run.store.rundata import load_run


@pytest.mark.parametrize(
    ("status", "reward", "score", "passed"),
    [
        ("success", 1.0, 1.0, True),
        ("success", 0.5, 0.5, False),
        ("success", 0.75, 0.75, True),
        ("failure", None, 0.0, False),
        ("timeout", None, 0.0, False),
        ("invalid", None, 0.0, False),
        ("failure", 1.0, 0.0, False),  # an error scores 0 whatever reward it carries
        ("ungraded", None, None, None),
        ("removed", None, None, None),
        ("removed", 1.0, None, None),  # a removed sample is out of the means, reward or not
    ],
)
def test_score_and_passed_follow_the_status(
    status: str, reward: float | None, score: float | None, passed: bool | None
) -> None:
    assert outcome.score(status, reward) == score
    assert outcome.passed(status, reward, 0.75) is passed


def test_the_error_statuses() -> None:
    assert {"failure", "timeout", "invalid"} == outcome.ERROR_STATUSES
    assert RECORDS_ERROR_STATUSES is outcome.ERROR_STATUSES
    assert [s for s in STATUSES if outcome.is_error(s)] == ["failure", "timeout", "invalid"]


@pytest.mark.parametrize(
    ("rollout_id", "split"),
    [
        ("a.s3", ("a", 3)),
        ("a.sx.s10", ("a.sx", 10)),
        ("row@4.s0", ("row@4", 0)),
        ("x_~0123456789ab.s7", ("x_~0123456789ab", 7)),
        ("plain", ("plain", None)),
        ("x.sy", ("x.sy", None)),
        ("x.s", ("x.s", None)),
        ("x.s\u00b2", ("x.s\u00b2", None)),  # a digit int() does not take
    ],
)
def test_split_rollout_id(rollout_id: str, split: tuple[str, int | None]) -> None:
    assert outcome.split_rollout_id(rollout_id) == split
    assert row_key(rollout_id) == split[0]


@pytest.mark.parametrize(
    ("rollouts", "planned", "interrupted", "complete"),
    [
        (4, 4, False, True),
        (3, 4, False, False),
        (4, 4, True, False),
        (7, None, False, True),  # a streamed dataset that ran to its end
        (7, None, True, False),
    ],
)
def test_is_complete(rollouts: int, planned: int | None, interrupted: bool, complete: bool) -> None:
    assert outcome.is_complete(rollouts, planned, interrupted) is complete


# -- every reader agrees ------------------------------------------------------------------------


def odd_lines() -> list[ResultLine]:
    """Lines a reader could judge by their reward instead of their status."""
    return [
        line("a.s0", reward=1.0),
        line("b.s0", status="removed").model_copy(update={"reward": 1.0}),
        line("c.s0", status="failure").model_copy(update={"reward": 0.7}),
    ]


def test_readers_score_by_status_not_by_the_reward_a_line_carries(tmp_path: Path) -> None:
    lines = odd_lines()
    run = load_run(write_run(tmp_path / "run", lines, summary=finished(3)))

    summary = summarize(lines)
    cmp = compare_runs(run, run)
    junit = tmp_path / "junit.xml"
    write_junit(lines, summary, junit, suite_name="s")
    cases = {c.get("name"): [kid.tag for kid in c] for c in ET.parse(junit).iter("testcase")}
    rows = {row["i"]: row for row in page_data(render_run_html(run))["rows"]}

    assert (summary.reward_all.count, summary.reward_all.mean) == (2, 0.5)
    assert (summary.reward_graded.count, summary.passed) == (1, 1)
    assert (cmp.paired, cmp.unscored, cmp.mean.a) == (2, 1, 0.5)
    assert cases == {"a.s0": [], "b.s0": ["skipped"], "c.s0": ["error"]}
    assert [rows[i].get("p") for i in ("a.s0", "b.s0", "c.s0")] == [True, None, False]


def test_readers_split_rollout_ids_into_the_same_rows(tmp_path: Path) -> None:
    # Ids osmosis-run did not write are each a row of their own, for pass@k as for compare.
    lines = [
        line("a.s0"),
        line("a.s1"),
        line("q.s0").model_copy(update={"rollout_id": "p.sa"}),
        line("q.s0", reward=0.0).model_copy(update={"rollout_id": "p.sb"}),
    ]
    run = load_run(write_run(tmp_path / "run", lines, summary=finished(4), samples=2))

    summary = summarize(lines, samples=2)
    cmp = compare_runs(run, run)

    assert cmp.paired_rows == 3
    assert [(p.k, p.value) for p in summary.pass_at_k] == [(1, pytest.approx(2 / 3)), (2, 1.0)]


def test_the_accumulator_knows_when_a_run_is_complete() -> None:
    metrics = MetricsAccumulator()
    for i in range(3):
        metrics.add(line(f"r{i}.s0"))

    assert metrics.summary(planned=3).complete is True
    assert metrics.summary(planned=4).complete is False
    assert metrics.summary(planned=3, interrupted=True).complete is False
    assert metrics.summary(planned=3, interrupted=True).interrupted is True
    assert metrics.summary(planned=None).complete is True


@pytest.mark.parametrize(
    ("stored", "complete"),
    [
        (Summary(rollouts=2, planned=2, complete=True), True),
        (Summary(rollouts=2, planned=None, complete=True), True),  # a stream that ran to its end
        (Summary(rollouts=2, planned=5, interrupted=True), False),
        (Summary(rollouts=2, planned=None, interrupted=True), False),
        (None, False),  # no summary.json: still running, or killed
    ],
)
def test_a_run_read_back_is_complete_by_the_rule(
    tmp_path: Path, stored: Summary | None, complete: bool
) -> None:
    run = load_run(write_run(tmp_path / "run", [line("a.s0"), line("b.s0")], summary=stored))

    assert run.summary.complete is complete


@pytest.mark.parametrize(
    ("planned", "interrupted", "state"),
    [
        (2, False, "finished"),
        (None, False, "finished"),
        (5, False, "incomplete"),
        (2, True, "interrupted"),
    ],
)
def test_the_step_summary_states_completeness_by_the_rule(
    planned: int | None, interrupted: bool, state: str
) -> None:
    summary = summarize([line("a.s0"), line("b.s0")]).model_copy(
        update={"planned": planned, "interrupted": interrupted}
    )

    text = markdown_summary(summary, [], run_dir=Path("r"), title="t")

    assert text.splitlines()[2] == f"Run `r`: {state}."
