"""Faults around `osmosis-run eval`, each ending in a recorded state: a run directory in use, a
full disk, a lost writer process, user code writing to stdout or forking, API keys of any
shape, report targets that cannot work, a closed stderr."""

from __future__ import annotations

import errno
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import qa_rows, results, subprocess_env, write_jsonl
from test_eval_process import EXE, start, wait_for_lines
from typer.testing import Result

from osmosis_run.results.records import ResultLine
from osmosis_run.store import _writer_child as child
from osmosis_run.store import store
from osmosis_run.store.store import read_summary
from osmosis_run.store.writer import InlineWriter

Cli = Callable[..., Result]
ECHO = ["-w", "eval_flows:Echo", "-g", "eval_flows:ExactMatch"]
REDACTED = "[REDACTED]"
IN_USE = "is being written by another osmosis-run; wait for it to finish or choose another --out"


def run_ids(run: Path) -> list[str]:
    return sorted(line.rollout_id for line in results(run))


def temporary_files(root: Path) -> list[Path]:
    return sorted(root.rglob(".*.tmp"))


# -- the run directory: --fresh takes the lock first --------------------------------------------


def test_fresh_on_a_run_directory_in_use_is_refused_and_touches_nothing(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(10, metadata={"sleep": 0.2}))
    args = [str(data), "-w", "eval_flows:Sleepy", "-g", "eval_flows:ExactMatch", "--out", "run",
            "-c", "1", "--max-error-rate", "1"]  # fmt: skip
    first = start(args, tmp_path)
    wait_for_lines(tmp_path / "run/results.jsonl", 2, first)
    monkeypatch.setattr(store, "LOCK_WAIT_S", 0.2)
    refused = cli("eval", *args, "--fresh")
    assert refused.exit_code == 2
    assert refused.stderr == f"error: run {IN_USE}\n"
    _, stderr = first.communicate(timeout=30)
    assert first.returncode == 0, stderr
    assert run_ids(tmp_path / "run") == sorted(f"q{i}.s0" for i in range(10))
    summary = read_summary(tmp_path / "run")
    assert summary is not None
    assert summary.complete


# -- infrastructure errors mid-run: one line, exit 4, resumable --------------------------------


def test_a_full_disk_mid_run_is_one_line_exit_4_and_the_run_resumes(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(6))
    args = ["eval", str(data), *ECHO, "--out", "run", "-c", "1", "--max-error-rate", "1"]
    monkeypatch.setattr(sys, "argv", ["osmosis-run", *args])
    appends = 0
    write_all = child.write_all

    def fills_up(fd: int, data: bytes) -> None:
        nonlocal appends
        appends += 1
        if appends > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        write_all(fd, data)

    monkeypatch.setattr(child, "write_all", fills_up)
    failed = cli(*args)
    assert failed.exit_code == 4
    assert failed.stderr.splitlines()[-3:] == [
        "error: disk full writing run/results.jsonl: No space left on device",
        f"osmosis-run: fix it and resume with: osmosis-run {shlex.join(args)}",
        "osmosis-run: finished rollouts are kept in run",
    ]
    assert "Traceback" not in failed.stderr
    summary = read_summary(tmp_path / "run")
    assert summary is not None
    assert (summary.rollouts, summary.complete) == (2, False)
    assert len(results(tmp_path / "run")) == 2
    assert temporary_files(tmp_path) == []

    monkeypatch.setattr(child, "write_all", write_all)  # the disk has room again
    resumed = cli(*args)
    assert resumed.exit_code == 0, resumed.stderr
    assert "6 rollouts, 2 already done" in resumed.stderr
    assert [line.rollout_id for line in results(tmp_path / "run")] == [f"q{i}.s0" for i in range(6)]


