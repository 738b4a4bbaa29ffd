"""Workflows the Ray tests run on actors; each test copies this file into its cwd (shipped).

They leave traces the tests read back: the node and process each rollout ran in (an artifact,
and a line in the file ``metadata.log``), and whether the API key reached the actor.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import threading
import time
from typing import Any

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    get_rollout_context,
)


def _node() -> str:
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # not on a Ray worker
        return "driver"


def _note(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)


def _wait_for_file(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.02)


_barriers: dict[int, threading.Barrier] = {}
_barriers_lock = threading.Lock()


def _meet(parties: int) -> None:
    """A blocking call: wait in a thread until ``parties`` rollouts of this process are here."""
    with _barriers_lock:
        barrier = _barriers.setdefault(parties, threading.Barrier(parties, timeout=20))
    barrier.wait()


def _answer(ctx: AgentWorkflowContext[Any]) -> list[dict[str, Any]]:
    last = str([m for m in ctx.prompt if m["role"] == "user"][-1]["content"])
    return [*ctx.prompt, {"role": "assistant", "content": last}]


class Traced(AgentWorkflow[AgentWorkflowConfig]):
    """Sleep metadata.sleep seconds (default 0), note where it ran, then echo.

    Writes ``node.txt`` (and ``metadata.big`` bytes to ``big.bin``) as artifacts, appends
    ``rollout pid node`` to the file ``metadata.log``, kills its own process when
    ``metadata.die``, waits (before sleeping) until the file ``metadata.wait_for`` exists, or
    until ``metadata.meet`` rollouts of its process meet in ``asyncio.to_thread`` (a blocking
    client), and answers "key ok" when the rollout's context holds the key whose SHA-256 is
    ``metadata.key_sha``.
    """

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        meta = ctx.metadata or {}
        rollout = get_rollout_context()
        rid = rollout.rollout_id if rollout is not None else "?"
        if meta.get("log"):
            _note(str(meta["log"]), f"{rid} {os.getpid()} {_node()}\n")
        if meta.get("die"):  # kill the process it runs in: its actor, on every attempt
            os.kill(os.getpid(), signal.SIGKILL)
        if meta.get("wait_for"):
            await asyncio.to_thread(_wait_for_file, str(meta["wait_for"]))
        if meta.get("meet"):
            await asyncio.to_thread(_meet, int(meta["meet"]))
        await asyncio.sleep(float(meta.get("sleep", 0)))
        if ctx.artifacts_dir is not None:
            (ctx.artifacts_dir / "node.txt").write_text(_node())
            if meta.get("big"):
                (ctx.artifacts_dir / "big.bin").write_bytes(b"x" * int(meta["big"]))
        output = _answer(ctx)
        if "key_sha" in meta:
            key = (rollout.api_key if rollout is not None else None) or ""
            ok = hashlib.sha256(key.encode()).hexdigest() == meta["key_sha"]
            return [*output[:-1], {**output[-1], "content": "key ok" if ok else "no key"}]
        return output
