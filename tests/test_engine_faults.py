"""The engine under fault: whatever user code raises or returns, every planned rollout ends with
exactly one results line; deadlines, retries, stops and streamed rows (issue: "Every fault ends
in a recorded state")."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS_DIR, Recorder, open_scheduler, results, subprocess_env, write_jsonl
from typer.testing import Result

from osmosis_run.run.deadlines import ABANDON_GRACE_S
from osmosis_run.run.lifecycle import retry_delay
from osmosis_run.run.scheduler import STOP_GRACE_S
from osmosis_run.run.settings import EvalSettings

Cli = Callable[..., Result]
EXE = [sys.executable, "-c", "from osmosis_run.cli import main; main()"]


ABANDONED = (
    "osmosis-run: {n} rollouts ignored their cancellation and were abandoned (recorded as "
    "timeouts, or left unfinished by a stop); not waiting for them"
)


def summary_of(run: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((run / "summary.json").read_text())
    return data


# --- whatever user code raises ------------------------------------------------------------

KINDS = ["cancelled", "generator_exit", "custom", "keyboard_interrupt", "system_exit"]


@pytest.mark.parametrize("grader", [False, True], ids=["workflow", "grader"])
def test_every_base_exception_from_user_code_is_that_rollouts_agent_error(
    cli: Cli, tmp_path: Path, grader: bool
) -> None:
    rows = [{"id": k, "prompt": k, "label": k, "metadata": {"raise": k}} for k in KINDS]
    rows.append({"id": "fine", "prompt": "fine", "label": "fine"})
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    flows = (
        ["-w", "fault_flows:Echo", "-g", "fault_flows:GraderRaises"]
        if grader
        else ["-w", "fault_flows:Raises", "-g", "fault_flows:Match"]
    )
    result = cli("eval", str(data), *flows, "--out", "run")
    assert result.exit_code == 3, result.stderr
    lines = {line.rollout_id: line for line in results(tmp_path / "run")}
    assert sorted(lines) == sorted(f"{k}.s0" for k in [*KINDS, "fine"])
    assert lines["fine.s0"].status == "success"
    stage = "grader" if grader else "workflow"
    expected = {
        "cancelled": (
            "agent_error",
            f"the {stage} let a CancelledError escape (it awaited a task that was cancelled?)",
        ),
        "generator_exit": ("agent_error", "GeneratorExit"),
        "custom": ("agent_error", "user stop"),
        "keyboard_interrupt": ("agent_error", "KeyboardInterrupt"),
        "system_exit": ("agent_error", f"the {stage} called sys.exit(3)"),
    }
    got = {k: (lines[f"{k}.s0"].error_category, lines[f"{k}.s0"].error_message) for k in KINDS}
    assert got == expected
    assert all(lines[f"{k}.s0"].status == "failure" for k in KINDS)
    summary = summary_of(tmp_path / "run")
    assert (summary["rollouts"], summary["planned"], summary["complete"]) == (6, 6, True)


# --- what JSON cannot hold ----------------------------------------------------------------


def test_output_json_cannot_hold_is_that_rollouts_validation_error(
    cli: Cli, tmp_path: Path
) -> None:
    rows = [
        {"id": "b", "prompt": "x", "label": "x", "metadata": {"bad": "bytes"}},
        {"id": "s", "prompt": "x", "label": "x", "metadata": {"bad": "surrogate"}},
    ]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    result = cli("eval", str(data), "-w", "fault_flows:Unwritable", "-g", "fault_flows:Match",
                 "--out", "run")  # fmt: skip
    assert result.exit_code == 3, result.stderr
    lines = {line.rollout_id: line for line in results(tmp_path / "run")}
    prefix = "the rollout's output cannot be written as JSON: sample.messages[1].content "
    assert lines["b.s0"].error_message == (
        prefix + "is bytes that are not UTF-8 text (byte 0xff at 0); return text (str)"
    )
    assert lines["s.s0"].error_message == (
        prefix + "holds a lone surrogate (\\ud800); text must be valid Unicode"
    )
    for line in lines.values():
        assert (line.status, line.error_category, line.messages) == (
            "failure",
            "validation_error",
            None,
        )
        doc = json.loads((tmp_path / "run/rollouts" / line.rollout_id / "result.json").read_text())
        assert doc["error"]["message"] == line.error_message
    assert summary_of(tmp_path / "run")["complete"] is True


# --- deadlines ------------------------------------------------------------------------------


def test_a_rollout_that_returns_after_its_deadline_is_a_timeout(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl", [{"id": "slow", "prompt": "x", "metadata": {"block": 0.6}}]
    )
    result = cli("eval", str(data), "-w", "fault_flows:Blocking", "--agent-timeout", "0.2",
                 "--out", "run")  # fmt: skip
    assert result.exit_code == 3, result.stderr
    [line] = results(tmp_path / "run")
    assert (line.status, line.error_category, line.error_message) == (
        "timeout",
        "timeout",
        "workflow exceeded its 0.2s deadline",
    )


@pytest.mark.slow
def test_a_rollout_that_swallows_cancellation_is_abandoned_as_a_timeout(
    cli: Cli, tmp_path: Path
) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl", [{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y"}]
    )
    started = time.monotonic()
    result = cli("eval", str(data), "-w", "fault_flows:Stubborn", "--agent-timeout", "0.2",
                 "--out", "run")  # fmt: skip
    took = time.monotonic() - started
    assert result.exit_code == 3, result.stderr
    lines = results(tmp_path / "run")
    assert sorted((line.rollout_id, line.status) for line in lines) == [
        ("a.s0", "timeout"),
        ("b.s0", "timeout"),
    ]
    assert took < 0.2 + ABANDON_GRACE_S + 5, "the run must not wait for abandoned code"
    assert ABANDONED.format(n=2) in result.stderr.splitlines()


# --- the watchdog ---------------------------------------------------------------------------


@pytest.fixture
def flows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def engine_settings(tmp_path: Path, rows: list[Any], **kw: object) -> EvalSettings:
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    return EvalSettings.model_validate(
        {"dataset": str(data), "out": str(tmp_path / "run"), "max_error_rate": 1, **kw}
    )


@pytest.mark.usefixtures("flows")
def test_the_watchdog_names_the_rollout_that_holds_the_event_loop_once(tmp_path: Path) -> None:
    rows = [{"id": "hog", "prompt": "x", "metadata": {"block": 1.2}}, {"id": "ok", "prompt": "y"}]
    s = engine_settings(tmp_path, rows, workflow="fault_flows:Blocking", concurrency=1)
    recorder = Recorder()
    runner = open_scheduler(s, reporter=recorder, blocked_after_s=0.4)
    asyncio.run(runner.run())
    assert [e for e in recorder.events if e[0] == "blocked"] == [("blocked", "hog.s0")]


# --- retries back off -----------------------------------------------------------------------


@pytest.mark.usefixtures("flows")
@pytest.mark.parametrize(
    ("meta", "low"),
    [({}, None), ({"retry_after": 4}, 4.0), ({"retry_after": "2.5"}, 2.5)],
    ids=["no-retry-after", "retry-after-int", "retry-after-str"],
)
def test_retries_wait_on_the_injected_clock(
    tmp_path: Path, meta: dict[str, object], low: float | None
) -> None:
    run_key = f"{tmp_path.name}-{low}"
    rows = [
        {"id": "r", "prompt": "x", "label": "x", "metadata": {"run": run_key, "fail": 2, **meta}}
    ]
    s = engine_settings(
        tmp_path, rows, workflow="fault_flows:RateLimited", grader="fault_flows:Match", retries=3
    )
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    started = time.monotonic()
    outcome = asyncio.run(open_scheduler(s, sleep=fake_sleep, rng=random.Random(1)).run())
    assert time.monotonic() - started < 5, "no real sleeping"
    [line] = results(tmp_path / "run")
    assert (line.status, line.attempts, outcome.summary.rollouts) == ("success", 3, 1)
    rng = random.Random(1)
    expected = [retry_delay(n, low, rng) for n in (1, 2)]
    assert slept == expected
    if low is not None:
        assert slept == [low, low]
    doc = json.loads((tmp_path / "run/rollouts/r.s0/result.json").read_text())
    assert [a["retry_in_s"] for a in doc["previous_attempts"]] == expected
    assert [a["error_message"] for a in doc["previous_attempts"]] == ["429 Too Many Requests"] * 2


# --- a resume says what it kept ---------------------------------------------------------------


@pytest.mark.usefixtures("flows")
def test_a_resume_reports_the_failures_it_keeps(tmp_path: Path) -> None:
    rows = [{"id": f"q{i}", "prompt": "x", "metadata": {"raise": "custom" if i < 2 else ""}}
            for i in range(4)]  # fmt: skip
    s = engine_settings(tmp_path, rows, workflow="fault_flows:Raises")
    asyncio.run(open_scheduler(s).run())
    recorder = Recorder()
    asyncio.run(open_scheduler(s, reporter=recorder).run())
    assert recorder.events == [("started", (4, 4, 2))]
    recorder = Recorder()
    retried = s.model_copy(update={"retry_failed": True})
    asyncio.run(open_scheduler(retried, reporter=recorder).run())
    assert recorder.events[0] == ("started", (4, 2, 0))


# --- --jsonl: the output is the run's results -------------------------------------------------


def test_jsonl_prints_the_whole_runs_results_however_often_it_runs(
    cli: Cli, tmp_path: Path
) -> None:
    rows = [{"id": f"q{i}", "prompt": f"p{i}", "metadata": {"raise": "custom" if i % 2 else ""}}
            for i in range(6)]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    args = ["eval", str(data), "-w", "fault_flows:Raises", "--out", "run", "--jsonl"]
    first = cli(*args)
    again = cli(*args)
    assert first.exit_code == again.exit_code == 3
    stored = (tmp_path / "run/results.jsonl").read_text()
    assert first.stdout == again.stdout == stored
    assert len(stored.splitlines()) == 6
    retried = cli(*args, "--retry-failed")  # 3 kept lines, then the 3 that ran again
    assert retried.exit_code == 3
    assert retried.stdout == (tmp_path / "run/results.jsonl").read_text()
    assert retried.stdout.splitlines()[:3] == [
        ln for ln in stored.splitlines() if '"ungraded"' in ln
    ]


# --- a stream whose rows differ on resume -----------------------------------------------------


def test_a_stdin_resume_with_other_rows_is_refused_naming_the_row(cli: Cli, tmp_path: Path) -> None:
    rows = "".join(json.dumps({"id": f"q{i}", "prompt": f"p{i}"}) + "\n" for i in range(3))
    args = ["eval", "-", "-w", "fault_flows:Echo", "--out", "run"]
    assert cli(*args, input=rows).exit_code == 0
    before = (tmp_path / "run/results.jsonl").read_bytes()
    same = cli(*args, input=rows)
    assert same.exit_code == 0, same.stderr
    changed = rows.replace('"p1"', '"other"')
    refused = cli(*args, input=changed)
    assert refused.exit_code == 2, refused.stderr
    assert refused.stderr.splitlines()[-1] == (
        "error: <stdin>:2: this row differs from the one the run recorded for q1.s0: this is "
        "another dataset; choose another --out, or add --fresh to start the run over"
    )
    assert (tmp_path / "run/results.jsonl").read_bytes() == before


# --- rows from a live stdin -------------------------------------------------------------------


def test_rows_from_a_live_stdin_start_as_they_arrive_and_ctrl_c_is_immediate(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen(
        [*EXE, "eval", "-", "-w", "fault_flows:Printer", "--out", "run", "--jsonl", "-c", "4"],
        cwd=tmp_path, env=subprocess_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None
    assert proc.stdout is not None
    seen = []
    for i in range(3):  # one row at a time: each result comes back before the next row is sent
        proc.stdin.write((json.dumps({"id": f"q{i}", "prompt": f"p{i}"}) + "\n").encode())
        proc.stdin.flush()
        seen.append(json.loads(proc.stdout.readline())["rollout_id"])
    assert seen == ["q0.s0", "q1.s0", "q2.s0"]
    proc.stdin.write(
        (json.dumps({"id": "slow", "prompt": "s", "metadata": {"sleep": 60}}) + "\n").encode()
    )
    proc.stdin.flush()
    time.sleep(0.3)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)  # stdin stays open
    out, err = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert took < STOP_GRACE_S + 3
    assert out == b""
    ids = [line.rollout_id for line in results(tmp_path / "run")]
    assert ids == ["q0.s0", "q1.s0", "q2.s0"]
    assert summary_of(tmp_path / "run")["interrupted"] is True


@pytest.mark.slow
def test_the_first_ctrl_c_ends_a_run_whose_rollouts_ignore_cancellation(tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl", [{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y"}]
    )
    proc = subprocess.Popen(
        [*EXE, "eval", str(data), "-w", "fault_flows:Stubborn", "--out", "run"],
        cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not (tmp_path / "run/run.toml").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert time.monotonic() - sent < STOP_GRACE_S + 3
    assert ABANDONED.format(n=2) in err.splitlines()
    assert results(tmp_path / "run") == []
    summary = summary_of(tmp_path / "run")
    assert (summary["interrupted"], summary["complete"]) == (True, False)


def test_an_executor_that_cannot_get_ready_is_one_line_and_nothing_runs(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_run.backends.local import LocalExecutor
    from osmosis_run.errors import ConfigError

    async def unreachable(self: LocalExecutor) -> None:
        raise ConfigError("rollout server http://127.0.0.1:9 refused the connection")

    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "prompt": "x"}])
    args = ["eval", str(data), "-w", "fault_flows:Echo", "--out", "run"]
    with monkeypatch.context() as patch:
        patch.setattr(LocalExecutor, "open", unreachable)
        refused = cli(*args)
    assert (refused.exit_code, refused.stderr.splitlines()[-1]) == (
        2,
        "error: rollout server http://127.0.0.1:9 refused the connection",
    )
    assert results(tmp_path / "run") == []
    assert cli(*args).exit_code == 0  # the run directory was released
    assert len(results(tmp_path / "run")) == 1
