"""The Ray actor's batch protocol (``run_batch`` then ``more``), on the host: no Ray here.

``_ray_actor.RolloutActor`` imports no Ray, so its batches are driven directly with a stub
executor whose rollouts finish when the test says: replies come as rollouts finish (a slow one
does not hold back its batch-mates), rollouts finishing together come in one reply, one
cancelled rollout answers None, and a cancelled call ends its batch. Its scratch directory is
removed by ``release()``, or, once the actor is dead, by the next actor's ``sweep_scratch``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from osmosis_run.backends import _ray_actor
from osmosis_run.backends._ray_actor import (
    SCRATCH_PREFIX,
    Chunk,
    Item,
    RolloutActor,
    sweep_scratch,
)
from osmosis_run.run.seam import Attempt, AttemptResult
from osmosis_run.run.threads import WorkerThreads, default_size
from osmosis_run.sdk.types import ExecutionOutcome, ExecutionRequest, ExecutionResult


def on_a_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test on a fresh event loop."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


class Gates:
    """A stub executor: each rollout waits for its gate, then succeeds (or raises)."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []
        self.raises: set[str] = set()

    def gate(self, rollout_id: str) -> asyncio.Event:
        return self.gates.setdefault(rollout_id, asyncio.Event())

    async def run(self, attempt: Attempt, deadlines: Any) -> AttemptResult:
        rid = attempt.request.id
        try:
            await self.gate(rid).wait()
        except asyncio.CancelledError:
            self.cancelled.append(rid)
            raise
        if rid in self.raises:
            raise RuntimeError(f"bug in {rid}")
        outcome = ExecutionOutcome(workflow=ExecutionResult(status="success"))
        return AttemptResult(outcome, 1.0, None)


def items(*ids: str) -> list[Item]:
    return [(ExecutionRequest(id=i, prompt=[]), 1, "http://m/v1", None) for i in ids]


def actor_with(gates: Gates) -> RolloutActor:
    actor = RolloutActor()
    actor._executor = gates  # type: ignore[assignment]
    return actor


def ids(chunk: Chunk) -> list[int]:
    return sorted(index for index, _ in chunk)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@on_a_loop
async def test_replies_come_as_rollouts_finish_and_a_slow_one_holds_back_no_other() -> None:
    gates = Gates()
    actor = actor_with(gates)
    first = asyncio.create_task(actor.run_batch(7, items("a", "b", "c")))
    await settle()
    gates.gate("b").set()
    chunk, done = await asyncio.wait_for(first, 5)
    assert (ids(chunk), done) == ([1], False)
    gates.gate("a").set()
    chunk, done = await asyncio.wait_for(actor.more(7), 5)
    assert (ids(chunk), done) == ([0], False)
    gates.gate("c").set()
    chunk, done = await asyncio.wait_for(actor.more(7), 5)
    assert (ids(chunk), done) == ([2], True)
    reply = chunk[0][1]
    assert reply is not None
    assert reply[0].workflow.status == "success"
    with pytest.raises(KeyError):  # the batch is over: the actor keeps nothing of it
        await actor.more(7)


@on_a_loop
async def test_rollouts_that_finish_together_come_in_one_reply() -> None:
    gates = Gates()
    actor = actor_with(gates)
    call = asyncio.create_task(actor.run_batch(1, items("a", "b", "c", "d")))
    await settle()
    for rid in "abcd":
        gates.gate(rid).set()
    chunk, done = await asyncio.wait_for(call, 5)
    assert (ids(chunk), done) == ([0, 1, 2, 3], True)


@on_a_loop
async def test_one_rollout_cancelled_answers_none_and_the_others_run_on() -> None:
    gates = Gates()
    actor = actor_with(gates)
    call = asyncio.create_task(actor.run_batch(2, items("a", "b")))
    await settle()
    actor.cancel(["a"])
    chunk, done = await asyncio.wait_for(call, 5)
    assert (chunk, done) == ([(0, None)], False)
    gates.gate("b").set()
    chunk, done = await asyncio.wait_for(actor.more(2), 5)
    assert (ids(chunk), done) == ([1], True)
    assert gates.cancelled == ["a"]


@on_a_loop
async def test_a_cancelled_call_cancels_what_its_batch_still_runs() -> None:
    gates = Gates()
    actor = actor_with(gates)
    call = asyncio.create_task(actor.run_batch(3, items("a", "b")))
    await settle()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await settle()
    assert sorted(gates.cancelled) == ["a", "b"]
    with pytest.raises(KeyError):
        await actor.more(3)


@on_a_loop
async def test_a_rollout_that_raises_ends_its_batch_with_the_error() -> None:
    gates = Gates()
    gates.raises.add("a")
    actor = actor_with(gates)
    call = asyncio.create_task(actor.run_batch(4, items("a", "b")))
    await settle()
    gates.gate("a").set()
    with pytest.raises(RuntimeError, match="bug in a"):
        await asyncio.wait_for(call, 5)
    await settle()
    assert gates.cancelled == ["b"]


