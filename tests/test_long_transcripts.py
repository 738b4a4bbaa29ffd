"""Long transcripts stay off the event loop's critical path (issue 26).

Finished rollouts of hundreds of kilobytes are handed to the writer process without waiting for
it: a thread writes them into its pipe (``writer._Pipe``). When the disk cannot keep up, new
rollouts wait to start (``RunStore.room``, awaited by the lifecycle) while those running go on.
Each test holds the writer back for as long as it likes (a stopped child process, or the fake's
``behind``), so what it checks is structural: what returned, what waited, not how fast.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from conftest import fake_run_settings

from osmosis_run.backends.fake import FakeExecutor
from osmosis_run.run.plan import prepare
from osmosis_run.run.scheduler import Scheduler
from osmosis_run.store.store import BATCH, WRITE_QUEUE, WRITE_QUEUE_BYTES, RunStore
from osmosis_run.store.writer import MemoryWriter, WriterProcess

TRANSCRIPT = 256 << 10  # each document of a rollout: its results line, result.json, trajectory
ROLLOUTS = 64  # 48 MiB in all, 48 times the pipe


def document(rollout_id: str, kind: str) -> bytes:
    return json.dumps({"rollout_id": rollout_id, kind: "x" * TRANSCRIPT}).encode()


def test_long_transcripts_are_handed_over_while_the_writer_process_reads_nothing(
    tmp_path: Path,
) -> None:
    made = RunStore(tmp_path / "run")  # the run directory, for the writer process to write
    made.open({"k": 1}, fresh=False)
    made.close()
    writer = WriterProcess(
        tmp_path / "run/results.jsonl",
        tmp_path / "run/rollouts",
        queue=WRITE_QUEUE * BATCH,
        queue_bytes=WRITE_QUEUE_BYTES,
    )
    store = RunStore(tmp_path / "run", writer=writer)
    store.open({"k": 1}, fresh=False)
    turns = 0

    async def probe() -> None:  # a rollout that keeps running meanwhile
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    async def main() -> None:
        loop = asyncio.get_running_loop()
        replies = store.start_writer()
        assert replies is not None
        loop.add_reader(replies, store.poll)
        running = loop.create_task(probe())
        os.kill(writer.pid, signal.SIGSTOP)
        try:
            for i in range(ROLLOUTS):  # every call returns though the child reads nothing
                rid = f"r{i}.s0"
                line, result = document(rid, "line"), document(rid, "result")
                store.write_rollout(rid, line=line, result=result, trajectory=document(rid, "t"))
            store.hand_off()
            assert store.pending == ROLLOUTS  # none of them all in the pipe: not handed over
            starting = loop.create_task(store.room())  # the next rollout waits to start...
            before = turns
            await asyncio.sleep(0.05)
            assert turns > before  # ...while the running one goes on
            assert not starting.done()
        finally:
            os.kill(writer.pid, signal.SIGCONT)
        await asyncio.wait_for(starting, timeout=60)  # the writer caught up: it starts
        running.cancel()
        loop.remove_reader(replies)

    asyncio.run(main())
    store.close()
    assert store.pending == 0
    lines = results_lines(tmp_path / "run")
    assert [line["rollout_id"] for line in lines] == [f"r{i}.s0" for i in range(ROLLOUTS)]
    trajectory = tmp_path / f"run/rollouts/r{ROLLOUTS - 1}.s0/trajectory.json"
    assert trajectory.read_bytes() == document(f"r{ROLLOUTS - 1}.s0", "t")


def results_lines(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(raw) for raw in (run_dir / "results.jsonl").read_bytes().splitlines()]


def test_rollouts_start_only_once_the_writer_is_no_longer_behind(tmp_path: Path) -> None:
    plan = prepare(fake_run_settings(tmp_path, rows=6))
    writer = MemoryWriter(in_background=True)
    writer.behind = True
    store = RunStore(plan.run_dir, writer=writer)
    store.open(plan.fingerprint, fresh=False)
    executor = FakeExecutor()
    scheduler = Scheduler(plan, executor, store)

    async def main() -> None:
        run = asyncio.get_running_loop().create_task(scheduler.run())
        for _ in range(10):  # half a dozen hand-off ticks
            await asyncio.sleep(0.01)
        assert executor.attempts == []  # every rollout waits for the writer, none runs
        writer.behind = False  # the next hand-off tick sees it
        outcome = await asyncio.wait_for(run, timeout=30)
        assert outcome.summary.rollouts == 6

    asyncio.run(main())
    assert len(executor.attempts) == 6
    assert sorted(rid for rid, *_ in writer.items) == [f"q{i}.s0" for i in range(6)]
