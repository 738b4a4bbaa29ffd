"""The store's logic (batching, hand-off, redaction, close and its failures) over ``MemoryWriter``.

No writer process and no rollout files: the store drives any ``Writer`` the same way, so what it
hands over, when, and what it does when the writer fails are checked on the fake.
"""

from __future__ import annotations

import ast
import asyncio
import errno
import fcntl
import json
import os
from pathlib import Path

import pytest

from osmosis_run.errors import InfrastructureError
from osmosis_run.results.records import Summary
from osmosis_run.store import layout
from osmosis_run.store.store import BATCH, BATCH_BYTES, RunStore, read_summary
from osmosis_run.store.writer import Item, MemoryWriter

FULL = OSError(errno.ENOSPC, "No space left on device")
SECRET = "sk-secret-0123456789"


def opened(tmp_path: Path, writer: MemoryWriter, *, secrets: tuple[str, ...] = ()) -> RunStore:
    store = RunStore(tmp_path / "run", secrets=secrets, writer=writer)
    store.open({"k": 1}, fresh=False)
    return store


def rollout(store: RunStore, i: int) -> Item:
    """Write rollout ``i``; return what the writer should get for it."""
    item: Item = (f"r{i}.s0", b'{"rollout_id": "r%d.s0"}' % i, b'{"result": %d}' % i, None)
    rid, line, result, trajectory = item
    store.write_rollout(rid, line=line, result=result, trajectory=trajectory)
    return item


def locked(run_dir: Path) -> bool:
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_writer_in_this_process_gets_each_rollout_as_it_finishes(tmp_path: Path) -> None:
    writer = MemoryWriter()
    store = opened(tmp_path, writer)
    assert store.start_writer() is None
    assert not store.writer_process
    assert store.make_dirs(["r0.s0"]) is None
    sent = [rollout(store, i) for i in range(3)]
    assert writer.batches == [[item] for item in sent]
    assert store.pending == 0
    store.close()
    assert (writer.finished, writer.abandoned) == (True, False)


def test_a_background_writer_gets_batches_and_what_hand_off_finds(tmp_path: Path) -> None:
    writer = MemoryWriter(in_background=True)
    store = opened(tmp_path, writer)
    store.start_writer()
    assert store.writer_process
    sent = [rollout(store, i) for i in range(BATCH + 5)]
    assert writer.batches == [sent[:BATCH]]
    assert store.pending == 5
    store.hand_off()
    store.hand_off()  # nothing new: no empty batch
    assert writer.batches == [sent[:BATCH], sent[BATCH:]]
    assert store.pending == 0
    last = rollout(store, BATCH + 5)
    store.close()
    assert writer.batches[-1] == [last]  # close hands over what is left, then finishes
    assert writer.finished