# -- the scratch directory: removed by release(), or by a later actor when this one died ---


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


class Blocking:
    """A stub executor whose rollouts all meet in ``asyncio.to_thread`` (a blocking client)."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=5)

    async def run(self, attempt: Attempt, deadlines: Any) -> AttemptResult:
        await asyncio.to_thread(self.barrier.wait)
        return AttemptResult(
            ExecutionOutcome(workflow=ExecutionResult(status="success")), 1.0, None
        )


@on_a_loop
async def test_the_actor_runs_as_many_blocking_calls_at_once_as_its_window() -> None:
    # More rollouts than asyncio's default executor has threads (min(32, cores + 4)).
    parties = default_size(None) + 4
    actor = actor_with(Blocking(parties))  # type: ignore[arg-type]
    actor._window = parties  # what setup(window=...) sets
    chunk, done = await actor.run_batch(1, items(*(f"r{i}" for i in range(parties))))
    replies = list(chunk)
    while not done:
        chunk, done = await actor.more(1)
        replies.extend(chunk)
    assert sorted(index for index, _ in replies) == list(range(parties))
    assert all(reply is not None and reply[0].workflow.status == "success" for _, reply in replies)
    assert isinstance(asyncio.get_running_loop()._default_executor, WorkerThreads)  # type: ignore[attr-defined]


@pytest.mark.skipif(os.name != "posix", reason="the sweep tests processes with signal 0")
def test_a_later_actor_removes_what_dead_actors_of_this_host_left(tmp_path: Path) -> None:
    host = _ray_actor._host_prefix()
    dead, alive = dead_pid(), os.getpid()
    for name in (f"{host}{dead}-abc", f"{host}{alive}-def", f"{SCRATCH_PREFIX}otherhost-{dead}-x"):
        (tmp_path / name / "r1.s0" / "artifacts").mkdir(parents=True)
    (tmp_path / f"{host}{dead}-file").write_text("a file, not a scratch directory")
    (tmp_path / f"{host}notapid-x").mkdir()
    (tmp_path / "unrelated").mkdir()
    assert sweep_scratch(str(tmp_path)) == [f"{host}{dead}-abc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [
            f"{host}{alive}-def",
            f"{SCRATCH_PREFIX}otherhost-{dead}-x",
            f"{host}{dead}-file",
            f"{host}notapid-x",
            "unrelated",
        ]
    )
    assert sweep_scratch(str(tmp_path / "missing")) == []


def test_release_removes_the_actors_scratch_directory(tmp_path: Path) -> None:
    actor = RolloutActor()
    root = tmp_path / f"{_ray_actor._scratch_prefix(os.getpid())}x"
    (root / "r1.s0" / "artifacts").mkdir(parents=True)  # a rollout cancelled before it shipped
    actor._root = root
    actor.release()
    assert not root.exists()
    actor.release()  # twice: nothing left to do


def test_release_leaves_a_shared_run_directory_alone(tmp_path: Path) -> None:
    actor = RolloutActor()
    actor._root, actor._ship = tmp_path, False  # --ray-shared-fs: the run's own rollouts/
    actor.release()
    assert tmp_path.is_dir()


# What an actor checks from its node, and what a failed connection says ---------------------


@on_a_loop
async def test_reach_says_whether_this_node_reaches_the_models_address() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    actor = RolloutActor()
    try:
        assert await actor.reach(f"http://127.0.0.1:{port}/v1/rollouts/a") is None
    finally:
        server.close()
        await server.wait_closed()
    assert await actor.reach(f"http://127.0.0.1:{port}/v1") == "Connection refused"
    assert (
        await actor.reach("http://127.0.0.1:99999/v1")
        == "http://127.0.0.1:99999/v1 has no valid port"
    )


def _failed(message: str) -> ExecutionOutcome:
    return ExecutionOutcome(
        workflow=ExecutionResult(status="failure", err_message=message, err_category="agent_error")
    )


def test_a_rollout_that_cannot_connect_names_the_node_and_its_url() -> None:
    url = "http://10.0.0.1:4000/v1/rollouts/a"
    said = _ray_actor._say_where(_failed("APIConnectionError: Connection error."), "10.0.0.2", url)
    assert said.workflow.err_message == (
        "APIConnectionError: Connection error. (on Ray node 10.0.0.2, model URL "
        "http://10.0.0.1:4000/v1/rollouts/a)"
    )
    other = _failed("ValueError: bad answer")
    assert _ray_actor._say_where(other, "10.0.0.2", url) is other
    assert _ray_actor._say_where(_failed("connection refused"), "n", "").workflow.err_message == (
        "connection refused"
    )
