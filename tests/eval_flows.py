"""Workflows and graders the eval tests run (importable as ``eval_flows``)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    ConcurrencyConfig,
    Grader,
    GraderContext,
    get_rollout_context,
)

_attempts: dict[str, int] = {}


def _last_user(ctx: AgentWorkflowContext[Any]) -> str:
    return str([m for m in ctx.prompt if m["role"] == "user"][-1]["content"])


class Echo(AgentWorkflow[AgentWorkflowConfig]):
    """Answer with the last user message."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        if ctx.artifacts_dir is not None:
            (ctx.artifacts_dir / "echo.txt").write_text(_last_user(ctx))
        return [*ctx.prompt, {"role": "assistant", "content": _last_user(ctx)}]


class Sleepy(AgentWorkflow[AgentWorkflowConfig]):
    """Sleep metadata.sleep seconds (default 0.3), then echo."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        await asyncio.sleep(float((ctx.metadata or {}).get("sleep", 0.3)))
        return [*ctx.prompt, {"role": "assistant", "content": _last_user(ctx)}]


class Forever(AgentWorkflow[AgentWorkflowConfig]):
    """Never finish."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> None:
        await asyncio.sleep(3600)


class Flaky(AgentWorkflow[AgentWorkflowConfig]):
    """Fail with a transient error on the first attempt of each rollout."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        key = str(ctx.artifacts_dir and ctx.artifacts_dir.resolve())  # unique per run and rollout
        _attempts[key] = _attempts.get(key, 0) + 1
        if _attempts[key] == 1:
            raise ConnectionError("upstream hiccup")
        return [*ctx.prompt, {"role": "assistant", "content": _last_user(ctx)}]


class Invalid(AgentWorkflow[AgentWorkflowConfig]):
    """Always fail with a validation error."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> None:
        raise ValueError("bad output")


class Leaky(AgentWorkflow[AgentWorkflowConfig]):
    """Put the API key in an error message, as a careless workflow might."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> None:
        rollout = get_rollout_context()
        assert rollout is not None
        raise RuntimeError(f"auth failed for key {rollout.api_key}")


class Marker(AgentWorkflow[AgentWorkflowConfig]):
    """Echo, and leave a file named after the rollout in $EVAL_MARKERS (counts executions)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        await asyncio.sleep(float((ctx.metadata or {}).get("sleep", 0.05)))
        rollout = get_rollout_context()
        assert rollout is not None
        marker = Path(os.environ["EVAL_MARKERS"]) / rollout.rollout_id
        with marker.open("a") as f:
            f.write("x")
        return [*ctx.prompt, {"role": "assistant", "content": _last_user(ctx)}]


class ExactMatch(Grader):
    """1.0 when the answer equals the label."""

    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == ctx.label else 0.0)


class SlowGrader(Grader):
    """Never finish grading."""

    async def grade(self, ctx: GraderContext) -> None:
        await asyncio.sleep(3600)


class Remover(Grader):
    """Drop every sample."""

    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        ctx.sample.remove_sample = True


two_at_once = AgentWorkflowConfig(name="two", concurrency=ConcurrencyConfig(max_concurrent=2))


class Stubborn(AgentWorkflow[AgentWorkflowConfig]):
    """Refuse to be cancelled (a workflow that swallows CancelledError)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue


class Quitter(AgentWorkflow[AgentWorkflowConfig]):
    """Call sys.exit() from inside a rollout."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> None:
        raise SystemExit(4)


class SeedEcho(AgentWorkflow[AgentWorkflowConfig]):
    """Answer with this rollout's seed."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        rollout = get_rollout_context()
        assert rollout is not None
        return [*ctx.prompt, {"role": "assistant", "content": str(rollout.seed)}]


class Wrong(AgentWorkflow[AgentWorkflowConfig]):
    """Always answer something that matches no label."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        return [*ctx.prompt, {"role": "assistant", "content": "wrong"}]


class Blocking(AgentWorkflow[AgentWorkflowConfig]):
    """Block the event loop with synchronous code (a bug users do write)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> None:
        import time

        time.sleep(3600)  # noqa: ASYNC251


class InThread(AgentWorkflow[AgentWorkflowConfig]):
    """Call a blocking client the advised way, in asyncio.to_thread, and have it never answer."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> None:
        import time

        await asyncio.to_thread(time.sleep, 3600)


# Every rollout of a run of ``AT_ONCE`` waits in its own thread until all of them are waiting.
AT_ONCE = 40
_together = threading.Barrier(AT_ONCE, timeout=20)


class Together(AgentWorkflow[AgentWorkflowConfig]):
    """Meet the other ``AT_ONCE`` rollouts at a barrier, each in asyncio.to_thread, then echo."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        await asyncio.to_thread(_together.wait)
        return [*ctx.prompt, {"role": "assistant", "content": _last_user(ctx)}]


class FailingMarker(Marker):
    """Marker, then fail with an agent error when metadata.fail is set (it ran, and failed)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        messages = await super().run(ctx)
        if (ctx.metadata or {}).get("fail"):
            raise RuntimeError("this row fails by design")
        return messages


class Chatty(AgentWorkflow[AgentWorkflowConfig]):
    """Echo, after printing to stdout itself and from a subprocess (as debugging code does)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        import subprocess

        print(f"print from {_last_user(ctx)}")
        subprocess.run(["echo", f"echo from {_last_user(ctx)}"], check=True)  # noqa: ASYNC221
        return [*ctx.prompt, {"role": "assistant", "content": _last_user(ctx)}]


class LoggingLeaky(Leaky):
    """Leaky, in a module that configures logging itself (osmosis-run's records are shown)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> None:
        import logging

        logging.basicConfig()
        await super().run(ctx)


class Forking(AgentWorkflow[AgentWorkflowConfig]):
    """Echo; the first rollout forks a child that lives on (its PID in $EVAL_CHILD_PID)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        _fork_once(Path(os.environ["EVAL_CHILD_PID"]))
        return [*ctx.prompt, {"role": "assistant", "content": _last_user(ctx)}]


def _fork_once(record: Path) -> None:
    import time

    if record.exists():
        return
    pid = os.fork()
    if pid == 0:  # the child: outlive the run, then leave without cleaning up
        time.sleep(30)
        os._exit(0)
    record.write_text(str(pid))


class Logging(AgentWorkflow[AgentWorkflowConfig]):
    """Echo, logging at INFO and DEBUG on its own logger (as a user's workflow does)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        import logging

        log = logging.getLogger("user.flow")
        log.info("thinking about %s", _last_user(ctx))
        log.debug("details of %s", _last_user(ctx))
        if (ctx.metadata or {}).get("fail"):
            raise RuntimeError("this row fails by design")
        return [*ctx.prompt, {"role": "assistant", "content": _last_user(ctx)}]


class LoggingGrader(Grader):
    """1.0 for every sample, logging at INFO on its own logger (as a user's grader does)."""

    async def grade(self, ctx: GraderContext) -> None:
        import logging

        logging.getLogger("user.grader").info("grading against %s", ctx.label)
        ctx.set_reward(1.0)