def test_a_batch_of_long_transcripts_is_handed_over_at_batch_bytes(tmp_path: Path) -> None:
    writer = MemoryWriter(in_background=True)
    store = opened(tmp_path, writer)
    store.start_writer()
    third = b"x" * (BATCH_BYTES // 9 + 1)  # a rollout's three documents: a third of a batch
    for i in range(4):
        store.write_rollout(f"r{i}.s0", line=third, result=third, trajectory=third)
    assert [len(batch) for batch in writer.batches] == [3]
    assert store.pending == 1
    store.close()
    assert [len(batch) for batch in writer.batches] == [3, 1]


def test_pending_counts_the_rollouts_not_all_in_the_writer_process_yet(tmp_path: Path) -> None:
    writer = MemoryWriter(in_background=True)
    store = opened(tmp_path, writer)
    store.start_writer()
    rollout(store, 0)
    store.hand_off()
    writer.unsent = 1  # as a writer process whose pipe is full says
    assert store.pending == 1
    rollout(store, 1)
    assert store.pending == 2
    store.close()


def test_room_waits_while_the_writer_is_behind_and_not_otherwise(tmp_path: Path) -> None:
    writer = MemoryWriter(in_background=True)
    store = opened(tmp_path, writer)

    async def main() -> None:
        await store.room()  # no writer yet: nothing to wait for
        store.start_writer()
        await store.room()
        writer.behind = True
        waiting = [asyncio.create_task(store.room()) for _ in range(3)]
        for _ in range(5):
            await asyncio.sleep(0)
        assert not any(task.done() for task in waiting)
        store.poll()  # answers came, and it is still behind
        await asyncio.sleep(0)
        assert not any(task.done() for task in waiting)
        waiting[0].cancel()  # a rollout cancelled while it waits leaves the others waiting
        await asyncio.sleep(0)
        writer.behind = False
        store.poll()
        await asyncio.wait_for(asyncio.gather(*waiting[1:]), timeout=5)
        writer.behind = True
        late = asyncio.create_task(store.room())
        await asyncio.sleep(0)
        writer.behind = False
        store.hand_off()  # a hand-off looks too (a wait in ``write`` may have taken the answers)
        await asyncio.wait_for(late, timeout=5)
        writer.behind = True
        last = asyncio.create_task(store.room())
        await asyncio.sleep(0)
        store.close()  # no writer any more: nothing to wait for
        await asyncio.wait_for(last, timeout=5)

    asyncio.run(main())


def test_the_first_rollout_starts_the_writer(tmp_path: Path) -> None:
    writer = MemoryWriter()
    store = opened(tmp_path, writer)
    item = rollout(store, 0)
    assert writer.items == [item]


def test_make_dirs_goes_to_a_background_writer(tmp_path: Path) -> None:
    writer = MemoryWriter(in_background=True)
    writer.unmade.add("b.s0")
    store = opened(tmp_path, writer)
    store.start_writer()
    made = store.make_dirs(["a.s0", "b.s0"])
    assert made is not None
    assert made.result(timeout=0) == ["b.s0"]
    assert writer.dirs == [["a.s0", "b.s0"]]
    store.poll()
    store.close()


def test_every_document_is_redacted_before_the_writer_gets_it(tmp_path: Path) -> None:
    writer = MemoryWriter()
    store = opened(tmp_path, writer, secrets=(SECRET,))
    quoted = json.dumps({"error": f'key "{SECRET}"'}).encode()
    store.write_rollout("a.s0", line=quoted, result=quoted, trajectory=quoted)
    store.write_rollout("b.s0", line=b"{}", result=quoted, trajectory=None)
    redacted = b'{"error":"key \\"[REDACTED]\\""}'  # re-encoded, compact
    assert writer.items == [
        ("a.s0", redacted, redacted, redacted),
        ("b.s0", b"{}", redacted, None),
    ]
    store.close()


def test_a_failed_hand_off_is_an_infrastructure_error_naming_results_jsonl(
    tmp_path: Path,
) -> None:
    writer = MemoryWriter(in_background=True)
    store = opened(tmp_path, writer)
    rollout(store, 0)
    writer.error = FULL
    with pytest.raises(InfrastructureError) as raised:
        store.hand_off()
    assert str(raised.value) == (
        f"disk full writing {tmp_path / 'run/results.jsonl'}: No space left on device"
    )
    with pytest.raises(InfrastructureError):
        store.close()
    assert not locked(tmp_path / "run")


def test_close_abandons_a_writer_that_fails_the_last_batch_and_still_writes_the_summary(
    tmp_path: Path,
) -> None:
    writer = MemoryWriter(in_background=True)
    store = opened(tmp_path, writer)
    rollout(store, 0)
    writer.error = OSError(errno.EISDIR, "Is a directory", "run/rollouts/r0.s0/result.json")
    asked: list[bool] = []

    def summarize(all_durable: bool) -> Summary:
        asked.append(all_durable)
        return Summary(rollouts=7)

    with pytest.raises(InfrastructureError) as raised:
        store.close(summarize)
    assert str(raised.value) == (
        "file system error writing run/rollouts/r0.s0/result.json: Is a directory"
    )
    assert (writer.finished, writer.abandoned) == (False, True)
    assert asked == [False]
    summary = read_summary(tmp_path / "run")
    assert summary is not None
    assert summary.rollouts == 7  # written, still under the lock, counting what did reach disk
    assert not locked(tmp_path / "run")


def test_a_summary_given_as_a_value_is_not_written_when_the_results_are_not_durable(
    tmp_path: Path,
) -> None:
    writer = MemoryWriter()
    store = opened(tmp_path, writer)
    rollout(store, 0)
    writer.error = FULL  # the fsync at the end fails
    with pytest.raises(InfrastructureError) as raised:
        store.close(Summary(rollouts=1))
    assert str(raised.value) == (
        f"disk full writing {tmp_path / 'run/results.jsonl'}: No space left on device"
    )
    assert (writer.finished, writer.abandoned) == (True, False)
    assert read_summary(tmp_path / "run") is None
    assert not locked(tmp_path / "run")


def test_close_writes_the_summary_once_everything_is_durable(tmp_path: Path) -> None:
    writer = MemoryWriter(in_background=True)
    store = opened(tmp_path, writer)
    rollout(store, 0)
    asked: list[bool] = []

    def summarize(all_durable: bool) -> Summary:
        asked.append(all_durable)
        assert writer.finished  # summary.json never counts a result not yet durable
        return Summary(rollouts=1, complete=True)

    store.close(summarize)
    assert asked == [True]
    assert read_summary(tmp_path / "run") == Summary(rollouts=1, complete=True)
    assert not locked(tmp_path / "run")


def test_a_store_that_never_started_a_writer_closes_cleanly(tmp_path: Path) -> None:
    writer = MemoryWriter()
    store = opened(tmp_path, writer)
    store.poll()
    store.hand_off()
    store.close(Summary())
    assert (writer.batches, writer.finished, writer.abandoned) == ([], False, False)
    assert read_summary(tmp_path / "run") == Summary()


def test_the_fake_refuses_use_after_the_store_ended_it(tmp_path: Path) -> None:
    writer = MemoryWriter()
    store = opened(tmp_path, writer)
    rollout(store, 0)
    store.close()
    with pytest.raises(RuntimeError, match=r"^the writer was used after it was finished$"):
        writer.write([])


def test_every_name_of_the_run_directory_is_spelled_only_in_the_layout() -> None:
    names = {getattr(layout, name) for name in layout.__all__ if name.isupper()}
    spelled = []
    for path in sorted(Path(layout.__file__).parent.glob("*.py")):
        if path.name == "layout.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        prose_and_slots = {  # docstrings, and attribute names that happen to match
            id(inner)
            for node in ast.walk(tree)
            if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
            or (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__slots__")
            for inner in ast.walk(node)
        }
        spelled += [
            f"{path.name}:{node.lineno}: {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and id(node) not in prose_and_slots
            and node.value in names
        ]
    assert spelled == []
