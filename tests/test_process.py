"""osmosis_run.cli.process: signals, gc and worker threads of eval, grade and serve.

The exits (a second signal, a signal after the rollouts ended) end the process, so they are
tested in child processes: tests/test_eval_process.py, tests/test_kill_storm.py and
tests/test_server_cli.py.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import threading

import pytest

from osmosis_run.cli.process import Interrupts, fewer_collections, run_loop


def test_the_first_signal_inside_stopping_calls_stop_on_the_loop() -> None:
    async def main() -> None:
        stopped = asyncio.Event()
        with Interrupts() as interrupts, interrupts.stopping(stopped.set):
            signal.raise_signal(signal.SIGTERM)
            await asyncio.wait_for(stopped.wait(), 10)

    handler = signal.getsignal(signal.SIGTERM)
    asyncio.run(main())
    assert signal.getsignal(signal.SIGTERM) is handler  # restored at the end


def test_fewer_collections_while_inside_then_as_before() -> None:
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold() == (10_000, 10, 10)
    assert gc.get_threshold() == before


def test_run_loop_says_what_blocking_calls_it_left(capsys: pytest.CaptureFixture[str]) -> None:
    gate = threading.Event()

    async def main() -> int:
        task = asyncio.ensure_future(asyncio.to_thread(gate.wait))
        await asyncio.sleep(0.05)
        task.cancel()
        return 7

    try:
        assert run_loop(main(), concurrency=2, who="osmosis-run test") == 7
    finally:
        gate.set()
    assert capsys.readouterr().err == (
        "osmosis-run test: 1 blocking call was still running in worker threads "
        "(asyncio.to_thread) after their rollouts were cancelled; not waiting for them\n"
    )
