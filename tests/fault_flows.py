"""Workflows and graders that misbehave, for the engine's fault tests (``fault_flows``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from eval_flows import Stubborn as Stubborn  # the same one, as fault_flows:Stubborn

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    Grader,
    GraderContext,
)


class UserStop(BaseException):
    """A BaseException subclass of the user's own."""


def _raise(kind: str) -> None:
    if kind == "keyboard_interrupt":
        raise KeyboardInterrupt
    if kind == "generator_exit":
        raise GeneratorExit
    if kind == "custom":
        raise UserStop("user stop")
    if kind == "system_exit":
        raise SystemExit(3)


async def _stray_cancel() -> None:
    """Await a helper task that was cancelled: its CancelledError escapes into the caller."""
    helper = asyncio.ensure_future(asyncio.sleep(10))
    await asyncio.sleep(0)
    helper.cancel()
    await helper


def _echo(ctx: AgentWorkflowContext[Any]) -> list[dict[str, Any]]:
    return [*ctx.prompt, {"role": "assistant", "content": ctx.prompt[-1]["content"]}]


class Raises(AgentWorkflow[AgentWorkflowConfig]):
    """Raise what metadata.raise names (a BaseException), or let a CancelledError escape."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        kind = (ctx.metadata or {}).get("raise", "")
        if kind == "cancelled":
            await _stray_cancel()
        _raise(kind)
        return _echo(ctx)


class Echo(AgentWorkflow[AgentWorkflowConfig]):
    """Answer with the last message."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        return _echo(ctx)


class GraderRaises(Grader):
    """Raise what metadata.raise names while grading."""

    async def grade(self, ctx: GraderContext) -> None:
        kind = (ctx.metadata or {}).get("raise", "")
        if kind == "cancelled":
            await _stray_cancel()
        _raise(kind)
        ctx.set_reward(1.0)


class Unwritable(AgentWorkflow[AgentWorkflowConfig]):
    """Return what JSON cannot hold: metadata.bad is "bytes" or "surrogate"."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        bad: Any = b"\xff\xfe" if (ctx.metadata or {}).get("bad") == "bytes" else "ok \ud800"
        return [*ctx.prompt, {"role": "assistant", "content": bad}]


class Blocking(AgentWorkflow[AgentWorkflowConfig]):
    """Hold the event loop with time.sleep(metadata.block), then answer."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        time.sleep(float((ctx.metadata or {}).get("block", 0)))  # noqa: ASYNC251  (on purpose)
        return _echo(ctx)


class _Response:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


class RateLimitError(Exception):
    """Looks like an HTTP client's error: the response, with its headers, on the exception."""

    def __init__(self, message: str, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.response = _Response(headers)


ATTEMPTS: dict[str, int] = {}


class RateLimited(AgentWorkflow[AgentWorkflowConfig]):
    """Fail with a 429 carrying Retry-After (metadata.retry_after) on the first attempts."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        meta = ctx.metadata or {}
        key = f"{meta['run']}:{ctx.prompt[-1]['content']}"
        ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
        if ATTEMPTS[key] <= int(meta.get("fail", 2)):
            headers = {"retry-after": str(meta["retry_after"])} if "retry_after" in meta else {}
            raise RateLimitError("429 Too Many Requests", headers)
        return _echo(ctx)


class Match(Grader):
    """1.0 when the answer equals the label."""

    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == ctx.label else 0.0)


class Printer(AgentWorkflow[AgentWorkflowConfig]):
    """Sleep metadata.sleep seconds, then answer (a live-stdin test's workflow)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        await asyncio.sleep(float((ctx.metadata or {}).get("sleep", 0)))
        return _echo(ctx)
