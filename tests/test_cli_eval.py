"""`osmosis-run eval` through the real CLI: row shapes, bad rows, ids, selection, deadlines,
retries, resume, exit codes and the files left behind."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import qa_rows, results, write_jsonl
from typer.testing import Result

from osmosis_run.results.records import Summary
from osmosis_run.run.atif_models import validate_trajectory

Cli = Callable[..., Result]
ECHO = ["--workflow", "eval_flows:Echo", "--grader", "eval_flows:ExactMatch"]


def run_dir_of(tmp_path: Path) -> Path:
    return tmp_path / "run"


def eval_(cli: Cli, dataset: Path | str, *args: str, out: Path | None = None) -> Result:
    target = out or Path("run")
    return cli("eval", str(dataset), *ECHO, "--out", str(target), *args)


def test_row_shapes_become_prompts_labels_and_metadata(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "shapes.jsonl",
        [
            {"id": "m", "messages": [{"role": "user", "content": "a"}], "label": "a"},
            {"id": "pl", "prompt": [{"role": "user", "content": "b"}], "ground_truth": "b"},
            {"id": "ps", "prompt": "c", "ground_truth": "c"},
            {"id": "su", "system_prompt": "be brief", "user_prompt": "7", "ground_truth": 7},
            "",
            {"id": 5, "prompt": "e", "metadata": {"k": "v"}},
        ],
    )
    result = eval_(cli, data)
    assert result.exit_code == 0, result.stderr
    lines = {line.row_id: line for line in results(tmp_path / "run")}
    assert [lines[k].status for k in ("m", "pl", "ps", "su", 5)] == ["success"] * 5
    assert lines["su"].messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "7"},
        {"role": "assistant", "content": "7"},
    ]
    assert lines["su"].label == "7"
    assert lines["su"].reward == 1.0
    assert lines[5].metadata == {"k": "v"}
    assert (lines[5].line, lines[5].row_index, lines[5].rollout_id) == (6, 4, "5.s0")
    assert lines["ps"].messages == [
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "c"},
    ]


def test_a_row_without_label_or_metadata_is_ungraded_not_failed(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a"}])
    result = eval_(cli, data)
    assert result.exit_code == 0
    [line] = results(tmp_path / "run")
    assert (line.status, line.reward, line.passed, line.rollout_id) == (
        "ungraded",
        None,
        None,
        "row@0.s0",
    )


def test_invalid_rows_are_results_with_file_and_line(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "bad.jsonl",
        [
            {"id": "ok", "prompt": "a", "label": "a"},
            '{"id": "broken", "prompt": ',
            "[1, 2]",
            {"id": "noprompt", "label": "x"},
            {"id": "types", "user_prompt": ["not", "a", "string"]},
            {"id": "ok", "prompt": "again"},
            {"prompt": "m", "metadata": "not an object"},
            {"id": 1.5, "prompt": "x"},
        ],
    )
    result = eval_(cli, data)
    assert result.exit_code == 3
    lines = results(tmp_path / "run")
    invalid = [
        (line.line, line.rollout_id, line.error_message)
        for line in lines
        if line.status == "invalid"
    ]
    name = str(data)
    assert invalid == [
        (2, "row@1.s0", f"{name}:2: invalid JSON: Expecting value (column 27)"),
        (3, "row@2.s0", f"{name}:3: a row must be a JSON object (got array)"),
        (4, "noprompt.s0", f'{name}:4: no prompt: give "messages", "prompt", or "user_prompt"'),
        (5, "types.s0", f'{name}:5: "user_prompt" must be a string (got array)'),
        (6, "row@5.s0", f'{name}:6: duplicate id "ok" (first on line 1)'),
        (7, "row@6.s0", f'{name}:7: "metadata" must be an object (got string)'),
        (8, "row@7.s0", f'{name}:8: "id" must be a string or an integer (got number)'),
    ]
    bad = [line for line in lines if line.row_id != "ok"]
    assert {(line.status, line.error_category, line.passed) for line in bad} == {
        ("invalid", "invalid_row", False)
    }
    assert (
        "FAILED: error budget: exceeded (7 of 8 rollouts failed, 87.50%; 0 allowed)"
        in result.stderr
    )
    doc = json.loads((tmp_path / "run/rollouts/row@1.s0/result.json").read_text())
    assert doc["status"] == "invalid"
    assert doc["error"]["message"] == f"{name}:2: invalid JSON: Expecting value (column 27)"


@pytest.mark.parametrize(
    "row_id",
    ["../../x", "a/b", "..", ".", "/etc/passwd", "a\\b", "nul\x00byte", "x" * 500, "~", "@", ""],
)
def test_row_ids_never_escape_the_run_directory(cli: Cli, tmp_path: Path, row_id: str) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": row_id, "prompt": "p", "label": "p"}])
    (tmp_path / "outside").mkdir()
    result = eval_(cli, data, out=tmp_path / "outside" / "run")
    assert result.exit_code in (0, 3)
    [line] = results(tmp_path / "outside" / "run")
    rollout_dir = tmp_path / "outside/run/rollouts" / line.rollout_id
    assert rollout_dir.parent == tmp_path / "outside/run/rollouts"
    assert rollout_dir.is_dir()
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == ["run"]
    assert len(line.rollout_id) < 100
    assert "/" not in line.rollout_id
    assert line.rollout_id not in (".", "..")


def test_different_ids_never_share_a_rollout_id(cli: Cli, tmp_path: Path) -> None:
    ids = ["a/b", "a_b", "a\\b", "a b", "row@1", "1", "row@0", "a" * 300, "a" * 301, "ä"]
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": i, "prompt": "p", "label": "p"} for i in ids])
    rows_without_id = [{"prompt": "p", "label": "p"}] * 2
    write_jsonl(data, [*[{"id": i, "prompt": "p", "label": "p"} for i in ids], *rows_without_id])
    assert eval_(cli, data, "-n", "2").exit_code == 0
    rollout_ids = [line.rollout_id for line in results(tmp_path / "run")]
    assert len(rollout_ids) == len(set(rollout_ids)) == 24


def test_samples_run_each_row_n_times_with_pass_at_k(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(4))
    assert eval_(cli, data, "-n", "4").exit_code == 0
    lines = results(tmp_path / "run")
    assert sorted(line.rollout_id for line in lines if line.row_id == "q0") == [
        "q0.s0",
        "q0.s1",
        "q0.s2",
        "q0.s3",
    ]
    summary = Summary.model_validate_json((tmp_path / "run/summary.json").read_text())
    assert summary.rollouts == 16
    assert [(p.k, p.value) for p in summary.pass_at_k] == [(1, 0.5), (2, 0.5), (4, 0.5)]
    assert summary.pass_rate == 0.5


def rollout_rows(run: Path) -> list[str | int | None]:
    return [line.row_id for line in results(run)]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--limit", "3"], ["q0", "q1", "q2"]),
        (["--offset", "7"], ["q7", "q8", "q9"]),
        (["--offset", "2", "--limit", "2"], ["q2", "q3"]),
        (["--rows", "1,4-5"], ["q1", "q4", "q5"]),
        (["--ids", "q3,q9"], ["q3", "q9"]),
    ],
)
def test_selection_flags(cli: Cli, tmp_path: Path, args: list[str], expected: list[str]) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(10))
    result = eval_(cli, data, "--concurrency", "1", *args)
    assert result.exit_code == 0, result.stderr
    assert rollout_rows(tmp_path / "run") == expected


def test_shuffle_is_reproducible_and_seeded(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(20))

    def order(seed: str, out: str) -> list[str | int | None]:
        result = eval_(
            cli, data, "--shuffle", "--seed", seed, "-c", "1", "--limit", "8", out=Path(out)
        )
        assert result.exit_code == 0
        return rollout_rows(tmp_path / out)

    first, again, other = order("1", "a"), order("1", "b"), order("2", "c")
    assert first == again
    assert first != other
    assert first != sorted(first, key=lambda r: int(str(r)[1:]))
    assert len(set(first)) == 8


def test_shards_cover_every_row_exactly_once(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(30))
    seen: list[str | int | None] = []
    for i in range(3):
        assert eval_(cli, data, "--shard", f"{i}/3", out=Path(f"s{i}")).exit_code == 0
        part = rollout_rows(tmp_path / f"s{i}")
        assert part, "a shard of 30 rows should not be empty"
        seen += part
    assert sorted(seen, key=str) == sorted((f"q{i}" for i in range(30)), key=str)


def test_bad_selection_options_are_usage_errors(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    result = eval_(cli, data, "--shard", "3/3")
    assert result.exit_code == 2
    assert result.stderr == 'error: --shard "3/3": need 0 <= I < N, for example 0/4\n'
    result = eval_(cli, data, "--rows", "a-b")
    assert result.stderr == 'error: --rows "a-b": expected indices and ranges like "3,7,10-20"\n'
    assert not (tmp_path / "run").exists()


def test_a_workflow_past_its_deadline_is_a_timeout(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    result = cli(
        "eval", str(data), "-w", "eval_flows:Forever", "--agent-timeout", "0.2", "--out", "run"
    )
    assert result.exit_code == 3
    lines = results(tmp_path / "run")
    assert [(x.status, x.error_category, x.error_message) for x in lines] == [
        ("timeout", "timeout", "workflow exceeded its 0.2s deadline")
    ] * 2
    assert all(x.workflow_ms is not None and 190 <= x.workflow_ms < 1000 for x in lines)


def test_a_grader_past_its_deadline_is_a_timeout(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(1))
    result = cli(
        "eval", str(data), "-w", "eval_flows:Echo", "-g", "eval_flows:SlowGrader",
        "--grader-timeout", "0.1", "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 3
    [line] = results(tmp_path / "run")
    assert (line.status, line.error_message, line.reward) == (
        "timeout",
        "grader exceeded its 0.1s deadline",
        None,
    )
    assert line.messages is not None  # the workflow's sample is kept


def test_queue_time_does_not_count_against_the_deadline(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(3, metadata={"sleep": 0.3}))
    result = cli(
        "eval", str(data), "-w", "eval_flows:Sleepy", "-g", "eval_flows:ExactMatch",
        "--concurrency", "1", "--agent-timeout", "0.5", "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert [line.status for line in results(tmp_path / "run")] == ["success"] * 3


def test_transient_failures_are_retried_and_counted(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    result = cli("eval", str(data), "-w", "eval_flows:Flaky", "--retries", "2", "--out", "run")
    assert result.exit_code == 0, result.stderr
    lines = results(tmp_path / "run")
    assert [(line.status, line.attempts) for line in lines] == [("ungraded", 2)] * 2
    doc = json.loads((tmp_path / "run/rollouts/q0.s0/result.json").read_text())
    assert doc["previous_attempts"][0]["error_message"] == "upstream hiccup"
    assert doc["previous_attempts"][0]["error_category"] == "agent_error"


def test_validation_errors_are_not_retried(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(1))
    result = cli("eval", str(data), "-w", "eval_flows:Invalid", "--retries", "3", "--out", "run")
    assert result.exit_code == 3
    [line] = results(tmp_path / "run")
    assert (line.status, line.error_category, line.error_message, line.attempts) == (
        "failure",
        "validation_error",
        "bad output",
        1,
    )
    doc = json.loads((tmp_path / "run/rollouts/q0.s0/result.json").read_text())
    assert 'raise ValueError("bad output")' in doc["error"]["traceback"]


def test_removed_samples_have_no_reward(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(1))
    result = cli(
        "eval", str(data), "-w", "eval_flows:Echo", "-g", "eval_flows:Remover", "--out", "run"
    )
    assert result.exit_code == 0
    [line] = results(tmp_path / "run")
    assert (line.status, line.reward, line.passed) == ("removed", None, None)


def test_run_directory_layout_and_atif_trajectories(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(3))
    assert eval_(cli, data, "--max-error-rate", "1").exit_code == 0
    run = tmp_path / "run"
    assert sorted(p.name for p in run.iterdir()) == [
        "fingerprint.json",
        "invocation.json",
        "results.jsonl",
        "rollouts",
        "run.toml",
        "summary.json",
    ]
    for rollout in ("q0.s0", "q1.s0", "q2.s0"):
        where = run / "rollouts" / rollout
        assert sorted(p.name for p in where.iterdir()) == [
            "artifacts",
            "result.json",
            "trajectory.json",
        ]
        assert (where / "artifacts/echo.txt").read_text() == f"p{rollout[1]}"
        trajectory = validate_trajectory(json.loads((where / "trajectory.json").read_text()))
        assert trajectory.session_id == rollout
        assert [step.source for step in trajectory.steps] == ["user", "agent"]
    line = results(run)[0]
    assert set(line.model_dump()) >= {
        "rollout_id", "row_index", "row_id", "line", "sample_index", "status", "error_category",
        "error_message", "reward", "passed", "attempts", "workflow_ms", "grader_ms", "metrics",
        "messages",
    }  # fmt: skip


def test_no_messages_leaves_transcripts_out(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(1))
    assert eval_(cli, data, "--no-messages").exit_code == 0
    raw = json.loads((tmp_path / "run/results.jsonl").read_text())
    assert raw["messages"] is None


def test_rerunning_resumes_and_skips_finished_rollouts(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(4))
    assert eval_(cli, data, "--limit", "2", "--max-error-rate", "1", out=Path("r")).exit_code == 0
    # Same inputs but a bigger limit is another selection: a new fingerprint, refused.
    refused = eval_(cli, data, "--max-error-rate", "1", out=Path("r"))
    assert refused.exit_code == 2
    assert refused.stderr == (
        "error: r holds a run made with other inputs (changed: selection); "
        "add --fresh to start it over, or choose another --out\n"
    )
    again = eval_(cli, data, "--limit", "2", "--max-error-rate", "1", out=Path("r"))
    assert again.exit_code == 0
    assert "2 rollouts, 2 already done" in again.stderr
    assert len(results(tmp_path / "r")) == 2


def test_a_complete_run_resumed_keeps_its_summary_without_rereading(
    cli: Cli, tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(4))
    assert eval_(cli, data, "--max-error-rate", "1", out=Path("r")).exit_code == 0
    first = Summary.model_validate_json((tmp_path / "r/summary.json").read_bytes())
    assert first.wall_s is not None
    assert first.wall_s > 0
    files = ("summary.json", "run.toml", "results.jsonl", "fingerprint.json")
    written = {name: os.stat(tmp_path / "r" / name).st_mtime_ns for name in files}
    again = eval_(cli, data, "--max-error-rate", "1", out=Path("r"))
    assert again.exit_code == 0
    assert "4 rollouts, 4 already done" in again.stderr
    kept = Summary.model_validate_json((tmp_path / "r/summary.json").read_bytes())
    assert kept == first  # the first run's wall and throughput, not a no-op's
    assert {name: os.stat(tmp_path / "r" / name).st_mtime_ns for name in files} == written
    # Another threshold changes what "passed" means: the results are read again.
    lower = eval_(cli, data, "--max-error-rate", "1", "--pass-threshold", "0", out=Path("r"))
    assert lower.exit_code == 0
    recounted = Summary.model_validate_json((tmp_path / "r/summary.json").read_bytes())
    assert (first.passed, recounted.passed) == (2, 4)


def test_a_results_file_changed_after_its_summary_is_read_again(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(4))
    assert eval_(cli, data, "--max-error-rate", "1", out=Path("r")).exit_code == 0
    path = tmp_path / "r/results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]))  # one result lost, by hand, after the summary
    summary = os.stat(tmp_path / "r/summary.json")
    os.utime(path, ns=(summary.st_atime_ns, summary.st_mtime_ns + 1))
    again = eval_(cli, data, "--max-error-rate", "1", out=Path("r"))
    assert again.exit_code == 0
    assert "4 rollouts, 3 already done" in again.stderr
    assert len(results(tmp_path / "r")) == 4


def test_a_run_directory_being_written_is_refused(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    from osmosis_run.store import store

    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    assert eval_(cli, data, "--max-error-rate", "1", out=Path("r")).exit_code == 0
    monkeypatch.setattr(store, "LOCK_WAIT_S", 0.1)
    held = os.open(tmp_path / "r", os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # another osmosis-run, as far as the lock tells
        refused = eval_(cli, data, "--max-error-rate", "1", out=Path("r"))
    finally:
        os.close(held)
    assert refused.exit_code == 2
    assert refused.stderr == (
        "error: r is being written by another osmosis-run; wait for it to finish "
        "or choose another --out\n"
    )
    assert len(results(tmp_path / "r")) == 2


def test_default_run_directory_is_found_again(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    first = cli("eval", str(data), *ECHO, "--max-error-rate", "1")
    second = cli("eval", str(data), *ECHO, "--max-error-rate", "1")
    assert first.exit_code == second.exit_code == 0
    [run] = list((tmp_path / "runs").iterdir())
    assert run.name.startswith("d-")
    assert len(results(run)) == 2
    write_jsonl(data, qa_rows(3))  # a changed dataset is another run
    assert cli("eval", str(data), *ECHO, "--max-error-rate", "1").exit_code == 0
    assert len(list((tmp_path / "runs").iterdir())) == 2


def test_changed_dataset_is_refused_then_fresh_starts_over(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    assert eval_(cli, data, "--max-error-rate", "1").exit_code == 0
    write_jsonl(data, qa_rows(3))
    refused = eval_(cli, data, "--max-error-rate", "1")
    assert refused.exit_code == 2
    assert refused.stderr == (
        "error: run holds a run made with other inputs (changed: dataset); "
        "add --fresh to start it over, or choose another --out\n"
    )
    assert len(results(tmp_path / "run")) == 2
    fresh = eval_(cli, data, "--max-error-rate", "1", "--fresh")
    assert fresh.exit_code == 0
    assert len(results(tmp_path / "run")) == 3


def test_out_must_not_be_someone_elses_directory(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(1))
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious/notes.txt").write_text("keep me")
    result = eval_(cli, data, "--fresh", out=Path("precious"))
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --out precious is not empty and is not an osmosis-run run directory; "
        "choose another --out\n"
    )
    assert (tmp_path / "precious/notes.txt").read_text() == "keep me"


def test_retry_failed_runs_failures_again(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    assert cli("eval", str(data), "-w", "eval_flows:Flaky", "--out", "run").exit_code == 3
    assert [line.status for line in results(tmp_path / "run")] == ["failure", "failure"]
    again = cli("eval", str(data), "-w", "eval_flows:Flaky", "--out", "run")
    assert again.exit_code == 3  # plain resume: failures are finished rollouts
    retried = cli("eval", str(data), "-w", "eval_flows:Flaky", "--out", "run", "--retry-failed")
    assert retried.exit_code == 0, retried.stderr
    lines = results(tmp_path / "run")
    assert sorted((line.rollout_id, line.status) for line in lines) == [
        ("q0.s0", "ungraded"),
        ("q1.s0", "ungraded"),
    ]


def test_a_torn_last_line_is_ignored_on_resume(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(3))
    assert eval_(cli, data, "--max-error-rate", "1").exit_code == 0
    path = tmp_path / "run/results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2]) + lines[2][:25])  # killed while writing the third
    assert eval_(cli, data, "--max-error-rate", "1").exit_code == 0
    after = results(tmp_path / "run")
    assert sorted(line.rollout_id for line in after) == ["q0.s0", "q1.s0", "q2.s0"]
    assert path.read_text().count("\n") == 3


@pytest.mark.parametrize(
    ("args", "code", "verdict"),
    [
        ([], 3, "FAILED: error budget: exceeded (2 of 4 rollouts failed, 50.00%; 0 allowed)"),
        (["--max-error-rate", "2"], 0, "ok: error budget: held (2 of 4 rollouts failed, 50.00%; 2 allowed)"),
        (["--max-error-rate", "0.25"], 3, "FAILED: error budget: exceeded (2 of 4 rollouts failed, 50.00%; 25.00% allowed)"),
        (["--max-error-rate", "50%", "--fail-under", "mean_graded=0.9"], 1, "FAILED: mean_graded >= 0.9: failed by 0.4000 (0.5000)"),
        (["--max-error-rate", "50%", "--fail-under", "mean_graded=0.5"], 0, "ok: mean_graded >= 0.5: held (0.5000)"),
        (["--max-error-rate", "50%", "--fail-under", "pass_rate=0.3"], 1, "FAILED: pass_rate >= 0.3: failed by 0.0500 (0.2500)"),
    ],
)  # fmt: skip
def test_exit_codes_and_verdicts(
    cli: Cli, tmp_path: Path, args: list[str], code: int, verdict: str
) -> None:
    rows = [*qa_rows(2), "not json", {"id": "np"}]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    result = eval_(cli, data, *args)
    assert result.exit_code == code
    assert verdict in result.stderr.splitlines()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.jsonl", "-w", "eval_flows:Echo"], "error: dataset missing.jsonl does not exist; check the path"),
        (["DATA", "-w", "eval_flows"], 'error: invalid import path "eval_flows": expected "module:attr", for example "my_rollout:MyWorkflow"'),
        (["DATA", "-w", "nosuch_mod:W"], 'error: cannot import "nosuch_mod:W": no module named "nosuch_mod"; check the spelling, install the package, or run from the folder that holds it'),
        (["DATA", "-w", "eval_flows:Ech"], 'error: cannot import "eval_flows:Ech": "eval_flows" has no attribute "Ech"; did you mean "Echo"?'),
        (["DATA", "-w", "eval_flows:ExactMatch"], 'error: --workflow "eval_flows:ExactMatch" is the class ExactMatch, expected a subclass of AgentWorkflow'),
        (["DATA", "-w", "eval_flows:Echo", "-g", "eval_flows:Echo"], 'error: --grader "eval_flows:Echo" is the class Echo, expected a subclass of Grader'),
        (["DATA", "-w", "eval_flows:Echo", "--workflow-config", "eval_flows:Echo"], 'error: --workflow-config "eval_flows:Echo" is the class Echo, expected an instance of AgentWorkflowConfig; instantiate it in your module'),
        (["DATA", "-w", "eval_flows:Echo", "-c", "many"], """error: --concurrency (command line): must be a whole number of rollouts (1 or more), or 0 or "unlimited" for no limit (got 'many')"""),
        (["DATA", "-w", "eval_flows:Echo", "--agent-timeout", "0"], "error: --agent-timeout (command line): Input should be greater than 0 (got 0.0)"),
        (["DATA"], "error: no workflow: give --workflow module:Class"),
    ],
)  # fmt: skip
def test_usage_errors_are_one_line_and_exit_2(
    cli: Cli, tmp_path: Path, args: list[str], message: str
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(1))
    argv = [str(data) if a == "DATA" else a for a in args]
    result = cli("eval", *argv, "--out", "run")
    assert result.exit_code == 2
    assert result.stderr == message + "\n"
    assert not (tmp_path / "run").exists()


def test_an_import_error_inside_the_users_module_shows_its_traceback(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "broken_flow.py").write_text("import numpyy_not_installed\n")
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(1))
    result = cli("eval", str(data), "-w", "broken_flow:W", "--out", "run")
    assert result.exit_code == 2
    *trace, last = result.stderr.splitlines()
    assert last == (
        'error: importing "broken_flow" (for "broken_flow:W") raised ModuleNotFoundError: '
        "No module named 'numpyy_not_installed'"
    )
    assert 'broken_flow.py", line 1' in "\n".join(trace)


def test_workflows_in_the_current_directory_load(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "my_rollout.py").write_text(
        "from osmosis_run import AgentWorkflow\n"
        "class Wf(AgentWorkflow):\n"
        "    async def run(self, ctx):\n"
        "        return [*ctx.prompt, {'role': 'assistant', 'content': 'hi'}]\n"
    )
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(1))
    result = cli("eval", str(data), "--workflow", "my_rollout:Wf", "--out", "run")
    assert result.exit_code == 0, result.stderr
    assert results(tmp_path / "run")[0].messages == [
        {"role": "user", "content": "p0"},
        {"role": "assistant", "content": "hi"},
    ]


def test_workflow_config_limit_is_the_default_concurrency(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(1))
    args = ["-w", "eval_flows:Echo", "--workflow-config", "eval_flows:two_at_once", "--out", "run"]
    assert cli("eval", str(data), *args).exit_code == 0
    saved = (tmp_path / "run/run.toml").read_text()
    assert 'workflow_config = "eval_flows:two_at_once"' in saved


def test_the_api_key_is_never_written(cli: Cli, tmp_path: Path) -> None:
    key = "sk-test-SECRET-123456"
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    result = cli(
        "eval", str(data), "-w", "eval_flows:Leaky", "--api-key", key,
        "--chat-completions-url", "http://127.0.0.1:9/v1", "--out", "run", "--jsonl",
        "--no-gateway",
    )  # fmt: skip
    assert result.exit_code == 3
    assert [line.error_message for line in results(tmp_path / "run")] == [
        "auth failed for key [REDACTED]"
    ] * 2
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path
    assert key not in result.stdout
    assert key not in result.stderr


def test_jsonl_streams_results_to_stdout(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(3))
    result = eval_(cli, data, "--jsonl", "--max-error-rate", "1")
    assert result.exit_code == 0
    streamed = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(line["rollout_id"] for line in streamed) == ["q0.s0", "q1.s0", "q2.s0"]
    assert (tmp_path / "run/results.jsonl").read_text().count("\n") == 3


def test_stdin_dataset(cli: Cli, tmp_path: Path) -> None:
    rows = "".join(json.dumps(row) + "\n" for row in qa_rows(3))
    result = cli("eval", "-", *ECHO, "--out", "run", "--max-error-rate", "1", input=rows)
    assert result.exit_code == 0, result.stderr
    assert [line.row_id for line in results(tmp_path / "run")] == ["q0", "q1", "q2"]
    assert os.path.exists(tmp_path / "run/summary.json")


def test_sys_exit_in_a_workflow_fails_only_that_rollout(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    result = cli("eval", str(data), "-w", "eval_flows:Quitter", "--out", "run")
    assert result.exit_code == 3
    assert [(x.status, x.error_category, x.error_message) for x in results(tmp_path / "run")] == [
        ("failure", "agent_error", "the workflow called sys.exit(4)")
    ] * 2


def test_rollout_seeds_depend_on_row_sample_and_seed_not_on_order(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(6))

    def seeds(out: str, *args: str) -> dict[str, str]:
        result = cli("eval", str(data), "-w", "eval_flows:SeedEcho", "-n", "2", "--out", out, *args)
        assert result.exit_code == 0, result.stderr
        lines = results(tmp_path / out)
        assert all(str(line.seed) == (line.messages or [])[-1]["content"] for line in lines)
        return {line.rollout_id: str(line.seed) for line in lines}

    plain = seeds("a", "-c", "8")
    assert seeds("b", "-c", "1", "--shuffle", "--seed", "0") == plain
    assert len(set(plain.values())) == 12
    other = seeds("c", "--seed", "7")
    assert set(other.values()).isdisjoint(plain.values())


def test_dry_run_reads_every_row_and_runs_nothing(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [*qa_rows(2), "not json"])
    result = eval_(cli, data, "--dry-run")
    assert result.exit_code == 2
    assert result.stdout.splitlines()[-1] == f"{data}: 3 rows, 1 invalid"
    assert not (tmp_path / "run").exists()


def test_eval_writes_junit_html_and_the_github_step_summary(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xml.etree.ElementTree as ET

    step = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    data = write_jsonl(tmp_path / "d.jsonl", [*qa_rows(4), "not json"])
    result = eval_(cli, data, "--max-error-rate", "1", "--junit", "j.xml", "--html", "r.html")
    assert result.exit_code == 0, result.stderr
    suite = ET.parse(tmp_path / "j.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "2", "1")
    page = (tmp_path / "r.html").read_text()
    assert page.startswith("<!DOCTYPE html>") or page.lower().startswith("<!doctype html>")
    assert "q3.s0" in page
    assert "### osmosis-run eval: run" in step.read_text()
    assert "osmosis-run: wrote JUnit report j.xml" in result.stderr.splitlines()


def test_baseline_regression_fails_the_run(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl", [{"id": f"r{i}", "prompt": "a", "label": "a"} for i in range(40)]
    )
    assert eval_(cli, data, out=Path("good")).exit_code == 0
    args = ["-w", "eval_flows:Wrong", "-g", "eval_flows:ExactMatch", "--out", "bad"]
    held = cli("eval", str(data), *args, "--baseline", "good")
    assert held.exit_code == 0  # without a tolerance the comparison is only shown
    failed = cli("eval", str(data), *args, "--baseline", "good", "--fail-on-regression", "0.1")
    assert failed.exit_code == 1
    verdict = [line for line in failed.stderr.splitlines() if "regression" in line]
    assert verdict[0].startswith("FAILED: mean regression <= 0.1: ")
    missing = cli("eval", str(data), *args, "--baseline", "nowhere")
    assert missing.exit_code == 2


def test_an_unwritable_report_path_is_one_line_before_anything_runs(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "blocker").write_text("a file, not a folder")
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    result = eval_(cli, data, "--max-error-rate", "1", "--html", "blocker/r.html")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: cannot write blocker/r.html: blocker is a file; choose another path\n"
    )
    assert not (tmp_path / "run").exists()


def test_after_the_run_each_run_is_read_once_and_the_output_keeps_its_order(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_run.store.rundata import load_run, read_run_config

    data = write_jsonl(
        tmp_path / "d.jsonl", [{"id": f"r{i}", "prompt": "a", "label": "a"} for i in range(8)]
    )
    assert eval_(cli, data, out=Path("good")).exit_code == 0
    reads: list[Path] = []

    def counted(read: Any) -> Any:
        def load(run_dir: Path, **kw: Any) -> Any:
            reads.append(run_dir)
            return read(run_dir, **kw)

        return load

    monkeypatch.setattr("osmosis_run.reports.report.read_run_config", counted(read_run_config))
    monkeypatch.setattr("osmosis_run.reports.html_report.load_run", counted(load_run))
    args = ["-w", "eval_flows:Wrong", "-g", "eval_flows:ExactMatch", "--out", "bad"]
    reports = ["--junit", "j.xml", "--html", "r.html", "--max-error-rate", "1"]
    result = cli(
        "eval", str(data), *args, *reports, "--baseline", "good", "--fail-on-regression", "0.1"
    )

    assert result.exit_code == 1
    assert reads == [Path("bad"), Path("good")]
    lines = result.stderr.splitlines()
    junit, html = (
        lines.index("osmosis-run: wrote JUnit report j.xml"),
        lines.index("osmosis-run: wrote HTML report r.html"),
    )
    regression = next(
        i for i, text in enumerate(lines) if text.startswith("FAILED: mean regression <= 0.1: ")
    )
    assert junit + 1 == html < regression
    assert (tmp_path / "j.xml").is_file()
    assert (tmp_path / "r.html").is_file()


# --- the library behind the end of a run (osmosis_run.reports.finish) ----------------------


def finished_run(tmp_path: Path, name: str, rewards: list[float | None]) -> Path:
    from run_dirs import finished, line, write_run

    lines = [
        line(f"r{i}.s0", reward=reward, row_index=i)
        if reward is not None
        else line(f"r{i}.s0", status="failure", row_index=i)
        for i, reward in enumerate(rewards)
    ]
    return write_run(tmp_path / name, lines, summary=finished(len(lines)))


def summary_of(run_dir: Path) -> Summary:
    from osmosis_run.store.rundata import load_run

    return load_run(run_dir).summary


def test_finish_run_judges_the_summary_and_reads_nothing_without_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_run.reports.finish import finish_run
    from osmosis_run.run.settings import EvalSettings

    run_dir = finished_run(tmp_path, "run", [1.0, 0.0, None])
    summary = summary_of(run_dir)
    monkeypatch.setattr("osmosis_run.reports.report.scan_results", None)  # a read would fail
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)

    gate = EvalSettings.model_validate({"fail_under": ["mean=0.9"], "max_error_rate": 1})
    finish = finish_run(gate.after, summary, run_dir)
    assert [(v.name, v.held) for v in finish.verdicts] == [
        ("mean >= 0.9", False),
        ("max_error_rate", True),
    ]
    assert finish.ending == "gate_failed"

    both = EvalSettings.model_validate({"fail_under": ["mean=0.9"]})
    assert finish_run(both.after, summary, run_dir).ending == "error_budget"  # the budget wins
    fine = EvalSettings.model_validate({"max_error_rate": "50%"})
    assert finish_run(fine.after, summary, run_dir).ending == "ok"


def test_finish_run_tells_the_comparison_and_each_file_as_it_goes(tmp_path: Path) -> None:
    from osmosis_run.reports.finish import finish_run
    from osmosis_run.results.compare import Comparison
    from osmosis_run.run.settings import EvalSettings

    good = finished_run(tmp_path, "good", [1.0] * 6)
    bad = finished_run(tmp_path, "bad", [0.0] * 6)
    told: list[Any] = []
    settings = EvalSettings.model_validate(
        {
            "baseline": str(good),
            "fail_on_regression": 0.1,
            "junit": str(tmp_path / "j.xml"),
            "html": str(tmp_path / "r.html"),
        }
    )
    finish = finish_run(
        settings.after,
        summary_of(bad),
        bad,
        on_comparison=lambda cmp: told.append(type(cmp)),
        on_written=lambda kind, target: told.append((kind, target)),
    )
    assert told == [
        Comparison,
        ("JUnit", str(tmp_path / "j.xml")),
        ("HTML", str(tmp_path / "r.html")),
    ]
    assert [(v.name, v.held) for v in finish.verdicts][-1] == ("max_error_rate", True)
    assert finish.ending == "gate_failed"
    assert (tmp_path / "j.xml").is_file()
    assert (tmp_path / "r.html").is_file()
