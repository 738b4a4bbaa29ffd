"""`osmosis-run grade`: only the grader, over the samples a run recorded, into a new run.

The source run is made by a real `osmosis-run eval` of ``grade_flows:Answer``; every grade runs
with ``GRADE_FLOWS_NO_WORKFLOW`` set, so a workflow that ran would fail its rollout.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import results, subprocess_env, write_jsonl
from grade_flows import NO_WORKFLOW
from typer.testing import Result

from osmosis_run.results.records import ResultLine
from osmosis_run.store.rundata import load_run

Cli = Callable[..., Result]
EXE = [sys.executable, "-c", "from osmosis_run.cli import main; main()"]
ROWS = [
    {"id": "a", "prompt": "hi", "ground_truth": "hi!"},  # strict 1, lenient 1
    {"id": "b", "prompt": "yo", "ground_truth": "yo"},  # strict 0, lenient 1
    {"id": "c", "prompt": "no", "ground_truth": "x"},  # strict 0, lenient 0.25
    {"id": "d", "prompt": "x", "ground_truth": "x", "metadata": {"fail": True}},  # workflow fails
    {"id": "e", "prompt": "plain"},  # no label, no metadata: ungraded
    "{not json",  # invalid
]
SOURCE = ["-w", "grade_flows:Answer", "-g", "grade_flows:Strict", "--max-error-rate", "10"]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes), directories included as b""."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else b"")
        for p in sorted(folder.rglob("*"))
    }


def by_id(run_dir: Path) -> dict[str, ResultLine]:
    return {line.rollout_id: line for line in results(run_dir)}


@pytest.fixture
def source(cli: Cli, tmp_path: Path) -> Path:
    """A finished run: successes, a workflow failure, an ungraded and an invalid row."""
    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    made = cli("eval", str(data), *SOURCE, "--out", "src")
    assert made.exit_code == 0, made.stderr
    return tmp_path / "src"


@pytest.fixture
def no_workflow(source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on (the source run made), a workflow that runs fails its rollout."""
    monkeypatch.setenv(NO_WORKFLOW, "1")


def stderr_lines(result: Result) -> list[str]:
    return [text.rstrip() for text in result.stderr.splitlines()]


@pytest.mark.usefixtures("no_workflow")
def test_only_the_grader_runs_and_only_rewards_change(cli: Cli, source: Path) -> None:
    before = by_id(source)

    result = cli(
        "grade", "src", "-g", "grade_flows:Lenient", "--out", "new", "--max-error-rate", "2"
    )

    assert result.exit_code == 0, result.stderr
    lines = stderr_lines(result)
    assert lines[:2] == [
        "osmosis-run: grading the samples recorded in src with grade_flows:Lenient "
        "(the workflow does not run)",
        "osmosis-run: 6 rollouts -> new",
    ]
    assert lines[-2:] == [
        "ok: error budget: held (2 of 6 rollouts failed, 33.33%; 2 allowed)",
        "osmosis-run: see what changed: osmosis-run compare src new",
    ]
    after = by_id(source.parent / "new")
    assert sorted(after) == sorted(before)  # the same rollouts
    assert {i: (line.status, line.reward) for i, line in after.items()} == {
        "a.s0": ("success", 1.0),
        "b.s0": ("success", 1.0),
        "c.s0": ("success", 0.25),
        "d.s0": ("failure", None),
        "e.s0": ("ungraded", None),
        "row@5.s0": ("invalid", None),
    }
    assert [before[i].reward for i in ("a.s0", "b.s0", "c.s0")] == [1.0, 0.0, 0.0]
    for rollout_id in ("d.s0", "row@5.s0"):  # failures stay exactly what they were
        old, new = before[rollout_id], after[rollout_id]
        assert (new.status, new.error_category, new.error_message, new.line) == (
            old.status,
            old.error_category,
            old.error_message,
            old.line,
        )
    assert after["d.s0"].error_message == "the tool is down"
    for rollout_id, line in after.items():  # the samples and their rows are the source's
        old = before[rollout_id]
        assert (line.messages, line.label, line.metadata, line.seed, line.row_id) == (
            old.messages,
            old.label,
            old.metadata,
            old.seed,
            old.row_id,
        )
        assert line.workflow_ms == old.workflow_ms


@pytest.mark.usefixtures("no_workflow")
def test_the_grader_sees_the_artifacts_and_the_source_stays_byte_identical(
    cli: Cli, source: Path
) -> None:
    before = snapshot(source)

    result = cli(
        "grade", "src", "-g", "grade_flows:Lenient", "--out", "new", "--max-error-rate", "2"
    )

    assert result.exit_code == 0, result.stderr
    assert snapshot(source) == before
    artifacts = source.parent / "new/rollouts/a.s0/artifacts"
    assert sorted(p.name for p in artifacts.iterdir()) == ["answer.txt", "graded.txt"]
    assert (artifacts / "answer.txt").read_text() == "hi!"
    assert not (source / "rollouts/a.s0/artifacts/graded.txt").exists()
    document = json.loads((source.parent / "new/rollouts/a.s0/result.json").read_text())
    assert document["request"]["prompt"] == [{"role": "user", "content": "hi"}]
    assert document["reward"] == 1.0


