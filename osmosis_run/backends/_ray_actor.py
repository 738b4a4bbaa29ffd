"""What runs on a Ray worker: one actor holding the loaded workflow and grader.

The driver (``backends/ray.py``) wraps ``RolloutActor`` with ``ray.remote``; this module imports
no Ray, so it reads (and is tested) as plain Python. An actor answers:

- ``hello()``: the versions and the node it runs on, by host name and by the IP address Ray
  knows it by (the driver refuses a skew);
- ``setup(spec, key, ...)``: load the classes (``spec`` is the run's ``RunSpec`` fields), set
  the API key as this process's ``OSMOSIS_API_KEY`` (a method argument, never a constructor
  argument or ``runtime_env`` field, which Ray keeps in its control store), and check the
  shared-file-system probe. Returns None, or the one-line reason it cannot run rollouts. Its
  ``window`` (the run's rollouts in flight) sizes the threads of ``asyncio.to_thread`` on the
  actor, as in a local run (``run/threads.py``): a workflow calling a blocking client makes as
  many calls at once as the actor holds rollouts, not asyncio's ``min(32, cores + 4)``;
- ``run_batch(key, items)``: start a batch of attempts, run concurrently, each with
  ``LocalExecutor`` within its stage deadlines; return the replies of the first to finish
  (with the batch-mates finishing right after them, see ``_gather``) and whether that was
  all. The driver then calls ``more(key)`` for the next replies, until all came: a slow
  rollout does not hold back the replies of the ones beside it, and a batch that finishes
  together costs one plain call (a Ray streaming generator costs about a millisecond more per
  round trip). The artifacts each rollout wrote come back with its reply. A call cancelled or
  failed ends its batch (its rollouts still running are cancelled);
- ``reach(url)``: whether this node reaches the model's address (the driver's gateway, or the
  endpoint with ``--no-gateway``): a TCP connection, within ``REACH_TIMEOUT_S``. Returns None,
  or why not; the driver's own preflight proves nothing about the other nodes. A rollout whose
  workflow failed on a connection error has the node and the URL it was given added to its
  error message;
- ``cancel(ids)``: cancel those rollouts (a Ctrl-C, a deadline of the driver's);
- ``release()``: remove the actor's scratch directory; the driver calls it before it ends the
  actor. An actor that died without it (killed, its node lost) leaves its directory behind:
  the next actor set up on that host removes the directories of actors whose process is gone.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pydantic

import osmosis_run
from osmosis_run.backends.local import LocalExecutor
from osmosis_run.backends.osmosis_ai import backend_for
from osmosis_run.errors import OsmosisRunError
from osmosis_run.run.components import load_components
from osmosis_run.run.deadlines import Deadlines
from osmosis_run.run.seam import Attempt
from osmosis_run.run.settings import EvalSettings
from osmosis_run.run.threads import WorkerThreads, default_size
from osmosis_run.sdk.backend import ARTIFACTS
from osmosis_run.sdk.context import RolloutContext
from osmosis_run.sdk.types import ExecutionOutcome, ExecutionRequest

__all__ = [
    "ARTIFACTS_CAP",
    "SCRATCH_PREFIX",
    "Chunk",
    "Item",
    "Reply",
    "RolloutActor",
    "sweep_scratch",
    "versions",
]


# What one rollout's artifacts may weigh to travel back with its reply; files past it (in path
# order) are left out and listed in result.json ("artifacts": {"omitted": [...]}).
ARTIFACTS_CAP = 16 << 20
# Actors keep artifacts in RAM (/dev/shm) until they are shipped, when this much of it is free.
SHM = "/dev/shm"
SCRATCH_RAM_FREE = 1 << 30
# An actor's scratch directory: <prefix><host>-<pid>-<random>, so that a later actor on the same
# host can tell the directories of dead actors (``sweep_scratch``).
SCRATCH_PREFIX = "osmosis-run-actor-"
# Past its deadline, how long a stage gets to honour its cancellation (as in the engine).
ABANDON_GRACE_S = 2.0
# Once a rollout of a batch has finished, its reply waits while batch-mates keep finishing
# (each within GATHER_S of the last), for GATHER_S plus GATHER_SHARE of the time the batch has
# run at most: one reply for rollouts that end together, not one round trip each.
GATHER_S = 0.002
GATHER_SHARE = 0.1
# How long ``reach`` waits for the model's address to accept a connection.
REACH_TIMEOUT_S = 5.0
# Words of a workflow's error that say it could not connect (openai's APIConnectionError,
# httpx's ConnectError, urllib's URLError, the OS's refusals).
_CONNECTION_WORDS = (
    "connection error",
    "connecterror",
    "connection refused",
    "connect call failed",
    "urlopen error",
    "name or service not known",
    "no route to host",
    "network is unreachable",
    "cannot connect",
)

# One attempt as the driver sends it: the request, the attempt number, the model endpoint,
# the rollout's seed. The API key is not in it: the actor has it in its environment.
Item = tuple[ExecutionRequest, int, str, int | None]
# One attempt's answer: outcome, workflow and grader milliseconds, artifacts shipped, omitted.
# None: the rollout was cancelled.
Reply = tuple[ExecutionOutcome, float | None, float | None, dict[str, bytes], tuple[str, ...]]
# What ``run_batch`` and ``more`` return: the replies of the rollouts that finished since the
# last call, each with its index in the batch.
Chunk = list[tuple[int, Reply | None]]


def versions() -> dict[str, str]:
    """What must match between the driver and the workers."""
    return {
        "osmosis-run": osmosis_run.__version__,
        "pydantic": pydantic.VERSION,
        "Python": ".".join(platform.python_version_tuple()[:2]),
    }


@dataclass(eq=False)
class _Batch:
    """One ``run_batch`` call's rollouts: the replies not handed over yet, how many are left."""

    left: int
    started: float
    finished: Chunk = field(default_factory=list)
    failed: list[BaseException] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class RolloutActor:
    """One actor of the pool: the user's classes, loaded once, running many rollouts."""

    def __init__(self) -> None:
        self._executor: LocalExecutor | None = None
        self._root: Path | None = None
        self._ship = True
        self._deadlines = Deadlines(abandon_grace_s=ABANDON_GRACE_S)  # the engine's rule, here
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._batches: dict[int, _Batch] = {}
        self._threads: WorkerThreads | None = None
        self._window: int | None = None
        self._node = ""

    def hello(self) -> dict[str, str]:
        """The versions that must match the driver's, and where this actor runs."""
        self._node = _node_ip()
        return {
            **versions(),
            "node": socket.gethostname(),
            "ip": self._node,
            "pid": str(os.getpid()),
        }

    async def reach(self, url: str) -> str | None:
        """Whether this node reaches ``url``'s host and port: None, or why not (one line)."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return f"{url} has no valid port"
        if _proxied(parts.scheme):
            return None  # through a proxy: the proxy's reachability is the client's business
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), REACH_TIMEOUT_S)
        except TimeoutError:
            return f"no answer within {REACH_TIMEOUT_S:g} s"
        except OSError as exc:
            return os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__
        writer.close()
        return None

    def setup(
        self,
        spec: dict[str, Any],
        key: str | None,
        *,
        shared_root: str | None = None,
        probe: tuple[str, str] | None = None,
        window: int | None = None,
    ) -> str | None:
        """Load the workflow and grader; None when ready, else why not (one line).

        ``window``: the run's rollouts in flight (None: no limit), which sizes the actor's
        threads for ``asyncio.to_thread``.
        """
        self._window = window
        if key:
            os.environ["OSMOSIS_API_KEY"] = key
        if probe is not None:
            problem = _check_probe(*probe)
            if problem is not None:
                return problem
        try:
            components = load_components(EvalSettings.model_validate(spec))
        except OsmosisRunError as exc:
            return str(exc)
        if shared_root is not None:
            self._root, self._ship = Path(shared_root), False
        else:
            scratch = _scratch()
            sweep_scratch(scratch or tempfile.gettempdir())
            self._root = Path(tempfile.mkdtemp(prefix=_scratch_prefix(os.getpid()), dir=scratch))
        # osmosis_ai classes get osmosis_ai's own context objects, as in a local run.
        self._executor = LocalExecutor(backend_for(components, artifact_root=self._root))
        return None

    async def run_batch(self, key: int, items: list[Item]) -> tuple[Chunk, bool]:
        """Start a batch; the replies of the first rollouts to finish, and whether that was all."""
        loop = asyncio.get_running_loop()
        if self._threads is None:  # the actor's loop is Ray's: its executor is set on first use
            self._threads = WorkerThreads(default_size(self._window))
            loop.set_default_executor(self._threads)
        batch = _Batch(left=len(items), started=loop.time())
        self._batches[key] = batch
        batch.tasks = [
            loop.create_task(self._run_into(batch, index, item)) for index, item in enumerate(items)
        ]
        return await self._next(key, batch)

    async def more(self, key: int) -> tuple[Chunk, bool]:
        """The next replies of a batch ``run_batch`` started, and whether that was all.

        Raises:
            KeyError: no such batch (it ended, or this actor never had it).
        """
        return await self._next(key, self._batches[key])

    async def _run_into(self, batch: _Batch, index: int, item: Item) -> None:
        try:
            reply = await self._run_one(item)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug: it ends the whole batch
            batch.failed.append(exc)
        else:
            batch.finished.append((index, reply))
        batch.wake.set()

    async def _next(self, key: int, batch: _Batch) -> tuple[Chunk, bool]:
        """Wait for a reply, gather the batch-mates finishing with it, hand them over."""
        try:
            await self._gather(batch)
        except BaseException:  # the call was cancelled (Ctrl-C, the driver's deadline)
            self._end(key, batch)
            raise
        if batch.failed:
            self._end(key, batch)
            raise batch.failed[0]
        chunk = batch.finished[:]
        batch.finished.clear()
        batch.wake.clear()
        batch.left -= len(chunk)
        if batch.left == 0:
            self._batches.pop(key, None)
        return chunk, batch.left == 0

    @staticmethod
    async def _gather(batch: _Batch) -> None:
        """Until a rollout has finished, then while batch-mates keep finishing.

        The reply goes when no batch-mate has finished for ``GATHER_S``, or when gathering has
        taken ``GATHER_S`` plus ``GATHER_SHARE`` of the time the batch has run: rollouts that
        end together travel in one reply, and a slow one holds the others back by no more.
        """
        await batch.wake.wait()
        loop = asyncio.get_running_loop()
        now = loop.time()
        end = now + GATHER_S + GATHER_SHARE * (now - batch.started)
        while len(batch.finished) < batch.left and not batch.failed and now < end:
            batch.wake.clear()
            try:
                await asyncio.wait_for(batch.wake.wait(), min(GATHER_S, end - now))
            except TimeoutError:
                return
            now = loop.time()

    def _end(self, key: int, batch: _Batch) -> None:
        """A batch whose call was cancelled or failed: cancel what still runs, forget it."""
        self._batches.pop(key, None)
        for task in batch.tasks:
            if not task.done():
                task.cancel()

    def release(self) -> None:
        """Remove this actor's scratch directory and what rollouts left in it (the run is over)."""
        if self._ship and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def cancel(self, rollout_ids: list[str]) -> None:
        """Cancel these rollouts, if they are running here."""
        for rollout_id in rollout_ids:
            task = self._running.get(rollout_id)
            if task is not None:
                task.cancel()

    async def _run_one(self, item: Item) -> Reply | None:
        executor = self._executor
        if executor is None:
            raise RuntimeError("RolloutActor.run_batch before a successful setup")
        request, number, url, seed = item
        context = RolloutContext(chat_completions_url=url, rollout_id=request.id, seed=seed)
        task = asyncio.get_running_loop().create_task(
            executor.run(Attempt(request, number, context), self._deadlines), name=request.id
        )
        self._running[request.id] = task
        try:
            result = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the whole call is being cancelled
            return None  # this rollout alone was cancelled
        finally:
            self._running.pop(request.id, None)
        files, omitted = await self._collect(request.id)
        outcome = _say_where(result.outcome, self._node or socket.gethostname(), url)
        return outcome, result.workflow_ms, result.grader_ms, files, omitted

    async def _collect(self, rollout_id: str) -> tuple[dict[str, bytes], tuple[str, ...]]:
        """The artifacts a rollout wrote (to travel back), its directory then removed."""
        if not self._ship or self._root is None:
            return {}, ()
        where = self._root / rollout_id
        try:
            with os.scandir(where / ARTIFACTS) as entries:
                empty = next(entries, None) is None
        except OSError:
            return {}, ()
        if empty:  # the common case: two system calls, on the loop
            try:
                os.rmdir(where / ARTIFACTS)
                os.rmdir(where)
            except OSError:
                shutil.rmtree(where, ignore_errors=True)
            return {}, ()
        return await asyncio.to_thread(_gather, where)


