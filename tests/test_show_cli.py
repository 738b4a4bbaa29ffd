"""`osmosis-run show`: one rollout at a glance, by rollout id, row id or --worst N."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import write_jsonl
from run_dirs import finished, line, write_run
from typer.testing import Result

from osmosis_run.reports.report import final_answer

Cli = Callable[..., Result]
TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 6*7?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "calc", "arguments": '{"expression": "6*7"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    {"role": "assistant", "content": [{"type": "text", "text": "It is 42."}]},
]
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "flow.py", line 3, in run\n'
    "    raise ValueError('the tool is down')\n"
    "ValueError: the tool is down\n"
)


def a_run(run_dir: Path) -> Path:
    """q1 (two samples: 1.0 and 0.25), q2 a workflow failure, q3 ungraded."""
    lines = [
        line("q1.s0", reward=1.0, label="42", messages=TRANSCRIPT, metrics={"turns": 2.0},
             metadata={"topic": "math"}, workflow_ms=12.5, grader_ms=0.5),
        line("q1.s1", reward=0.25, label="42", messages=TRANSCRIPT[:2], workflow_ms=3.0),
        line("q2.s0", status="failure", error_category="validation_error",
             error_message="the tool is down", label="x", workflow_ms=1.0, grader_ms=None),
        line("q3.s0", status="ungraded", workflow_ms=1.0, grader_ms=None),
    ]  # fmt: skip
    write_run(run_dir, lines, summary=finished(4))
    failed = run_dir / "rollouts/q2.s0"
    (failed / "artifacts").mkdir(parents=True)
    (failed / "artifacts/log.txt").write_text("calling the tool\n")
    document = {
        "rollout_id": "q2.s0",
        "error": {
            "category": "validation_error",
            "message": "the tool is down",
            "stage": "workflow",
            "traceback": TRACEBACK,
        },
        "previous_attempts": [
            {"attempt": 1, "error_category": "agent_error", "error_message": "flaky\nmore"}
        ],
    }
    (failed / "result.json").write_text(json.dumps(document))
    return run_dir


def lines_of(result: Result) -> list[str]:
    return result.stdout.splitlines()


Q1_S0 = [
    "rollout   q1.s0  (row q1, line 1, sample 0)",
    "status    success   reward 1.000   passed yes",
    "label     42",
    "attempts  1   workflow 12.5 ms   grader 0.5 ms",
    'metadata  {"topic": "math"}',
    "metrics   turns=2",
    "transcript  5 messages",
    "  system",
    "    Be brief.",
    "  user",
    "    What is 6*7?",
    "  assistant",
    '    -> calc({"expression": "6*7"})  [call_1]',
    "  tool  [call_1]",
    "    42",
    "  assistant",
    "    It is 42.",
    "files     run/rollouts/q1.s0/",
]
Q2_S0 = [
    "rollout   q2.s0  (row q2, line 1, sample 0)",
    "status    failure   reward -   passed no",
    "label     x",
    "attempts  1   workflow 1.0 ms   grader -",
    "error     validation_error (workflow): the tool is down",
    "    attempt 1: agent_error: flaky",
    "traceback",
    "    Traceback (most recent call last):",
    '      File "flow.py", line 3, in run',
    "        raise ValueError('the tool is down')",
    "    ValueError: the tool is down",
    "transcript  none recorded",
    "files     run/rollouts/q2.s0/",
    "    artifacts/log.txt  17 B",
    "    result.json  383 B",
]


def test_show_a_rollout_by_its_id(cli: Cli, tmp_path: Path) -> None:
    a_run(tmp_path / "run")

    result = cli("show", "run", "q1.s0")

    assert result.exit_code == 0
    assert result.stderr == ""
    assert lines_of(result) == Q1_S0


def test_show_a_failure_with_its_error_traceback_and_files(cli: Cli, tmp_path: Path) -> None:
    a_run(tmp_path / "run")

    result = cli("show", "run", "q2.s0")

    assert result.exit_code == 0
    assert lines_of(result) == Q2_S0


def test_show_a_row_id_shows_every_sample_of_the_row(cli: Cli, tmp_path: Path) -> None:
    a_run(tmp_path / "run")

    result = cli("show", "run", "q1")

    assert result.exit_code == 0
    assert lines_of(result) == [
        *Q1_S0,
        "",
        "rollout   q1.s1  (row q1, line 1, sample 1)",
        "status    success   reward 0.250   passed no",
        "label     42",
        "attempts  1   workflow 3.0 ms   grader 0.5 ms",
        "transcript  2 messages",
        "  system",
        "    Be brief.",
        "  user",
        "    What is 6*7?",
        "files     run/rollouts/q1.s1/",
    ]


def test_show_worst_lists_the_lowest_scores_first(cli: Cli, tmp_path: Path) -> None:
    a_run(tmp_path / "run")

    result = cli("show", "run", "--worst", "2")

    assert result.exit_code == 0
    shown = [text for text in lines_of(result) if text.startswith("rollout ")]
    assert shown == [
        "rollout   q2.s0  (row q2, line 1, sample 0)",  # a failure scores 0
        "rollout   q1.s1  (row q1, line 1, sample 1)",
    ]
    assert lines_of(result)[: len(Q2_S0)] == Q2_S0


def test_show_json_is_one_document(cli: Cli, tmp_path: Path) -> None:
    a_run(tmp_path / "run")

    result = cli("show", "run", "q2.s0", "--json")

    assert result.exit_code == 0
    [view] = json.loads(result.stdout)
    assert view["line"]["rollout_id"] == "q2.s0"
    assert (view["error_stage"], view["traceback"]) == ("workflow", TRACEBACK)
    assert view["files"] == [
        {"path": "artifacts/log.txt", "size": 17},
        {"path": "result.json", "size": 383},
    ]


def test_an_unknown_id_is_one_line_suggesting_close_ids(cli: Cli, tmp_path: Path) -> None:
    a_run(tmp_path / "run")
    cases = [
        (("show", "run", "q1.s3"), 'error: no rollout "q1.s3" in run; did you mean q1.s1, q1.s0, q3.s0?'),
        (("show", "run", "zebra"), 'error: no rollout "zebra" in run; give a rollout id (such as '
         "q1.s0, q1.s1, q2.s0) or a row id, or --worst N for the lowest rewards"),
        (("show", "run"), "error: give a ROLLOUT_ID, or --worst N for the lowest rewards "
         "(`osmosis-run report run` lists failures and the lowest rewards)"),
        (("show", "run", "q1.s0", "--worst", "1"), "error: give a ROLLOUT_ID or --worst N, not both"),
        (("show", "nowhere", "q1.s0"),
         "error: nowhere does not exist; give the directory `osmosis-run eval` printed"),
    ]  # fmt: skip
    for args, message in cases:
        result = cli(*args)
        assert (result.exit_code, result.stderr, result.stdout) == (2, message + "\n", ""), args


def test_show_a_real_run_written_without_messages(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "r", "prompt": "yo", "ground_truth": "yo"}])
    made = cli("eval", str(data), "-w", "grade_flows:Answer", "-g", "grade_flows:Strict",
               "--out", "run", "--no-messages", "--max-error-rate", "1")  # fmt: skip
    assert made.exit_code == 0, made.stderr

    result = cli("show", "run", "r")

    assert result.exit_code == 0
    shown = lines_of(result)
    assert shown[1] == "status    success   reward 0.000   passed no"
    assert shown[shown.index("transcript  4 messages") :] == [
        "transcript  4 messages",
        "  user",
        "    yo",
        "  assistant",
        '    -> calc({"q": "yo"})  [call_1]',
        "  tool  [call_1]",
        "    YO",
        "  assistant",
        "    yo!",
        "files     run/rollouts/r.s0/",
        "    artifacts/answer.txt  3 B",
        f"    result.json  {(tmp_path / 'run/rollouts/r.s0/result.json').stat().st_size} B",
        f"    trajectory.json  {(tmp_path / 'run/rollouts/r.s0/trajectory.json').stat().st_size} B",
    ]


def test_no_scored_rollouts_says_so(cli: Cli, tmp_path: Path) -> None:
    write_run(tmp_path / "run", [line("u.s0", status="ungraded")], summary=finished(1))

    result = cli("show", "run", "--worst", "3")

    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr == "osmosis-run: run has no scored rollouts (none graded or failed)\n"


def test_final_answer_is_the_last_assistant_text_on_one_line() -> None:
    assert final_answer(TRANSCRIPT) == "It is 42."
    assert final_answer(TRANSCRIPT[:3]) is None  # a tool call alone is no answer
    assert final_answer([{"role": "assistant", "content": "a\n  b " + "c" * 100}], chars=10) == (
        "a b ccc..."
    )
    assert final_answer(None) is None
