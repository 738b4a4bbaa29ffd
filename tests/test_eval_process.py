"""`osmosis-run eval` as a real process: signals, hard kills, resume, pipes, a model server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import qa_rows, results, subprocess_env, write_jsonl
from fake_openai import serve_fake_openai

from osmosis_run.run.scheduler import WRITER_PROCESS_FROM

EXE = [sys.executable, "-c", "from osmosis_run.cli import main; main()"]


def start(args: list[str], cwd: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*EXE, "eval", *args],
        cwd=cwd,
        env=subprocess_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_lines(
    path: Path, count: int, proc: subprocess.Popen[str], timeout: float = 20
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= count:
            return
        if proc.poll() is not None:
            raise AssertionError(
                f"exited early ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}"
            )
        time.sleep(0.02)
    raise AssertionError(f"{path} never reached {count} lines")


def wait_started(proc: subprocess.Popen[str], settle: float = 0.5) -> None:
    """Wait for the run's first line (its signal handlers are in place by then), then ``settle``
    seconds for its rollouts to be under way: no fixed guess at how long start-up takes."""
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert re.match(r"osmosis-run: .*rollouts? .*-> ", line), line + proc.stderr.read()
    time.sleep(settle)


def marker_args(data: Path, concurrency: int = 4) -> list[str]:
    return [str(data), "-w", "eval_flows:Marker", "-g", "eval_flows:ExactMatch", "--out", "run",
            "-c", str(concurrency), "--max-error-rate", "1"]  # fmt: skip


# (rows, concurrency, sleep): 40 rows are written in process; 400 go through the writer process
assert 40 < WRITER_PROCESS_FROM <= 400
SIZES = [(40, 4, 0.1), (400, 16, 0.05)]


@pytest.mark.parametrize(("rows", "concurrency", "sleep"), SIZES)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_then_resume_runs_every_rollout_exactly_once(
    tmp_path: Path, sig: signal.Signals, rows: int, concurrency: int, sleep: float
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(rows, metadata={"sleep": sleep}))
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = start(marker_args(data, concurrency), tmp_path, EVAL_MARKERS=str(markers))
    wait_for_lines(tmp_path / "run/results.jsonl", 8, proc)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130, stderr
    assert "osmosis-run: interrupted; resume with: osmosis-run eval " in stderr
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert summary["interrupted"] is True
    done_before = len(results(tmp_path / "run"))
    assert 8 <= done_before < rows

    resumed = subprocess.run(
        [*EXE, "eval", *marker_args(data, concurrency)], cwd=tmp_path, capture_output=True, text=True,
        env=subprocess_env(EVAL_MARKERS=str(markers)), timeout=60, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert f"{rows} rollouts, {done_before} already done" in resumed.stderr
    ids = [line.rollout_id for line in results(tmp_path / "run")]
    assert sorted(ids) == sorted(f"q{i}.s0" for i in range(rows))
    assert {p.read_text() for p in markers.iterdir()} == {"x"}, "a rollout ran twice"
    assert len(list(markers.iterdir())) == rows
    assert json.loads((tmp_path / "run/summary.json").read_text())["complete"] is True


@pytest.mark.parametrize(("rows", "concurrency", "sleep"), SIZES)
def test_after_a_hard_kill_resume_loses_and_duplicates_nothing(
    tmp_path: Path, rows: int, concurrency: int, sleep: float
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(rows, metadata={"sleep": sleep}))
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = start(marker_args(data, concurrency), tmp_path, EVAL_MARKERS=str(markers))
    wait_for_lines(tmp_path / "run/results.jsonl", 10, proc)
    proc.kill()
    proc.communicate(timeout=20)
    resumed = subprocess.run(
        [*EXE, "eval", *marker_args(data, concurrency)], cwd=tmp_path, capture_output=True, text=True,
        env=subprocess_env(EVAL_MARKERS=str(markers)), timeout=60, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    ids = [line.rollout_id for line in results(tmp_path / "run")]
    assert sorted(ids) == sorted(f"q{i}.s0" for i in range(rows))
    reran = [p.name for p in markers.iterdir() if p.read_text() != "x"]
    # In flight, and (with a writer process) finished in the last 20 ms, not yet handed over:
    # a rollout sleeps at least 50 ms, so at most one more per slot.
    most = concurrency if rows < WRITER_PROCESS_FROM else 2 * concurrency
    assert len(reran) <= most, f"only rollouts in flight may run again: {reran}"


def test_a_second_interrupt_exits_at_once(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    proc = start([str(data), "-w", "eval_flows:Stubborn", "--out", "run"], tmp_path)
    wait_started(proc)  # started and stuck in rollouts that ignore cancellation
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None, "the first Ctrl-C waits for rollouts to stop"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=5)
    assert proc.returncode == 130


def test_stdin_in_jsonl_out_composes_in_a_pipeline(tmp_path: Path) -> None:
    rows = "".join(json.dumps(row) + "\n" for row in qa_rows(5))
    pipeline = (
        f"{' '.join(EXE[:2])} '{EXE[2]}' eval - -w eval_flows:Echo -g eval_flows:ExactMatch "
        "--out run --jsonl --max-error-rate 1 "
        f'| {sys.executable} -c "import sys, json; '
        "lines = [json.loads(l) for l in sys.stdin]; "
        "print(len(lines), sum(l['reward'] for l in lines))\""
    )
    done = subprocess.run(
        pipeline, shell=True, input=rows, capture_output=True, text=True, cwd=tmp_path,
        env=subprocess_env(), timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout == "5 3.0\n"
    assert "osmosis-run: 5 rollouts" not in done.stdout


def test_a_workflow_calling_a_real_http_model_server_keeps_the_key_secret(tmp_path: Path) -> None:
    key = "sk-live-0123456789abcdef"
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [{"id": f"c{i}", "prompt": f"question {i}", "ground_truth": "Paris"} for i in range(3)],
    )
    with serve_fake_openai(lambda body: "Paris", api_key=key) as server:
        done = subprocess.run(
            [*EXE, "eval", str(data), "-w", "osmosis_run.examples.chat:ChatCompletionsWorkflow",
             "--workflow-config", "osmosis_run.examples.chat:config",
             "-g", "osmosis_run.examples.calculator:ExactMatchGrader", "--out", "run",
             "--chat-completions-url", server.url],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
            env=subprocess_env(OSMOSIS_API_KEY=key),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert len(server.requests) == 3
        assert {r.authorization for r in server.requests} == {f"Bearer {key}"}
    lines = results(tmp_path / "run")
    assert [line.reward for line in lines] == [1.0, 1.0, 1.0]
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path
    assert key not in done.stdout + done.stderr
    assert os.environ.get("OSMOSIS_API_KEY") != key


@pytest.mark.slow
def test_a_terminal_gets_a_live_progress_bar_and_a_pipe_gets_plain_lines(tmp_path: Path) -> None:
    import pty

    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(10, metadata={"sleep": 0.1}))
    args = [str(data), "-w", "eval_flows:Sleepy", "-c", "1", "--max-error-rate", "1"]
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*EXE, "eval", *args, "--out", "tty"], cwd=tmp_path, env=subprocess_env(COLUMNS="100"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    screen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        screen += chunk
    proc.wait(timeout=30)
    os.close(master)
    text = screen.decode(errors="replace")
    assert proc.returncode == 0
    assert "\x1b[" in text  # drawn with terminal control sequences
    assert "/10" in text
    assert "osmosis-run: 10/10 rollouts" not in text  # no plain lines on a terminal

    piped = subprocess.run(
        [*EXE, "eval", *args, "--out", "pipe"], cwd=tmp_path, env=subprocess_env(),
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    # Plain lines come every few seconds, by the clock (tests/test_cli_conventions.py).
    lines = piped.stderr.splitlines()
    assert lines[0] == "osmosis-run: 10 rollouts -> pipe"
    assert "osmosis-run: finished pipe" in lines
    assert all(
        re.match(r"osmosis-run: \d+/10 rollouts \(", line)
        for line in lines[1 : lines.index("osmosis-run: finished pipe")]
    )
    assert "\x1b[" not in piped.stderr


def test_a_closed_stdout_stops_the_run_cleanly_and_resumably(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(1000))  # more than a pipe buffer holds
    args = [str(data), "-w", "eval_flows:Echo", "-g", "eval_flows:ExactMatch", "--out", "run",
            "--jsonl", "--max-error-rate", "1"]  # fmt: skip
    proc = start(args, tmp_path)
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    proc.stdout.close()  # the reader goes away, as `| head -1` does
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert (
        "osmosis-run: stdout was closed (--jsonl); stopping, finished rollouts are kept" in stderr
    )
    assert "Traceback" not in stderr
    kept = results(tmp_path / "run")
    assert first["rollout_id"] in {line.rollout_id for line in kept}
    resumed = subprocess.run(
        [*EXE, "eval", *args[:-3], "--max-error-rate", "1"], cwd=tmp_path, env=subprocess_env(),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert len(results(tmp_path / "run")) == 1000


def test_a_second_interrupt_exits_even_when_a_workflow_blocks_the_loop(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    proc = start([str(data), "-w", "eval_flows:Blocking", "--out", "run"], tmp_path)
    wait_started(proc)  # started, and stuck in time.sleep inside the event loop
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=5)
    assert proc.returncode == 130


# A blocking call in asyncio.to_thread cannot be interrupted: its rollout is recorded, and the
# call is left to its thread rather than holding the run.
THREADS_LEFT = (
    "osmosis-run: 3 blocking calls were still running in worker threads (asyncio.to_thread) "
    "after their rollouts were cancelled; not waiting for them"
)


def test_a_timed_out_call_in_a_thread_does_not_hold_the_finished_run(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(3))
    args = [str(data), "-w", "eval_flows:InThread", "--out", "run", "--agent-timeout", "0.5",
            "--max-error-rate", "100%"]  # fmt: skip
    proc = start(args, tmp_path)
    _, stderr = proc.communicate(timeout=30)  # the calls sleep an hour
    assert proc.returncode == 0, stderr
    assert THREADS_LEFT in stderr.splitlines()
    lines = results(tmp_path / "run")
    assert [(r.status, r.error_message) for r in lines] == [
        ("timeout", "workflow exceeded its 0.5s deadline")
    ] * 3
    assert (tmp_path / "run" / "summary.json").is_file()


def test_ctrl_c_ends_a_run_whose_workflows_wait_on_threads(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(3))
    proc = start([str(data), "-w", "eval_flows:InThread", "--out", "run"], tmp_path)
    wait_started(proc)  # started, and each rollout waiting on its thread
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 130, stderr
    assert THREADS_LEFT in stderr.splitlines()
    assert "osmosis-run: interrupted; resume with: " in stderr
    assert results(tmp_path / "run") == []


def test_a_signal_once_the_rollouts_ended_exits_at_once_without_a_traceback(
    tmp_path: Path,
) -> None:
    # The step summary is a FIFO nobody reads: appending to it blocks the end of the run, after
    # the rollouts are recorded and the summary printed.
    fifo = tmp_path / "summary.fifo"
    os.mkfifo(fifo)
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    args = [str(data), "-w", "eval_flows:Echo", "--out", "run", "--max-error-rate", "1"]
    proc = start(args, tmp_path, GITHUB_STEP_SUMMARY=str(fifo))
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # up to the summary: the run is in its last step, or about to be
        seen.append(line)
        if line.startswith("pass rate"):
            break
    time.sleep(0.3)
    assert proc.poll() is None, "".join(seen)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=5)
    assert proc.returncode == 130, rest
    assert rest.splitlines()[-1] == (
        "osmosis-run: interrupted after the rollouts ended; what they recorded is kept in run"
    )
    assert "Traceback" not in rest
    assert len(results(tmp_path / "run")) == 2


def test_a_run_makes_as_many_calls_in_threads_at_once_as_its_concurrency(tmp_path: Path) -> None:
    # Together's rollouts meet at a barrier of 40, each in asyncio.to_thread: asyncio's own
    # executor (at most 32 threads) would break the barrier; one thread per slot does not.
    from eval_flows import AT_ONCE

    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(AT_ONCE))
    args = [str(data), "-w", "eval_flows:Together", "--out", "run", "-c", str(AT_ONCE),
            "--max-error-rate", "1"]  # fmt: skip
    proc = start(args, tmp_path)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert {r.status for r in results(tmp_path / "run")} == {"ungraded"}


@pytest.mark.parametrize("gap", [0.0, 0.01, 0.03, 0.1, 0.3])
def test_a_second_interrupt_at_any_moment_of_the_stop_exits_130(tmp_path: Path, gap: float) -> None:
    # The rollouts end at once when cancelled: within a few milliseconds of the first Ctrl-C
    # the run has ended, printed its summary and is exiting; the second must still mean 130.
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(4, metadata={"sleep": 600}))
    proc = start([str(data), "-w", "eval_flows:Sleepy", "--out", "run"], tmp_path)
    assert proc.stderr is not None
    assert proc.stderr.readline() == "osmosis-run: 4 rollouts -> run\n"
    time.sleep(0.3)  # the rollouts are sleeping
    proc.send_signal(signal.SIGINT)
    time.sleep(gap)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