def _node_ip() -> str:
    """The IP address Ray knows this node by (host names repeat across hosts; else the name)."""
    try:
        import ray

        return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    except Exception:  # outside Ray (tests of this module): the host name
        return socket.gethostname()


def _proxied(scheme: str) -> bool:
    names = ("https_proxy", "all_proxy") if scheme == "https" else ("http_proxy", "all_proxy")
    return any(os.environ.get(n) or os.environ.get(n.upper()) for n in names)


def _say_where(outcome: ExecutionOutcome, node: str, url: str) -> ExecutionOutcome:
    """A workflow that failed to connect: its error names the node and the model URL it had."""
    workflow = outcome.workflow
    message = workflow.err_message
    if not url or not message or not any(w in message.lower() for w in _CONNECTION_WORDS):
        return outcome
    where = f" (on Ray node {node}, model URL {url})"
    return outcome.model_copy(
        update={"workflow": workflow.model_copy(update={"err_message": message + where})}
    )


def _scratch() -> str | None:
    """Where an actor's rollouts write artifacts until they travel back: RAM when it can.

    Making and removing two directories per rollout costs a millisecond or more on a busy disk
    (more than the rollout itself for short ones) and microseconds on tmpfs. ``/dev/shm`` is
    used when it has ``SCRATCH_RAM_FREE`` bytes free; else the system's temporary folder.
    """
    try:
        stat = os.statvfs(SHM)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    return SHM if free >= SCRATCH_RAM_FREE and os.access(SHM, os.W_OK) else None


