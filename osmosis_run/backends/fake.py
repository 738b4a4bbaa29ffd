"""A fake executor: attempts answered by a function, for testing the engine without user code.

As httpx ships ``MockTransport``, osmosis-run ships ``FakeExecutor``: the engine's own tests use
it for scheduling, deadlines, retries, stops and backend failures. The handler gets each
``Attempt`` and returns (or awaits to) an ``ExecutionOutcome`` or a whole ``AttemptResult``; it
may raise ``AttemptLost``. Its work runs within the engine's deadline for the attempt's
workflow stage, exactly as an in-process workflow would.

    executor = FakeExecutor(lambda attempt: FakeExecutor.success(reward=1.0))
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from osmosis_run._construct import construct
from osmosis_run.run.rollouts import timed_out
from osmosis_run.run.seam import Attempt, AttemptResult, Deadlines
from osmosis_run.sdk.types import (
    ExecutionOutcome,
    ExecutionResult,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
)

__all__ = ["FakeExecutor", "Handler"]

Handler = Callable[[Attempt], "ExecutionOutcome | AttemptResult | Awaitable[Any]"]


class FakeExecutor:
    """An ``Executor`` whose attempts ``handler`` answers; it records what it was asked.

    Attributes:
        attempts: every attempt it was given, in order.
        in_flight: attempts running now; ``peak_in_flight``: the most at once.
        opened, closed: whether ``open`` and ``close`` were called.
    """

    def __init__(self, handler: Handler | None = None, *, limit: int | None = 4) -> None:
        self.handler: Handler = handler or (lambda _: self.success())
        self._limit = limit
        self.attempts: list[Attempt] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self.opened = False
        self.closed = False

    @property
    def limit(self) -> int | None:
        """The concurrency the fake reports as its own default."""
        return self._limit

    @property
    def local_artifacts(self) -> bool:
        """False: a fake writes no artifacts."""
        return False

    async def open(self) -> None:
        """Note that the engine opened it."""
        self.opened = True

    async def close(self) -> None:
        """Note that the engine closed it."""
        self.closed = True

    def adopt_artifacts_dirs(self, rollout_ids: Iterable[str]) -> None:
        """Nothing to adopt."""

    async def run(self, attempt: Attempt, deadlines: Deadlines) -> AttemptResult:
        """Answer one attempt with the handler, within the attempt's workflow deadline."""
        self.attempts.append(attempt)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        started = time.perf_counter()
        try:
            seconds = attempt.request.agent_timeout_sec
            answer = await deadlines.within(
                "workflow",
                seconds,
                self._answer(attempt),
                rollout_id=attempt.request.id,
                timed_out=lambda: _outcome(timed_out("workflow", seconds or 0, None)),
            )
        finally:
            self.in_flight -= 1
        if isinstance(answer, AttemptResult):
            return answer
        return AttemptResult(answer, (time.perf_counter() - started) * 1000, None)

    async def _answer(self, attempt: Attempt) -> ExecutionOutcome | AttemptResult:
        value = self.handler(attempt)
        if inspect.isawaitable(value):
            value = await value
        if not isinstance(value, ExecutionOutcome | AttemptResult):
            raise TypeError(f"a FakeExecutor handler must give an ExecutionOutcome, got {value!r}")
        return value

    @staticmethod
    def success(
        reward: float | None = 1.0, messages: list[dict[str, Any]] | None = None
    ) -> ExecutionOutcome:
        """A graded success (``reward=None``: an ungraded one)."""
        sample = RolloutSample(
            messages=messages or [{"role": "assistant", "content": "ok"}], reward=reward
        )
        done = ExecutionResult(status=RolloutStatus.SUCCESS, sample=sample)
        if reward is None:
            return construct(ExecutionOutcome, workflow=done, grader=None)
        return construct(ExecutionOutcome, workflow=done, grader=done)

    @staticmethod
    def failure(
        message: str = "boom",
        category: RolloutErrorCategory = RolloutErrorCategory.AGENT_ERROR,
        **extra_fields: Any,
    ) -> ExecutionOutcome:
        """A failed workflow (``agent_error`` unless told otherwise)."""
        return _outcome(
            ExecutionResult(
                status=RolloutStatus.FAILURE,
                err_message=message,
                err_category=category,
                extra_fields={"stage": "workflow", **extra_fields},
            )
        )


def _outcome(workflow: ExecutionResult) -> ExecutionOutcome:
    return construct(ExecutionOutcome, workflow=workflow, grader=None)
