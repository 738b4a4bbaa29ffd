"""Workflows and graders for the worker-process tests (``--backend processes``).

``Flow`` does what its prompt says; ``Judge`` grades as ``metadata["grade"]`` says. Each
rollout reports the process it ran in as the metric ``pid``, so the tests can tell workers
apart, find them in ``/proc`` and kill them.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import subprocess
import time
from typing import Any

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    Grader,
    GraderContext,
    get_rollout_context,
)


def _crash(how: str) -> None:
    if how == "segv":
        ctypes.string_at(0)  # SIGSEGV in native code
    elif how == "abort":
        os.abort()
    elif how == "exit":
        os._exit(3)


class Flow(AgentWorkflow[AgentWorkflowConfig]):
    """``ok`` echoes; ``segv``/``abort``/``exit`` end the process; ``block`` holds the event
    loop (``time.sleep``) for ``metadata.seconds``; ``spawn`` starts ``sleep 600`` (its pid
    written to ``metadata.pidfile``) and then blocks; ``hog`` holds ``metadata.mb`` MiB;
    ``slow`` awaits ``metadata.seconds``; ``burn`` spins the CPU for ``metadata.seconds``;
    ``model`` calls the model through its rollout context (``metadata.calls`` times)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> AgentWorkflowOutput:
        mode = str(ctx.prompt[-1]["content"])
        meta = ctx.metadata or {}
        seconds = float(meta.get("seconds", 30))
        answer = "ok"
        _crash(mode)
        if mode == "block":
            time.sleep(seconds)  # noqa: ASYNC251  (on purpose: it never yields)
        elif mode == "spawn":
            child = subprocess.Popen(["sleep", "600"])  # noqa: ASYNC220
            with open(str(meta["pidfile"]), "w", encoding="utf-8") as f:  # noqa: ASYNC230
                f.write(str(child.pid))
            time.sleep(seconds)  # noqa: ASYNC251
        elif mode == "hog":
            held = bytearray(int(meta["mb"]) * 1024 * 1024)
            held[::4096] = b"x" * len(held[::4096])  # touch every page: resident
            await asyncio.sleep(seconds)
        elif mode == "print":
            print("a workflow's print, which must not reach stdout")
            os.write(1, b"and a write to file descriptor 1\n")
        elif mode == "slow":
            await asyncio.sleep(seconds)
        elif mode == "burn":
            end = time.process_time() + seconds
            while time.process_time() < end:
                pass
        elif mode == "model":
            answer = await asyncio.to_thread(_call_model, int(meta.get("calls", 1)))
        if ctx.artifacts_dir is not None:
            (ctx.artifacts_dir / "pid.txt").write_text(str(os.getpid()), encoding="utf-8")
        return AgentWorkflowOutput(
            messages=[*ctx.prompt, {"role": "assistant", "content": answer}],
            metrics={"pid": float(os.getpid())},
        )


def _call_model(calls: int) -> str:
    """Calls through the rollout's context with the openai client (blocking)."""
    import openai

    rollout = get_rollout_context()
    assert rollout is not None
    assert rollout.chat_completions_url
    client = openai.OpenAI(base_url=rollout.chat_completions_url, api_key=rollout.api_key)
    text = ""
    for _ in range(calls):
        done = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        text = done.choices[0].message.content or ""
    client.close()
    return text


class Judge(Grader):
    """Exact match, unless ``metadata.grade`` says ``segv`` or ``block`` (for
    ``metadata.seconds``)."""

    async def grade(self, ctx: GraderContext) -> None:
        meta: dict[str, Any] = ctx.metadata or {}
        how = meta.get("grade", "exact")
        _crash(str(how))
        if how == "block":
            time.sleep(float(meta.get("seconds", 30)))  # noqa: ASYNC251
        assert ctx.sample is not None
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == ctx.label else 0.0)
