"""The loop runner (run/loop.py): ``asyncio.run`` for a whole command, on the one event-loop
factory, without waiting for user code that ignores its cancellation."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from osmosis_run.eventloop import new_event_loop
from osmosis_run.run.loop import CLOSE_GRACE_S, run_to_completion
from osmosis_run.run.threads import WorkerThreads


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Set at the end of the test, so that no call a test leaves blocked outlives it."""
    event = threading.Event()
    yield event
    event.set()


def test_it_gives_mains_result_on_a_loop_of_the_one_factory() -> None:
    made = new_event_loop()
    made.close()

    async def main() -> type[asyncio.AbstractEventLoop]:
        return type(asyncio.get_running_loop())

    assert run_to_completion(main()) is type(made)


def test_what_main_raises_is_raised() -> None:
    async def main() -> None:
        raise LookupError("from main")

    with pytest.raises(LookupError, match="from main"):
        run_to_completion(main())


def test_a_task_that_ignores_its_cancellation_is_dropped_after_the_grace() -> None:
    unwound: list[str] = []

    async def stubborn() -> None:
        try:
            while True:
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    continue
        finally:
            unwound.append("closed")  # its frames unwind when the runner closes it

    async def main() -> str:
        asyncio.get_running_loop().create_task(stubborn())
        await asyncio.sleep(0)
        return "done"

    began = time.monotonic()
    assert run_to_completion(main()) == "done"
    assert CLOSE_GRACE_S <= time.monotonic() - began < CLOSE_GRACE_S + 2
    assert unwound == ["closed"]


def test_a_task_that_ends_when_cancelled_is_not_waited_for_the_grace() -> None:
    async def main() -> None:
        asyncio.get_running_loop().create_task(asyncio.sleep(60))

    began = time.monotonic()
    run_to_completion(main())
    assert time.monotonic() - began < CLOSE_GRACE_S


def test_run_to_completion_makes_it_the_default_executor_and_does_not_wait_for_it(
    gate: threading.Event,
) -> None:
    pool = WorkerThreads(4)

    async def main() -> str:
        name = await asyncio.to_thread(lambda: threading.current_thread().name)
        left = asyncio.ensure_future(asyncio.to_thread(gate.wait))
        await asyncio.sleep(0.05)
        left.cancel()  # a rollout cancelled while its call runs on in the thread
        return name

    began = time.monotonic()
    assert run_to_completion(main(), pool) == "osmosis-run worker 0"
    assert time.monotonic() - began < CLOSE_GRACE_S + 2
    assert pool.running == 1
