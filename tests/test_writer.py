"""The writer process and the inline writer: same bytes, errors, crashes, the run-dir lock."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import subprocess_env

from osmosis_run.errors import RunDirError
from osmosis_run.store import _writer_child as child
from osmosis_run.store import store as store_module
from osmosis_run.store import writer as writer_module
from osmosis_run.store.store import RunStore
from osmosis_run.store.writer import InlineWriter, Item, WriterProcess, child_command, pack


def items(n: int, *, start: int = 0) -> list[Item]:
    """n rollouts; every third has no trajectory, every fifth a multi-byte name."""
    made: list[Item] = []
    for i in range(start, start + n):
        rid = f"r{i}-é.s0" if i % 5 == 0 else f"r{i}.s0"
        line = json.dumps({"rollout_id": rid, "i": i}).encode()
        result = json.dumps({"result": i, "pad": "x" * (i % 700)}).encode()
        trajectory = None if i % 3 == 0 else json.dumps({"steps": [i] * 50}).encode()
        made.append((rid, line, result, trajectory))
    return made


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` and its bytes (None for a directory)."""
    return {
        str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def process(tmp_path: Path) -> Iterator[WriterProcess]:
    (tmp_path / "rollouts").mkdir()
    writer = WriterProcess(tmp_path / "results.jsonl", tmp_path / "rollouts", queue=2)
    yield writer
    writer.abandon()


def test_both_writers_leave_the_same_bytes(tmp_path: Path) -> None:
    runs = {}
    for name in ("inline", "process"):
        where = tmp_path / name
        (where / "rollouts").mkdir(parents=True)
        batches = [items(7), items(40, start=7), items(1, start=47)]
        if name == "inline":
            inline = InlineWriter(where / "results.jsonl", where / "rollouts")
            for batch in batches:
                inline.write(batch)
            inline.finish()
        else:
            writer = WriterProcess(where / "results.jsonl", where / "rollouts", queue=1)
            made = writer.make_dirs([rid for rid, *_ in batches[1]])
            for batch in batches:
                writer.write(batch)
            writer.finish()
            assert made.result(timeout=0) == []
        runs[name] = tree(where)
    inline_tree = {k: v for k, v in runs["inline"].items() if not k.endswith("artifacts")}
    process_tree = {k: v for k, v in runs["process"].items() if not k.endswith("artifacts")}
    assert process_tree == inline_tree
    lines = (tmp_path / "process/results.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["i"] for line in lines] == list(range(48))
    assert runs["process"]["rollouts/r7.s0/artifacts"] is None
    assert "rollouts/r6.s0/trajectory.json" not in process_tree
    assert process_tree["rollouts/r5-é.s0/result.json"] == items(1, start=5)[0][2]


def test_both_writers_take_the_rollout_file_names_from_the_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer process cannot import layout.py: its names come from writer.py, which does.
    monkeypatch.setattr(writer_module, "RESULT_JSON", "r.json")
    monkeypatch.setattr(writer_module, "TRAJECTORY_JSON", "t.json")
    monkeypatch.setattr(writer_module, "ARTIFACTS", "a")
    rollout = [("x.s0", b"{}", b'{"r": 1}', b'{"t": 1}')]
    for name in ("inline", "process"):
        (tmp_path / name / "rollouts").mkdir(parents=True)
        results, rollouts = tmp_path / name / "results.jsonl", tmp_path / name / "rollouts"
        if name == "inline":
            inline = InlineWriter(results, rollouts)
            inline.write(rollout)
            inline.finish()
        else:
            writer = WriterProcess(results, rollouts, queue=1)
            writer.make_dirs(["x.s0"])
            writer.write(rollout)
            writer.finish()
        assert tree(rollouts) == {
            "x.s0": None,
            **({"x.s0/a": None} if name == "process" else {}),
            "x.s0/r.json": b'{"r": 1}',
            "x.s0/t.json": b'{"t": 1}',
        }


def test_make_dirs_answers_with_the_ids_it_could_not_make(
    tmp_path: Path, process: WriterProcess
) -> None:
    (tmp_path / "rollouts/blocked.s0").write_text("a file where a directory should go")
    made = process.make_dirs(["a.s0", "blocked.s0", "b.s0"])
    process.finish()
    assert made.result(timeout=0) == ["blocked.s0"]
    assert (tmp_path / "rollouts/a.s0/artifacts").is_dir()
    assert (tmp_path / "rollouts/b.s0/artifacts").is_dir()


def test_make_dirs_accepts_directories_that_exist(tmp_path: Path, process: WriterProcess) -> None:
    (tmp_path / "rollouts/a.s0/artifacts").mkdir(parents=True)
    (tmp_path / "rollouts/a.s0/artifacts/kept.txt").write_text("kept")
    made = process.make_dirs(["a.s0"])
    process.finish()
    assert made.result(timeout=0) == []
    assert (tmp_path / "rollouts/a.s0/artifacts/kept.txt").read_text() == "kept"


def test_a_write_error_is_raised_with_its_errno_and_path(tmp_path: Path) -> None:
    (tmp_path / "rollouts/r1.s0").mkdir(parents=True)
    (tmp_path / "rollouts/r1.s0/result.json").mkdir()  # a directory where the file should go
    writer = WriterProcess(tmp_path / "results.jsonl", tmp_path / "rollouts", queue=5)
    writer.write(items(1))
    writer.write(items(1, start=1))
    writer.write(items(1, start=2))
    with pytest.raises(OSError, match="Is a directory") as raised:
        writer.finish()
    assert raised.value.errno == errno.EISDIR
    assert raised.value.filename == str(tmp_path / "rollouts/r1.s0/result.json")
    # r0 committed; r1 failed, so its line is not there; r2 came after the error: not written
    assert (tmp_path / "results.jsonl").read_bytes() == items(1)[0][1] + b"\n"
    assert not (tmp_path / "rollouts/r2.s0").exists()


def test_a_write_error_surfaces_at_the_next_hand_over_once_the_queue_is_full(
    tmp_path: Path, process: WriterProcess
) -> None:
    (tmp_path / "rollouts/r1.s0/result.json").mkdir(parents=True)
    process.write(items(1, start=1))
    process.write(items(1, start=2))
    with pytest.raises(IsADirectoryError):
        process.write(items(1, start=3))  # a third batch waits for the first answer


def test_a_dead_writer_process_is_an_error_naming_its_exit(
    tmp_path: Path, process: WriterProcess
) -> None:
    os.kill(process.pid, signal.SIGKILL)
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # dead, not yet reaped

    def keep_writing() -> None:
        for _ in range(100):  # the first writes may still fit in the pipe
            process.write(items(3))

    with pytest.raises(OSError, match=r"^\[Errno 5\] the writer process exited \(exit code -9\)$"):
        keep_writing()


def test_a_torn_last_frame_is_dropped(tmp_path: Path) -> None:
    (tmp_path / "rollouts").mkdir()
    whole = pack(items(2))
    torn = pack(items(2, start=2))
    frames = child.HEADER.pack(b"W", 1, len(whole)) + whole
    frames += child.HEADER.pack(b"W", 2, len(torn)) + torn[:-7]
    done = subprocess.run(
        child_command(tmp_path / "results.jsonl", tmp_path / "rollouts"),
        input=frames,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == child.HEADER.pack(b"A", 1, 0)
    assert (tmp_path / "results.jsonl").read_bytes() == b"".join(i[1] + b"\n" for i in items(2))
    assert not (tmp_path / "rollouts/r2.s0").exists()


KILLED_RUNNER = """
import os, signal, sys, time
from pathlib import Path
from osmosis_run.store.store import RunStore
store = RunStore(Path(sys.argv[1]), background=True)
store.open({"k": 1}, fresh=False)
store.start_writer()
for i in range(400):
    line = ('{"rollout_id": "r%d.s0", "row_index": %d}' % (i, i)).encode()
    big = b"[]" * (40_000 if i % 50 == 0 else 2000)  # some batches outgrow the pipe
    store.write_rollout(f"r{i}.s0", line=line, result=b"{}" * 2000, trajectory=big)
store.hand_off()
while store.pending:  # handed over: all in the writer process's pipe
    time.sleep(0.01)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_runner_loses_nothing_it_handed_over_and_a_resume_waits(tmp_path: Path) -> None:
    run = tmp_path / "run"
    killed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KILLED_RUNNER), str(run)],
        env=subprocess_env(),
        capture_output=True,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = RunStore(run)
    resumed.open({"k": 1}, fresh=False)  # waits for the orphaned writer process to finish
    lines = (run / "results.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["row_index"] for line in lines] == list(range(400))
    assert (run / "rollouts/r399.s0/trajectory.json").read_bytes() == b"[]" * 2000
    assert (run / "rollouts/r350.s0/trajectory.json").read_bytes() == b"[]" * 40_000
    resumed.close()


def test_a_run_directory_another_runner_holds_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "LOCK_WAIT_S", 0.2)
    first = RunStore(tmp_path / "run")
    first.open({"k": 1}, fresh=False)
    started = time.monotonic()
    with pytest.raises(RunDirError) as refused:
        RunStore(tmp_path / "run").open({"k": 1}, fresh=False)
    assert time.monotonic() - started >= 0.2
    assert str(refused.value) == (
        f"{tmp_path / 'run'} is being written by another osmosis-run; wait for it to finish "
        "or choose another --out"
    )
    first.close()
    second = RunStore(tmp_path / "run")
    second.open({"k": 1}, fresh=False)  # free again
    second.close()


def test_the_lock_is_on_the_directory_and_leaves_no_file(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.open({"k": 1}, fresh=False)
    fd = os.open(tmp_path / "run", os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        store.close()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["fingerprint.json", "rollouts"]


def test_a_file_system_without_locks_runs_unlocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", unsupported)
    store = RunStore(tmp_path / "run")
    store.open({"k": 1}, fresh=False)
    store.write_rollout("a.s0", line=b'{"rollout_id": "a.s0"}', result=b"{}", trajectory=None)
    store.close()
    assert (tmp_path / "run/results.jsonl").read_bytes() == b'{"rollout_id": "a.s0"}\n'


def test_unread_answers_never_deadlock_the_hand_over(tmp_path: Path) -> None:
    # Every directory fails (rollouts/ is a file), so each answer repeats its batch's ids: the
    # answers outgrow their pipe while the requests (3.8 MB) outgrow theirs and the child's buffer.
    (tmp_path / "rollouts").write_text("not a directory")
    writer = WriterProcess(tmp_path / "results.jsonl", tmp_path / "rollouts", queue=2)
    batches = [[f"{'x' * 120}{b}-{i}.s0" for i in range(30)] for b in range(1000)]
    futures = [writer.make_dirs(batch) for batch in batches]
    writer.finish()
    assert [f.result(timeout=0) for f in futures] == batches


# --- long transcripts: nothing waits for the pipe, back-pressure is said, not imposed ----------

BIG = 1 << 20  # each of a big rollout's documents: three of them outgrow the pipe (1 MiB)


def big_items(n: int, *, start: int = 0) -> list[Item]:
    """n rollouts of three 1 MiB documents each."""
    made: list[Item] = []
    for i in range(start, start + n):
        rid = f"r{i}.s0"
        line = json.dumps({"rollout_id": rid, "pad": "x" * BIG}).encode()
        made.append((rid, line, b"R" * BIG, b"T" * BIG))
    return made


@pytest.fixture
def stopped(tmp_path: Path) -> Iterator[WriterProcess]:
    """A writer process that reads nothing until the test resumes it (``SIGCONT``)."""
    (tmp_path / "rollouts").mkdir()
    writer = WriterProcess(
        tmp_path / "results.jsonl", tmp_path / "rollouts", queue=64, queue_bytes=64 << 20
    )
    os.kill(writer.pid, signal.SIGSTOP)
    try:
        yield writer
    finally:
        if writer.pid not in _resumed:
            resume(writer)
        writer.abandon()


_resumed: set[int] = set()


def resume(writer: WriterProcess) -> None:
    """Let a stopped writer process run again."""
    _resumed.add(writer.pid)
    os.kill(writer.pid, signal.SIGCONT)


def answered(process: WriterProcess) -> None:
    """Take replies until the writer process has answered everything sent so far."""
    while process.unsent or process.behind:
        select.select([process.reply_fd], [], [], 0.1)
        process.poll()
    assert process.error is None


def test_a_batch_larger_than_the_pipe_is_handed_over_without_waiting_for_the_child(
    tmp_path: Path, stopped: WriterProcess
) -> None:
    stopped.write(big_items(3))  # 9 MiB to a child that reads nothing: returns all the same
    assert stopped.unsent == 3
    stopped.write(items(2))  # queued behind it, in order
    assert stopped.unsent == 5
    resume(stopped)
    stopped.finish()
    assert stopped.unsent == 0
    lines = (tmp_path / "results.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["rollout_id"] for line in lines] == [
        "r0.s0", "r1.s0", "r2.s0", "r0-é.s0", "r1.s0"
    ]  # fmt: skip
    assert (tmp_path / "rollouts/r2.s0/trajectory.json").read_bytes() == b"T" * BIG


def test_small_batches_go_into_the_pipe_at_once(tmp_path: Path, stopped: WriterProcess) -> None:
    stopped.write(items(2))  # fits in the pipe: handed over even though the child is stopped
    assert stopped.unsent == 0


def test_a_writer_far_behind_says_so_until_it_has_caught_up(tmp_path: Path) -> None:
    (tmp_path / "rollouts").mkdir()
    writer = WriterProcess(
        tmp_path / "results.jsonl", tmp_path / "rollouts", queue=8, queue_bytes=32 << 20
    )
    os.kill(writer.pid, signal.SIGSTOP)
    try:
        for i in range(5):
            writer.write(items(1, start=i))
        assert not writer.behind  # 5 of 8 rollouts unanswered
        writer.write(items(1, start=5))
        assert writer.behind  # 3/4 of ``queue``
    finally:
        os.kill(writer.pid, signal.SIGCONT)
    answered(writer)  # caught up: below 1/2 of ``queue`` (and 1/8 of ``queue_bytes``)
    assert not writer.behind
    os.kill(writer.pid, signal.SIGSTOP)
    try:
        writer.write(big_items(2, start=6))  # 6 MiB of 32: within both bounds
        assert not writer.behind
        writer.write(big_items(1, start=8))
        assert writer.behind  # 1/4 of ``queue_bytes``, and still within ``queue``
        assert writer.unsent == 3
    finally:
        os.kill(writer.pid, signal.SIGCONT)
    answered(writer)
    assert not writer.behind
    writer.finish()
    assert len((tmp_path / "results.jsonl").read_bytes().splitlines()) == 9


def test_abandon_drops_what_is_not_in_the_pipe_and_commits_only_whole_batches(
    tmp_path: Path, stopped: WriterProcess
) -> None:
    batches = [big_items(2, start=2 * b) for b in range(3)]
    for batch in batches:
        stopped.write(batch)
    assert stopped.unsent == 6
    resume(stopped)
    stopped.abandon()  # a frame half in the pipe is torn, and the child drops it
    lines = (tmp_path / "results.jsonl").read_bytes().splitlines()
    written = [json.loads(line)["rollout_id"] for line in lines]
    whole = [[rid for batch in batches[:n] for rid, *_ in batch] for n in range(4)]
    assert written in whole


def test_a_child_that_dies_while_a_big_batch_waits_is_lost_with_its_exit_code(
    tmp_path: Path, stopped: WriterProcess
) -> None:
    stopped.write(big_items(3))
    _resumed.add(stopped.pid)  # dead: nothing to resume
    os.kill(stopped.pid, signal.SIGKILL)
    with pytest.raises(OSError, match=r"^\[Errno 5\] the writer process exited \(exit code -9\)$"):
        stopped.finish()


def test_the_pipe_keeps_every_byte_in_order_however_little_it_takes_at_a_time() -> None:
    # A pipe of one page, read in odd sizes: writes are cut anywhere, within a piece or between
    # two, and the pipe is full as often as not; frames of up to 3,000 pieces (beyond IOV_MAX).
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
    os.set_blocking(write_end, False)
    rng = random.Random(26)
    frames = [
        [rng.randbytes(rng.choice((1, 7, 100, 4095, 4096, 5000, 70_000))) for _ in range(n)]
        for n in (1, 2, 3, 50, 3000, 5, 1, 400)
    ]
    received = bytearray()

    def drain() -> None:
        while chunk := os.read(read_end, rng.choice((1, 13, 1000, 4096, 9000))):
            received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    pipe = writer_module._Pipe(write_end)
    try:
        for frame in frames:
            pipe.send(frame, 1)
        while pipe.unsent:
            time.sleep(0.01)
    finally:
        pipe.close()
        os.close(write_end)
        reader.join()
        os.close(read_end)
    assert pipe.error is None
    assert bytes(received) == b"".join(piece for frame in frames for piece in frame)
