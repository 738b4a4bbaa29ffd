"""`osmosis-run report` through the real CLI, and the library behind it (osmosis_run.reports.report)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import qa_rows, write_jsonl
from run_dirs import finished, line, write_run
from typer.testing import Result

from osmosis_run.errors import ConfigError, RunDirError
from osmosis_run.reports.report import (
    FailureCategory,
    FailureGroup,
    build_report,
    failure_categories,
    open_run,
    slowest_rollouts,
)
from osmosis_run.results.records import Summary

Cli = Callable[..., Result]
ECHO = ["--workflow", "eval_flows:Echo", "--grader", "eval_flows:ExactMatch"]


def report_lines(result: Result) -> list[str]:
    """The text report (stdout): no line ends in a space."""
    lines = result.stdout.splitlines()
    assert [text for text in lines if text != text.rstrip()] == []
    return lines


def squash(text: str) -> str:
    """A line with its runs of spaces (table padding) made single."""
    return " ".join(text.split())


def after(lines: list[str], first: str) -> list[str]:
    return lines[lines.index(first) :]


def mixed_run(run_dir: Path) -> Path:
    lines = [
        line("a.s0", metadata={"op": "add"}, workflow_ms=30.0, grader_ms=2.0),
        line("b.s0", reward=0.0, metadata={"op": "add"}, workflow_ms=5.0, grader_ms=None),
        line("c.s0", status="failure", metadata={"op": "mul"}),
        line("d.s0", status="failure", metadata={"op": "mul"}),
        line(
            "e.s0",
            status="timeout",
            error_category="timeout",
            error_message="workflow exceeded 5s",
            workflow_ms=5000.0,
            grader_ms=None,
        ),
        line("f.s0", status="ungraded", workflow_ms=None, grader_ms=None),
    ]
    return write_run(run_dir, lines, summary=finished(6))


# --- through the CLI -----------------------------------------------------------------------


def test_report_of_a_real_finished_run(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "qa.jsonl", qa_rows(6, metadata={"kind": "qa"}))
    assert cli("eval", str(data), *ECHO, "--out", "run").exit_code == 0

    result = cli("report", "run")

    assert result.exit_code == 0
    assert result.stderr == "osmosis-run: one rollout in full: osmosis-run show run q1.s0\n"
    lines = report_lines(result)
    assert lines[0] == "osmosis-run: finished run"
    assert lines[1].split() == ["rollouts", "6", "of", "6:", "6", "success"]
    assert "failures: 0 rollouts" not in lines
    assert after(lines, "slowest rollouts")[1].split() == [
        "rollout",
        "status",
        "total",
        "ms",
        "workflow",
        "ms",
        "grader",
        "ms",
        "reward",
    ]
    slowest = after(lines, "slowest rollouts")
    assert len(slowest[: slowest.index("")]) == 2 + 6
    assert [
        squash(text) for text in after(lines, "lowest rewards (below the pass threshold 1)")
    ] == [
        "lowest rewards (below the pass threshold 1)",
        "rollout reward label answer",
        "q1.s0 0.000 x p1",
        "q3.s0 0.000 x p3",
        "q5.s0 0.000 x p5",
    ]


def test_report_json_of_a_real_run_is_one_document_on_stdout(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "qa.jsonl", qa_rows(6))
    assert cli("eval", str(data), *ECHO, "--out", "run").exit_code == 0

    result = cli("report", "run", "--json")

    assert result.exit_code == 0
    assert result.stderr == ""
    document = json.loads(result.stdout)
    assert sorted(document) == ["failures", "lowest", "run_dir", "slowest", "state", "summary"]
    assert (document["run_dir"], document["state"], document["failures"]) == ("run", "finished", [])
    summary = Summary.model_validate(document["summary"])
    assert (summary.rollouts, summary.passed, summary.pass_rate) == (6, 3, 0.5)
    assert len(document["slowest"]) == 6
    assert document["lowest"] == [
        {"rollout_id": f"q{i}.s0", "reward": 0.0, "label": "x", "answer": f"p{i}"}
        for i in (1, 3, 5)
    ]


def test_failures_are_grouped_by_category_and_message(cli: Cli, tmp_path: Path) -> None:
    mixed_run(tmp_path / "run")

    result = cli("report", "run")

    assert result.exit_code == 0
    lines = report_lines(result)
    assert lines[0] == "osmosis-run: finished run"
    assert after(lines, "failures: 3 rollouts") == [
        "failures: 3 rollouts",
        "  agent_error: 2",
        "    2x boom",
        "       c.s0, d.s0",
        "  timeout: 1",
        "    1x workflow exceeded 5s",
        "       e.s0",
        "",
        "slowest rollouts",
        "rollout  status   total ms  workflow ms  grader ms  reward",
        "e.s0     timeout    5000.0       5000.0          -       -",
        "a.s0     success      32.0         30.0        2.0   1.000",
        "b.s0     success       5.0          5.0          -   0.000",
        "c.s0     failure       1.5          1.0        0.5       -",
        "d.s0     failure       1.5          1.0        0.5       -",
        "",
        "lowest rewards (below the pass threshold 1)",
        "rollout  reward  label  answer",
        "b.s0      0.000  -      -",
    ]
    assert result.stderr == "osmosis-run: one rollout in full: osmosis-run show run b.s0\n"


def test_top_limits_the_slowest_rollouts(cli: Cli, tmp_path: Path) -> None:
    mixed_run(tmp_path / "run")

    result = cli("report", "run", "--json", "--top", "2")

    slowest = json.loads(result.stdout)["slowest"]
    assert [(s["rollout_id"], s["total_ms"]) for s in slowest] == [("e.s0", 5000.0), ("a.s0", 32.0)]


def test_the_failure_list_is_capped(cli: Cli, tmp_path: Path) -> None:
    lines = [line(f"same{i}.s0", status="failure") for i in range(30)]
    lines += [line(f"u{i}.s0", status="failure", error_message=f"unique {i}") for i in range(14)]
    write_run(tmp_path / "run", lines, summary=finished(44))

    result = cli("report", "run")
    document = json.loads(cli("report", "run", "--json").stdout)

    assert result.exit_code == 0
    assert after(report_lines(result), "failures: 44 rollouts")[:11] == [
        "failures: 44 rollouts",
        "  agent_error: 44",
        "    30x boom",
        "       same0.s0, same1.s0, same2.s0, same3.s0, same4.s0 (+25 more)",
        "    1x unique 0",
        "       u0.s0",
        "    1x unique 1",
        "       u1.s0",
        "    1x unique 2",
        "       u2.s0",
        "    1x unique 3",
    ]
    assert "    ... and 5 other messages" in report_lines(result)
    [category] = document["failures"]
    assert (category["count"], len(category["groups"]), category["more_messages"]) == (44, 10, 5)
    assert category["groups"][0]["rollout_ids"] == [f"same{i}.s0" for i in range(10)]


def test_report_of_an_interrupted_run(cli: Cli, tmp_path: Path) -> None:
    lines = [line("a.s0"), line("b.s0", reward=0.5), line("c.s0", status="failure")]
    stored = Summary(rollouts=3, planned=10, interrupted=True, wall_s=1.0)
    write_run(tmp_path / "run", lines, summary=stored, torn_tail='{"rollout_id": "d.s0", "st')

    result = cli("report", "run")

    assert result.exit_code == 0
    lines_out = report_lines(result)
    assert lines_out[0] == "osmosis-run: interrupted run"
    assert squash(lines_out[1]) == "rollouts 3 of 10: 1 failure, 2 success"
    assert result.stderr == (
        "osmosis-run: the run was interrupted; re-run its eval command to resume it\n"
        "osmosis-run: one rollout in full: osmosis-run show run b.s0\n"
    )
    document = json.loads(cli("report", "run", "--json").stdout)
    assert document["state"] == "interrupted"
    summary = Summary.model_validate(document["summary"])
    assert (summary.rollouts, summary.planned, summary.interrupted, summary.complete) == (
        3,
        10,
        True,
        False,
    )
    assert summary.reward_all.mean == pytest.approx(0.5)


def test_report_of_a_run_still_going(cli: Cli, tmp_path: Path) -> None:
    write_run(tmp_path / "run", [line("a.s0")])

    result = cli("report", "run")

    assert result.exit_code == 0
    assert report_lines(result)[0] == "osmosis-run: incomplete run"
    assert result.stderr == (
        "osmosis-run: no summary.json yet: the run is still going, or was killed "
        "(re-run its eval command to resume it)\n"
    )
    assert json.loads(cli("report", "run", "--json").stdout)["state"] == "incomplete"


def test_group_by_breaks_the_summary_down(cli: Cli, tmp_path: Path) -> None:
    mixed_run(tmp_path / "run")

    result = cli("report", "run", "--group-by", "metadata.op")
    document = json.loads(cli("report", "run", "--group-by", "metadata.op", "--json").stdout)

    assert result.exit_code == 0
    groups = [squash(text) for text in report_lines(result) if text.startswith("metadata.")]
    assert groups == [
        "metadata.op=(none) 1 rollout mean 0.000 pass 0.0% errors 1",
        "metadata.op=add 2 rollouts mean 0.500 pass 50.0% errors 0",
        "metadata.op=mul 2 rollouts mean 0.000 pass 0.0% errors 2",
    ]
    assert document["summary"]["group_by"] == "metadata.op"
    assert document["summary"]["groups"]["add"] == {
        "rollouts": 2,
        "errors": 0,
        "mean_reward": 0.5,
        "pass_rate": 0.5,
    }


def test_pass_threshold_overrides_the_runs_own(cli: Cli, tmp_path: Path) -> None:
    write_run(tmp_path / "run", [line("a.s0", reward=0.6), line("b.s0", reward=0.4)])

    default = json.loads(cli("report", "run", "--json").stdout)["summary"]
    lowered = json.loads(cli("report", "run", "--json", "--pass-threshold", "0.5").stdout)[
        "summary"
    ]

    assert (default["pass_threshold"], default["pass_rate"]) == (1.0, 0.0)
    assert (lowered["pass_threshold"], lowered["pass_rate"]) == (0.5, 0.5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["missing"],
            "error: missing does not exist; give the directory `osmosis-run eval` printed",
        ),
        (
            ["empty"],
            "error: empty is not an osmosis-run run directory (no results.jsonl); "
            "give the directory `osmosis-run eval` printed",
        ),
        (["file.txt"], "error: file.txt is a file, not a run directory"),
        (["run", "--group-by", "op"], 'error: --group-by op: must look like "metadata.KEY"'),
        (
            ["run", "--pass-threshold", "nan"],
            "error: --pass-threshold nan: must be a finite number",
        ),
    ],
)
def test_unusable_input_is_a_one_line_usage_error(
    cli: Cli, tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    write_run(tmp_path / "run", [line("a.s0")])

    result = cli("report", *args)

    assert result.exit_code == 2
    assert result.stderr == message + "\n"
    assert result.stdout == ""


def test_a_corrupt_summary_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    write_run(tmp_path / "run", [line("a.s0")])
    (tmp_path / "run" / "summary.json").write_text('{"rollouts": "many"}')

    result = cli("report", "run")

    assert result.exit_code == 2
    assert result.stderr == (
        "error: run/summary.json: not a valid summary (1 errors); "
        "delete it and re-run the eval command to rewrite it\n"
    )


@pytest.mark.parametrize(
    ("written", "why"),
    [
        (b'samples = "\xff"\n', "'utf-8' codec can't decode byte 0xff in position 11"),
        (b"samples = \n", "Invalid value (at line 1, column 11)"),
    ],
    ids=["not-utf-8", "not-toml"],
)
def test_an_unreadable_run_toml_is_a_usage_error(
    cli: Cli, tmp_path: Path, written: bytes, why: str
) -> None:
    write_run(tmp_path / "run", [line("a.s0")])
    (tmp_path / "run" / "run.toml").write_bytes(written)

    result = cli("report", "run")

    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: run/run.toml: cannot read the run's configuration: {why}"
    )
    assert result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_report_writes_a_junit_file(cli: Cli, tmp_path: Path) -> None:
    mixed_run(tmp_path / "run")

    result = cli("report", "run", "--json", "--junit", "out/junit.xml")

    assert result.exit_code == 0
    assert result.stderr == "osmosis-run: wrote JUnit report out/junit.xml\n"
    suite = ET.parse(tmp_path / "out" / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    counts = {key: suite.get(key) for key in ("name", "tests", "failures", "errors", "skipped")}
    assert counts == {"name": "run", "tests": "6", "failures": "1", "errors": "3", "skipped": "1"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["junit.xml"]


def test_an_unwritable_junit_path_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    write_run(tmp_path / "run", [line("a.s0")])
    (tmp_path / "blocker").write_text("a file where a folder should be")

    result = cli("report", "run", "--junit", "blocker/junit.xml")

    assert result.exit_code == 2
    assert (result.stdout, result.stderr) == (
        "",
        "error: cannot write JUnit report blocker/junit.xml: File exists; choose another path\n",
    )


def test_report_writes_html(cli: Cli, tmp_path: Path) -> None:
    pytest.importorskip("osmosis_run.reports.html_report")
    mixed_run(tmp_path / "run")

    result = cli("report", "run", "--json", "--html", "report.html")

    assert result.exit_code == 0
    assert result.stderr == "osmosis-run: wrote HTML report report.html\n"
    assert (tmp_path / "report.html").stat().st_size > 0


def test_report_reads_the_run_once_for_html_and_junit(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_run.store.rundata import load_run, read_run_config

    mixed_run(tmp_path / "run")
    reads: list[Path] = []

    def counted(read: Any) -> Any:
        def load(run_dir: Path, **kw: Any) -> Any:
            reads.append(run_dir)
            return read(run_dir, **kw)

        return load

    monkeypatch.setattr("osmosis_run.reports.report.read_run_config", counted(read_run_config))
    monkeypatch.setattr("osmosis_run.reports.html_report.load_run", counted(load_run))

    result = cli("report", "run", "--json", "--html", "r.html", "--junit", "j.xml")

    assert result.exit_code == 0
    assert result.stderr == (
        "osmosis-run: wrote JUnit report j.xml\nosmosis-run: wrote HTML report r.html\n"
    )
    assert reads == [Path("run")]
    assert (tmp_path / "r.html").stat().st_size > 0
    assert (tmp_path / "j.xml").stat().st_size > 0


def test_report_help_documents_every_option(cli: Cli) -> None:
    result = cli("report", "--help")

    assert result.exit_code == 0
    for option in ("--json", "--pass-threshold", "--group-by", "--top", "--junit", "--html"):
        assert option in result.stdout


# --- the library -----------------------------------------------------------------------------


def test_open_run_errors_are_run_dir_and_config_errors(tmp_path: Path) -> None:
    with pytest.raises(RunDirError) as missing:
        open_run(tmp_path / "nope")
    with pytest.raises(ConfigError) as group_by:
        open_run(tmp_path, group_by="metadata.")

    assert str(missing.value) == (
        f"{tmp_path / 'nope'} does not exist; give the directory `osmosis-run eval` printed"
    )
    assert str(group_by.value) == '--group-by metadata.: must look like "metadata.KEY"'


def test_failure_categories_rank_categories_then_messages() -> None:
    lines = [
        line("a.s0", status="failure", error_category="validation_error", error_message="x"),
        line("b.s0", status="invalid", error_category="invalid_row", error_message="d:1: bad"),
        line("c.s0", status="failure", error_category="validation_error", error_message="y"),
        line("d.s0", status="failure", error_category="validation_error", error_message="y"),
        line("e.s0", status="timeout", error_category=None, error_message=None),
        line("f.s0"),
        line("g.s0", status="removed"),
    ]

    categories = failure_categories(lines, max_ids=1)

    assert categories == [
        FailureCategory(
            category="validation_error",
            count=3,
            groups=[
                FailureGroup(message="y", count=2, rollout_ids=["c.s0"]),
                FailureGroup(message="x", count=1, rollout_ids=["a.s0"]),
            ],
        ),
        FailureCategory(
            category="invalid_row",
            count=1,
            groups=[FailureGroup(message="d:1: bad", count=1, rollout_ids=["b.s0"])],
        ),
        FailureCategory(
            category="timeout",
            count=1,
            groups=[FailureGroup(message="", count=1, rollout_ids=["e.s0"])],
        ),
    ]


def test_slowest_rollouts_skip_untimed_ones() -> None:
    lines = [
        line("fast.s0", workflow_ms=1.0, grader_ms=1.0),
        line("slow.s0", workflow_ms=10.0, grader_ms=None),
        line("untimed.s0", status="invalid", workflow_ms=None, grader_ms=None),
    ]

    slowest = slowest_rollouts(lines, top=5)

    assert [(s.rollout_id, s.total_ms) for s in slowest] == [("slow.s0", 10.0), ("fast.s0", 2.0)]


def test_build_report_of_a_loaded_run(tmp_path: Path) -> None:
    run = open_run(mixed_run(tmp_path / "run"), group_by="metadata.op")

    document = build_report(run, slowest=1)
    data: dict[str, Any] = json.loads(document.model_dump_json())

    assert (document.state, document.summary.rollouts, document.summary.errors) == (
        "finished",
        6,
        3,
    )
    assert [s.rollout_id for s in document.slowest] == ["e.s0"]
    assert [c.category for c in document.failures] == ["agent_error", "timeout"]
    assert data["summary"]["groups"]["mul"]["errors"] == 2


def test_lowest_rewards_are_the_graded_rollouts_below_the_threshold(
    cli: Cli, tmp_path: Path
) -> None:
    lines = [
        line("a.s0", reward=0.9, label="A", messages=[{"role": "assistant", "content": "a"}]),
        line("b.s0", reward=0.2, label="B"),
        line("c.s0", reward=0.5),
        line("d.s0", status="failure"),  # listed with the failures, not here
        line("e.s0", reward=0.2),
    ]
    write_run(tmp_path / "run", lines, summary=finished(5))

    judged = cli("report", "run", "--json", "--lowest", "2", "--pass-threshold", "0.6")
    every = cli("report", "run", "--json")
    hidden = cli("report", "run", "--lowest", "0")

    assert [low["rollout_id"] for low in json.loads(judged.stdout)["lowest"]] == ["b.s0", "e.s0"]
    assert [(low["rollout_id"], low["answer"]) for low in json.loads(every.stdout)["lowest"]] == [
        ("b.s0", None),
        ("e.s0", None),
        ("c.s0", None),
        ("a.s0", "a"),
    ]
    assert not any(text.startswith("lowest rewards") for text in report_lines(hidden))