@pytest.mark.usefixtures("no_workflow")
def test_the_new_run_records_its_provenance(cli: Cli, source: Path) -> None:
    cli("grade", "src", "-g", "grade_flows:Lenient", "--out", "new", "--max-error-rate", "2")

    fingerprint = json.loads((source.parent / "new/fingerprint.json").read_text())
    assert fingerprint["graded_from"] == str(source.resolve())
    assert fingerprint["grader"] == "grade_flows:Lenient"
    assert fingerprint["source_fingerprint"] == json.loads(
        (source / "fingerprint.json").read_text()
    )
    run = load_run(source.parent / "new")
    assert (run.graded_from, run.grader) == (source.resolve(), "grade_flows:Lenient")
    assert run.config["workflow"] == "grade_flows:Answer"  # the source's inputs, for the record
    assert run.summary.complete is True


@pytest.mark.usefixtures("no_workflow")
def test_compare_on_the_pair_reports_the_grader_change(cli: Cli, source: Path) -> None:
    cli("grade", "src", "-g", "grade_flows:Lenient", "--out", "new", "--max-error-rate", "2")

    result = cli("compare", "src", "new")

    assert (result.exit_code, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[1:] == [
        "                 A      B   B - A            95% CI",
        "mean reward  0.200  0.450  +0.250  [+0.000, +0.650]",
        "pass rate    20.0%  40.0%  +20.0%   [+0.0%, +60.0%]",
        "paired: 5 rollouts over 5 rows; unpaired: 0 only in A, 0 only in B; unscored: 1",
        "fail -> pass (1): b.s0",
        "note: B grades A's samples again: grader grade_flows:Strict -> grade_flows:Lenient; "
        "B's reward is higher on 2 rollouts, lower on 0, the same on 3; every difference is "
        "the grader's (the workflow did not run again)",
    ]


@pytest.mark.usefixtures("no_workflow")
def test_the_default_out_is_beside_the_source_and_a_rerun_resumes_it(
    cli: Cli, source: Path
) -> None:
    first = cli("grade", "src", "-g", "grade_flows:Lenient", "--max-error-rate", "2")

    assert first.exit_code == 0, first.stderr
    made = [p.name for p in source.parent.iterdir() if p.name.startswith("src-grade-")]
    assert len(made) == 1
    assert f"osmosis-run: 6 rollouts -> {made[0]}" in stderr_lines(first)
    finished = (source.parent / made[0] / "results.jsonl").read_bytes()

    again = cli("grade", "src", "-g", "grade_flows:Lenient", "--max-error-rate", "2")

    assert again.exit_code == 0, again.stderr
    assert (
        f"osmosis-run: 6 rollouts, 6 already done (2 of them failed and are kept as they are; "
        f"--retry-failed runs them again) -> {made[0]}"
    ) in stderr_lines(again)
    assert (source.parent / made[0] / "results.jsonl").read_bytes() == finished


@pytest.mark.usefixtures("no_workflow")
def test_another_grader_on_the_same_out_is_refused(cli: Cli, source: Path) -> None:
    cli("grade", "src", "-g", "grade_flows:Lenient", "--out", "new", "--max-error-rate", "2")

    result = cli("grade", "src", "-g", "grade_flows:Strict", "--out", "new")

    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == (
        "error: new holds a run made with other inputs (changed: grader); add --fresh to start "
        "it over, or choose another --out"
    )


@pytest.mark.usefixtures("no_workflow")
def test_grader_timeout_config_concurrency_and_gates(cli: Cli, source: Path) -> None:
    timed = cli(
        "grade", "src", "-g", "grade_flows:Stuck", "--grader-timeout", "0.2", "--out", "t",
        "--max-error-rate", "10", "-c", "unlimited",
    )  # fmt: skip
    assert timed.exit_code == 0, timed.stderr
    statuses = {
        i: (line.status, line.error_category) for i, line in by_id(source.parent / "t").items()
    }
    assert statuses == {
        "a.s0": ("timeout", "timeout"),
        "b.s0": ("timeout", "timeout"),
        "c.s0": ("timeout", "timeout"),
        "d.s0": ("failure", "validation_error"),  # the workflow's failure, not a grader timeout
        "e.s0": ("ungraded", None),
        "row@5.s0": ("invalid", "invalid_row"),
    }

    scaled = cli(
        "grade", "src", "-g", "grade_flows:Scaled", "--grader-config", "grade_flows:tenth",
        "--out", "s", "-c", "1", "--max-error-rate", "10", "--fail-under", "mean_graded=0.5",
        "--junit", "s.xml",
    )  # fmt: skip
    assert scaled.exit_code == 1, scaled.stderr
    rewards = {i: line.reward for i, line in by_id(source.parent / "s").items() if line.reward}
    assert rewards == pytest.approx({"a.s0": 0.3, "b.s0": 0.2, "c.s0": 0.1})
    assert "FAILED: mean_graded >= 0.5: failed by 0.3000 (0.2000)" in stderr_lines(scaled)
    assert (source.parent / "s.xml").is_file()


@pytest.mark.usefixtures("no_workflow")
def test_retry_failed_grades_the_grader_failures_again(
    cli: Cli, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["grade", "src", "-g", "grade_flows:Lenient", "--out", "new", "--max-error-rate", "9"]
    monkeypatch.setenv("GRADE_FLOWS_BROKEN", "1")
    assert cli(*args).exit_code == 0
    broken = by_id(source.parent / "new")
    assert broken["a.s0"].error_message == "the judge is down"
    monkeypatch.delenv("GRADE_FLOWS_BROKEN")

    kept = cli(*args)
    assert "(5 of them failed and are kept as they are" in kept.stderr
    retried = cli(*args, "--retry-failed")

    assert retried.exit_code == 0, retried.stderr
    assert "osmosis-run: 6 rollouts, 1 already done -> new" in stderr_lines(retried)
    assert {i: line.status for i, line in by_id(source.parent / "new").items()} == {
        "a.s0": "success",
        "b.s0": "success",
        "c.s0": "success",
        "d.s0": "failure",
        "e.s0": "ungraded",
        "row@5.s0": "invalid",
    }


@pytest.mark.usefixtures("no_workflow")
def test_jsonl_streams_the_new_results(cli: Cli, source: Path) -> None:
    result = cli("grade", "src", "-g", "grade_flows:Lenient", "--out", "new", "--jsonl",
                 "--max-error-rate", "2")  # fmt: skip

    assert result.exit_code == 0
    streamed = [json.loads(text) for text in result.stdout.splitlines()]
    assert [line["rollout_id"] for line in streamed] == list(by_id(source.parent / "new"))


def test_bad_input_is_one_line_and_exit_2(cli: Cli, source: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    cases = [
        (("grade", "nowhere", "-g", "grade_flows:Lenient"),
         "error: nowhere does not exist; give the directory `osmosis-run eval` printed"),
        (("grade", "empty", "-g", "grade_flows:Lenient"),
         "error: empty is not an osmosis-run run directory (no results.jsonl); give the "
         "directory `osmosis-run eval` printed"),
        (("grade", "src"), "error: no grader: give --grader module:Class"),
        (("grade", "src", "-g", "grade_flows:Nope"),
         'error: cannot import "grade_flows:Nope": "grade_flows" has no attribute "Nope"'),
        (("grade", "src", "-g", "grade_flows:Lenient", "--out", "src/again"),
         "error: --out src/again is inside the source run src, which a grade never changes; "
         "choose another --out"),
        (("grade", "src", "-g", "grade_flows:Lenient", "--grader-timeout", "0"),
         "error: --grader-timeout (command line): Input should be greater than 0 (got 0.0)"),
    ]  # fmt: skip
    before = snapshot(source)
    for args, message in cases:
        result = cli(*args)
        assert (result.exit_code, result.stderr.splitlines()[-1]) == (2, message), args
    assert snapshot(source) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl", "empty", "src"]


def grade_args(out: str) -> list[str]:
    return ["grade", "src", "-g", "grade_flows:SlowLenient", "--out", out, "-c", "1",
            "--max-error-rate", "10"]  # fmt: skip


@pytest.mark.slow
def test_an_interrupted_grade_resumes_exactly(cli: Cli, tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "prompt": f"p{i}", "ground_truth": f"p{i}" if i % 3 else "no"}
            for i in range(12)]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    assert cli("eval", str(data), *SOURCE, "--out", "src", "-n", "2").exit_code == 0
    env = subprocess_env(**{NO_WORKFLOW: "1", "GRADE_FLOWS_DELAY": "0.1"})
    source = snapshot(tmp_path / "src")
    whole = subprocess.run([*EXE, *grade_args("whole")], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert whole.returncode == 0, whole.stderr

    proc = subprocess.Popen([*EXE, *grade_args("new")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_for_lines(tmp_path / "new/results.jsonl", 5, proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130, stderr
    assert "osmosis-run: interrupted; resume with: osmosis-run grade src -g " in stderr
    done_before = len(results(tmp_path / "new"))
    assert 5 <= done_before < 24

    resumed = subprocess.run([*EXE, *grade_args("new")], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip

    assert resumed.returncode == 0, resumed.stderr
    assert f"osmosis-run: 24 rollouts, {done_before} already done -> new" in resumed.stderr
    new = results(tmp_path / "new")
    assert sorted(line.rollout_id for line in new) == sorted(by_id(tmp_path / "whole"))
    assert len(new) == 24, "a rollout was graded twice"
    assert {line.rollout_id: (line.status, line.reward) for line in new} == {
        i: (line.status, line.reward) for i, line in by_id(tmp_path / "whole").items()
    }
    assert snapshot(tmp_path / "src") == source


def wait_for_lines(path: Path, count: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= count:
            return
        if proc.poll() is not None:
            raise AssertionError(f"exited early ({proc.returncode})")
        time.sleep(0.02)
    raise AssertionError(f"{path} never reached {count} lines")