def _host_prefix() -> str:
    """``<SCRATCH_PREFIX><host>-``: the start of every scratch directory of this host."""
    host = "".join(c if c.isalnum() or c in "._" else "_" for c in socket.gethostname())
    return f"{SCRATCH_PREFIX}{host}-"


def _scratch_prefix(pid: int) -> str:
    return f"{_host_prefix()}{pid}-"


def sweep_scratch(where: str) -> list[str]:
    """Remove the scratch directories that dead actors of this host and user left in ``where``.

    An actor ended by ``ray.kill`` or lost with its node never removes its own. Only a directory
    named for this host whose process no longer exists is removed (POSIX only: there a signal 0
    tests a process without touching it). Returns the names removed.
    """
    if os.name != "posix":
        return []
    mine = _host_prefix()
    removed: list[str] = []
    try:
        entries = list(os.scandir(where))
    except OSError:
        return removed
    for entry in entries:
        pid, dash, _ = entry.name.removeprefix(mine).partition("-")
        if not entry.name.startswith(mine) or not dash or not pid.isdigit():
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.getuid() or not entry.is_dir(
                follow_symlinks=False
            ):
                continue
        except OSError:
            continue
        if not _alive(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, as another user's
        return True
    return True


def _gather(where: Path) -> tuple[dict[str, bytes], tuple[str, ...]]:
    """Read the files under ``where/artifacts`` up to ``ARTIFACTS_CAP``, then remove ``where``."""
    root = where / ARTIFACTS
    files: dict[str, bytes] = {}
    omitted: list[str] = []
    total = 0
    try:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            name = path.relative_to(root).as_posix()
            size = path.stat().st_size
            if total + size > ARTIFACTS_CAP:
                omitted.append(name)
                continue
            files[name] = path.read_bytes()
            total += size
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return files, tuple(omitted)


def _check_probe(path: str, token: str) -> str | None:
    """Whether this node sees the driver's probe file, with its token, at the same path."""
    try:
        seen = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        return (
            f"--ray-shared-fs: node {socket.gethostname()} cannot read {path} "
            f"({exc.strerror or exc}): the run directory is not on a file system the workers "
            "share at the same path; drop --ray-shared-fs to ship artifacts back instead"
        )
    if seen != token:
        return (
            f"--ray-shared-fs: node {socket.gethostname()} sees another file at {path}: the run "
            "directory is not shared at the same path; drop --ray-shared-fs to ship artifacts "
            "back instead"
        )
    return None