def test_an_infrastructure_error_escaping_the_run_in_a_group_is_one_line(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_run.errors import InfrastructureError
    from osmosis_run.run.scheduler import Scheduler

    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    args = ["eval", str(data), *ECHO, "--out", "run"]
    monkeypatch.setattr(sys, "argv", ["osmosis-run", *args])

    async def lost(self: Scheduler) -> None:
        error = InfrastructureError("the writer process of run was lost (killed by SIGKILL)")
        raise ExceptionGroup("outer", [ExceptionGroup("inner", [error])])

    monkeypatch.setattr(Scheduler, "run", lost)
    result = cli(*args)
    assert result.exit_code == 4
    assert result.stderr == (
        "error: the writer process of run was lost (killed by SIGKILL)\n"
        f"osmosis-run: fix it and resume with: osmosis-run {shlex.join(args)}\n"
        "osmosis-run: finished rollouts are kept in run\n"
    )


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MB tmpfs (root only), unmounted at the end."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


DISK_FULL = "error: disk full writing disk/run/"


@pytest.mark.slow
def test_a_real_full_disk_stops_the_writer_process_then_a_resume_finishes(
    tmp_path: Path, small_disk: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(400))  # 3 MB of rollout files: too much
    args = [str(data), *ECHO, "--out", "disk/run", "--max-error-rate", "1"]

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*EXE, "eval", *args], cwd=tmp_path, env=subprocess_env(), capture_output=True,
            text=True, timeout=60, check=False,
        )  # fmt: skip

    full = run()
    assert full.returncode == 4, full.stderr
    error, hint, kept = full.stderr.splitlines()[-3:]
    assert error.startswith(DISK_FULL), full.stderr
    assert error.endswith(": No space left on device")
    assert hint == f"osmosis-run: fix it and resume with: osmosis-run eval {shlex.join(args)}"
    assert kept == "osmosis-run: finished rollouts are kept in disk/run"
    assert "Traceback" not in full.stderr
    durable = len(results(tmp_path / "disk/run"))
    assert 0 < durable < 400
    assert temporary_files(small_disk) == []

    still_full = run()  # a resume on a disk still full: one line again, no temporary left
    assert still_full.returncode in (2, 4), still_full.stderr
    assert "Traceback" not in still_full.stderr
    assert temporary_files(small_disk) == []

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    freed = run()
    assert freed.returncode == 0, freed.stderr
    ids = [line.rollout_id for line in results(tmp_path / "disk/run")]
    assert sorted(ids) == sorted(f"q{i}.s0" for i in range(400))
    assert temporary_files(small_disk) == []


