"""The CPU-bound grader of the processes benchmark (W13); copied into its workspace.

``Burn`` spends ``BURN_S`` of its thread's CPU time in a pure-Python loop, then rewards 1.0 when
the last message's content equals the label, as ``perf_flows.ExactMatch`` does. The amount is
CPU time, not wall time nor a count of iterations: a grader preempted by the other programs on a
shared machine still does the same work, and what the benchmark compares is where that work
runs (one interpreter, or worker processes on every core).
"""

from __future__ import annotations

import time

from osmosis_run import Grader, GraderContext

BURN_S = 0.02
_STEP = 1000  # loop iterations between two looks at the clock (tens of microseconds)


def burn(seconds: float) -> int:
    """Spend ``seconds`` of this thread's CPU time in Python bytecode; return a checksum."""
    end = time.thread_time() + seconds
    total = 0
    while time.thread_time() < end:
        for i in range(_STEP):
            total = (total + i * i) % 1_000_003
    return total


class Burn(Grader):
    """Burn ``BURN_S`` of CPU in pure Python, then reward an exact match."""

    async def grade(self, ctx: GraderContext) -> None:
        """Burn, then set the reward."""
        burn(BURN_S)
        messages = ctx.sample.messages if ctx.sample is not None else []
        answer = messages[-1].get("content") if messages else None
        ctx.set_reward(1.0 if answer == ctx.label else 0.0)