def writer_child_of(pid: int) -> int:
    """The PID of the runner's writer process (found through /proc)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for kid in (task / "children").read_text().split():
                if b"_writer_child.py" in Path(f"/proc/{kid}/cmdline").read_bytes():
                    return int(kid)
        time.sleep(0.01)
    raise AssertionError(f"no writer process under {pid}")


@pytest.mark.slow
def test_a_killed_writer_process_is_one_line_exit_4_and_the_run_resumes(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(400, metadata={"sleep": 0.05}))
    markers = tmp_path / "markers"
    markers.mkdir()
    args = [str(data), "-w", "eval_flows:Marker", "-g", "eval_flows:ExactMatch", "--out", "run",
            "-c", "8", "--max-error-rate", "1"]  # fmt: skip
    proc = start(args, tmp_path, EVAL_MARKERS=str(markers))
    wait_for_lines(tmp_path / "run/results.jsonl", 40, proc)
    os.kill(writer_child_of(proc.pid), signal.SIGKILL)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 4, stderr
    assert stderr.splitlines()[-3:] == [
        "error: the writer process of run was lost (killed by SIGKILL)",
        f"osmosis-run: fix it and resume with: osmosis-run eval {shlex.join(args)}",
        "osmosis-run: finished rollouts are kept in run",
    ]
    summary = read_summary(tmp_path / "run")
    assert summary is not None
    assert not summary.complete
    assert summary.rollouts == len(results(tmp_path / "run")) < 400

    resumed = subprocess.run(
        [*EXE, "eval", *args], cwd=tmp_path, env=subprocess_env(EVAL_MARKERS=str(markers)),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    ids = [line.rollout_id for line in results(tmp_path / "run")]
    assert sorted(ids) == sorted(f"q{i}.s0" for i in range(400))
    assert len(list(markers.iterdir())) == 400


def test_errors_name_the_errno_and_the_path() -> None:
    from osmosis_run.store.store import infrastructure_error
    from osmosis_run.store.writer import WriterLost

    full = OSError(errno.ENOSPC, "No space left on device", "runs/x/results.jsonl")
    assert str(infrastructure_error(full)) == (
        "disk full writing runs/x/results.jsonl: No space left on device"
    )
    quota = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert str(infrastructure_error(quota, path="runs/x/summary.json")) == (
        "disk quota exceeded writing runs/x/summary.json: Disk quota exceeded"
    )
    odd = OSError(errno.EISDIR, "Is a directory", "runs/x/rollouts/a.s0/result.json")
    assert str(infrastructure_error(odd)) == (
        "file system error writing runs/x/rollouts/a.s0/result.json: Is a directory"
    )
    lost = WriterLost(-signal.SIGKILL, Path("runs/x/results.jsonl"))
    assert str(infrastructure_error(lost)) == (
        "the writer process of runs/x was lost (killed by SIGKILL)"
    )
    assert str(infrastructure_error(WriterLost(1, Path("r/results.jsonl")))) == (
        "the writer process of r was lost (exit code 1)"
    )


def test_the_inline_writer_names_results_jsonl_when_its_append_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rollouts").mkdir()

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(child, "write_all", full)
    writer = InlineWriter(tmp_path / "results.jsonl", tmp_path / "rollouts")
    with pytest.raises(OSError, match="No space left on device") as raised:
        writer.write([("a.s0", b"{}", b"{}", None)])
    writer.abandon()
    assert (raised.value.errno, raised.value.filename) == (
        errno.ENOSPC,
        str(tmp_path / "results.jsonl"),
    )


# -- stdout under --jsonl is osmosis-run's -----------------------------------------------------


def test_prints_and_subprocess_output_never_reach_jsonl_stdout(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(5))
    done = subprocess.run(
        [*EXE, "eval", str(data), "-w", "eval_flows:Chatty", "-g", "eval_flows:ExactMatch",
         "--out", "run", "--jsonl", "--max-error-rate", "1"],
        cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [ResultLine.model_validate_json(line) for line in done.stdout.splitlines()]
    assert sorted(line.rollout_id for line in lines) == [f"q{i}.s0" for i in range(5)]
    said = done.stderr.splitlines()
    assert {f"print from p{i}" for i in range(5)} <= set(said)
    assert {f"echo from p{i}" for i in range(5)} <= set(said)


def test_jsonl_output_is_the_whole_run_however_often_it_runs(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(4))
    args = ["eval", str(data), *ECHO, "--out", "run", "--jsonl", "--max-error-rate", "1"]
    first = cli(*args)
    again = cli(*args)
    assert first.exit_code == again.exit_code == 0
    assert len(first.stdout.splitlines()) == 4
    assert again.stdout == first.stdout
    assert (tmp_path / "run/results.jsonl").read_text() == first.stdout


# -- API keys of any shape ---------------------------------------------------------------------

SHORT_KEY = (
    "osmosis-run: the API key is shorter than 8 characters; it is used, but not redacted "
    "from outputs"
)


@pytest.mark.parametrize("key", ["1", "e", "x", "null", "ok"])
def test_a_short_api_key_works_and_is_not_redacted(cli: Cli, tmp_path: Path, key: str) -> None:
    text = "ok null e x 1"
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": i, "prompt": text, "label": text} for i in range(3)])  # fmt: skip
    result = cli("eval", str(data), *ECHO, "--out", "run", "--api-key", key)
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines().count(SHORT_KEY) == 1
    lines = results(tmp_path / "run")
    assert [(line.label, line.reward) for line in lines] == [(text, 1.0)] * 3
    assert [(line.messages or [])[-1]["content"] for line in lines] == [text] * 3
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert REDACTED.encode() not in path.read_bytes(), path


def key_forms(key: str) -> list[bytes]:
    return [key.encode(), json.dumps(key)[1:-1].encode()]


def test_a_key_with_quotes_and_backslashes_is_redacted_in_every_form(
    cli: Cli, tmp_path: Path
) -> None:
    key = 'sk-"quoted"\\slash-01'
    assert len(key) == 20
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
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"results.jsonl", "result.json", "summary.json", "run.toml"}
    for path in files:
        for form in key_forms(key):
            assert form not in path.read_bytes(), (path, form)
        if path.suffix == ".jsonl":  # still valid JSON, every line
            assert all(json.loads(line) for line in path.read_bytes().splitlines())
        elif path.suffix == ".json":
            assert json.loads(path.read_bytes())
    for form in key_forms(key):
        assert form.decode() not in result.stdout + result.stderr


def test_the_key_is_redacted_from_osmosis_runs_log_records(tmp_path: Path) -> None:
    key = "sk-log-0123456789abcdef"
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(1))
    done = subprocess.run(
        [*EXE, "eval", str(data), "-w", "eval_flows:LoggingLeaky", "--out", "run",
         "--chat-completions-url", "http://127.0.0.1:9/v1", "--no-gateway"],
        cwd=tmp_path, env=subprocess_env(OSMOSIS_API_KEY=key), capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "ERROR:osmosis_run.sdk.backend:workflow of rollout q0.s0 raised RuntimeError" in (
        done.stderr.splitlines()
    )
    assert "RuntimeError: auth failed for key [REDACTED]" in done.stderr.splitlines()
    assert key not in done.stderr


def test_redacted_json_stays_valid_json() -> None:
    from osmosis_run._redact import Redactor

    redactor = Redactor(['ab"cd\\ef'])
    doc = {'ab"cd\\ef': ['x ab"cd\\ef y', 1, None], "n": 'ab"cd\\ef'}
    redacted = redactor.json_bytes(json.dumps(doc).encode())
    assert json.loads(redacted) == {REDACTED: [f"x {REDACTED} y", 1, None], "n": REDACTED}
    clean = json.dumps({"a": "b"}).encode()
    assert redactor.json_bytes(clean) is clean
    assert Redactor(["short"]).too_short == ("short",)
    assert not Redactor(["short"])


# -- report targets and baselines are checked before anything runs -----------------------------


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--html", "cfg", "--html cfg is a directory; give a file, for example cfg/report.html"),
        ("--junit", "cfg", "--junit cfg is a directory; give a file, for example cfg/junit.xml"),
        ("--html", "d.jsonl/r.html", "cannot write d.jsonl/r.html: d.jsonl is a file; choose another path"),
        ("--baseline", "/nonexistent", "--baseline /nonexistent does not exist; give the directory `osmosis-run eval` printed"),
        ("--baseline", "cfg", "--baseline cfg is not an osmosis-run run directory (no results.jsonl); give the directory `osmosis-run eval` printed"),
    ],
)  # fmt: skip
def test_report_targets_and_baselines_are_checked_before_the_run(
    cli: Cli, tmp_path: Path, option: str, value: str, message: str
) -> None:
    (tmp_path / "cfg").mkdir()
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    result = cli("eval", str(data), *ECHO, "--out", "run", option, value)
    assert result.exit_code == 2
    assert result.stderr == f"error: {message}\n"
    assert not (tmp_path / "run").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg", "d.jsonl"]


def test_an_html_report_onto_a_directory_leaves_no_temporary_file(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    assert cli("eval", str(data), *ECHO, "--out", "run", "--max-error-rate", "1").exit_code == 0
    (tmp_path / "cfg").mkdir()
    result = cli("report", "run", "--html", "cfg")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == (
        "error: cannot write cfg: it is a directory; give a file name"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg", "d.jsonl", "run"]
    assert list((tmp_path / "cfg").iterdir()) == []


# -- a workflow's os.fork() child does not keep the run locked ---------------------------------


@pytest.mark.slow
def test_a_forked_child_does_not_hold_the_run_directory(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(3))
    record = tmp_path / "child.pid"
    env = subprocess_env(EVAL_CHILD_PID=str(record))

    def run() -> tuple[int, str]:
        # Output to a file: the child inherits it, and a pipe would stay open for its life.
        with (tmp_path / "stderr.txt").open("w+") as stderr:
            code = subprocess.call(
                [*EXE, "eval", str(data), "-w", "eval_flows:Forking", "--out", "run"],
                cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=stderr, timeout=60,
            )  # fmt: skip
            stderr.seek(0)
            return code, stderr.read()

    try:
        code, stderr = run()
        assert code == 0, stderr
        os.kill(int(record.read_text()), 0)  # the child lives on
        started = time.monotonic()
        code, stderr = run()
        took = time.monotonic() - started
    finally:
        if record.exists():
            os.kill(int(record.read_text()), signal.SIGKILL)
    assert code == 0, stderr
    assert "3 rollouts, 3 already done" in stderr
    # A resume kept out by the child would wait the lock's whole LOCK_WAIT_S, then fail; this one
    # took only its own time (seconds on a loaded machine).
    assert took < store.LOCK_WAIT_S, f"the resume waited {took:.1f}s for the lock"


# -- the human channel ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_closed_stderr_does_not_fail_the_run(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(20, metadata={"sleep": 0.1}))
    proc = subprocess.Popen(
        [*EXE, "eval", str(data), "-w", "eval_flows:Sleepy", "-g", "eval_flows:ExactMatch",
         "--out", "run", "-c", "2", "--max-error-rate", "1"],
        cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip  # as `2>&1 | head -1`
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=30) == 0
    assert first.startswith(b"osmosis-run: 20 rollouts -> run")
    summary = read_summary(tmp_path / "run")
    assert summary is not None
    assert (summary.interrupted, summary.complete, summary.rollouts) == (False, True, 20)


def test_a_blocked_event_loop_is_said_in_one_line_from_any_thread(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from osmosis_run.cli.progress import Reporter

    reporter = Reporter(jsonl=False, live=False)
    said = threading.Thread(target=reporter.blocked, args=("q3.s0", 5.2))
    said.start()
    said.join()
    reporter.blocked(None, 12)
    assert capsys.readouterr().err == (
        "osmosis-run: rollout q3.s0 has held the event loop for 5s (blocking code in an async "
        "workflow: use await or asyncio.to_thread); deadlines and the first Ctrl-C wait until it returns\n"
        "osmosis-run: a rollout has held the event loop for 12s (blocking code in an async "
        "workflow: use await or asyncio.to_thread); deadlines and the first Ctrl-C wait until it returns\n"
    )


def test_a_resume_says_how_many_failures_it_keeps(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(3))
    args = ["eval", str(data), "-w", "eval_flows:Flaky", "--out", "run"]
    assert cli(*args).exit_code == 3
    again = cli(*args)
    assert again.exit_code == 3
    assert again.stderr.splitlines()[0] == (
        "osmosis-run: 3 rollouts, 3 already done (3 of them failed and are kept as they are; "
        "--retry-failed runs them again) -> run"
    )
