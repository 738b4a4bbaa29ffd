"""The Ray backend (``eval --backend ray``): attempts run on a pool of Ray actors.

Only the execution moves: the dataset, the window of rollouts in flight, deadlines, retries,
stall notices, metrics and the single writer stay in the driver (the engine, unchanged), so the
run directory, resume and reports are exactly those of a local run, and a run started locally
resumes on Ray and back (the backend is not part of the fingerprint).

``open`` joins the cluster (``--ray-address``, else ``$RAY_ADDRESS``, else a local one), ships
the user's code with ``runtime_env`` (the cwd as ``working_dir``, every other import path's
modules as ``py_modules``; the run directory, ``.git`` and virtual environments left out), and
starts ``--ray-actors`` async actors (``_ray_actor.RolloutActor``) spread over the nodes. Each
must be ready within ``--ray-ready-timeout``, run the driver's osmosis-run, pydantic and Python
versions, load the workflow and grader and reach the model from its node (the gateway's address,
or with ``--no-gateway`` the endpoint's); otherwise nothing runs and the error is one line
(exit 2). The key rollouts are handed (the gateway's run key, else ``--api-key``) reaches the
actors as their ``OSMOSIS_API_KEY``, through a method call. Each actor reserves
``--ray-actor-cpus`` CPUs of its node (0: none), so that Ray places them as asked.

``run`` puts an attempt into the batch of the least busy actor; a batch is sent as one actor
call when it holds ``--ray-batch`` attempts (``AUTO_BATCH`` with ``auto``, the default), or
when the event loop has turned ``FLUSH_TURNS`` times: with ``auto`` a call carries what is
waiting for its actor, so rollouts that start together (a burst of slots freed at once) travel
together, and a trickle travels one by one without waiting. Ray costs about 0.4 ms of driver
CPU and a few milliseconds of latency per call, whatever it carries.

Replies come back per rollout as each finishes, not when the whole batch has: the call brings
the first to finish (with the batch-mates finishing right after them), and ``more``
calls bring the rest, so a slow rollout does not hold back its batch-mates' results lines.
Each reply brings the outcome and the artifacts the rollout wrote (at most ``ARTIFACTS_CAP``
bytes per rollout; files past it are listed in result.json) unless ``--ray-shared-fs`` says
the run directory is shared, which a probe file checks on every actor.

Exactly-once recording, at-least-once execution: a rollout is recorded when its reply arrives.
An actor lost mid-call (killed, its node gone) raises ``AttemptLost`` for each attempt it held
that had no reply yet (those of its batch already answered stay recorded, once), and is
replaced; the engine runs those attempts again, not counting them against
``--retries``, at most ``LOST_LIMIT`` times in a row (then the rollout is recorded as a
failure). Each loss is one line on stderr as it happens (the node, how many rollouts run
again) and is counted in summary.json's ``backend``. Which of an actor's rollouts killed it is
unknown, so each runs again alone on an idle actor: the culprit then dies alone, and the
rollouts beside it finish. A rollout lost that way may have run part or all of its workflow
before: a model call may repeat. Ray's own retries are off (``max_restarts=0``,
``max_task_retries=0``): they re-run calls silently.

Ray's own lines relayed to the driver (the workers' output, "(raylet) ..." notices) go to
stderr: stdout carries results lines only. A cluster with token authentication that refuses
this driver's token is named as such: Ray retries for 20 s, printing a warning a second on the
process's stderr, then names only the address; those warnings are held while ``ray.init`` runs
(``_native_stderr``) and read for the refusal (shown as they were for any other failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import secrets
import socket
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from osmosis_run._construct import construct
from osmosis_run.backends._ray_actor import (
    ARTIFACTS_CAP,
    Chunk,
    Item,
    Reply,
    RolloutActor,
    versions,
)
from osmosis_run.errors import BackendError, ConfigError, InfrastructureError
from osmosis_run.run.plan import Plan
from osmosis_run.run.rollouts import timed_out
from osmosis_run.run.seam import Artifacts, Attempt, AttemptLost, AttemptResult, Deadlines
from osmosis_run.sdk.backend import DEFAULT_MAX_CONCURRENT
from osmosis_run.sdk.types import ExecutionOutcome
from osmosis_run.store.layout import ROLLOUTS

try:
    import ray
    from ray import exceptions as ray_errors
except ImportError:  # pragma: no cover  (the ray extra is part of the test extra)
    raise ConfigError(
        '--backend ray needs Ray on this machine: pip install "osmosis-run[ray]"'
    ) from None

__all__ = ["ARTIFACTS_CAP", "RayExecutor", "runtime_env_of"]

# The driver's own bound on a call, past the rollout's agent and grader timeouts (which the
# actor enforces): a reply that never comes is a timeout, not a run held forever.
CALL_MARGIN_S = 30.0
# How long the cluster's address gets to accept a connection before ray.init is tried.
CONNECT_TIMEOUT_S = 5.0
# How long the actors get to remove their scratch directories at the end, before they are killed
# (it ends as soon as they have; 2 s was too short for a loaded machine, where one was left).
RELEASE_S = 5.0
# A replacement actor that cannot start is tried again this many times, then its slot is left
# empty; with no actor left the run stops (exit 4) and resumes later.
REPLACE_TRIES = 3
# ``--ray-batch auto`` (the default): an actor call carries what is waiting for its actor when
# the batch is sent (see FLUSH_TURNS), up to this many attempts. 16 already spreads Ray's cost
# per call thin; larger calls pipeline worse (an actor starts its batch one rollout after
# another): W10 gave 1.23 with 16 and 1.34 with 64, each on a settled disk.
AUTO_BATCH = 16
# A batch not full goes when the loop has turned this many times: the rollouts that a burst
# of replies lets start (the window's slots freed together) reach the same call.
FLUSH_TURNS = 2
# What Ray raises when the actor, its worker process or its node went away mid-call.
_LOST = (
    ray_errors.RayActorError,
    ray_errors.WorkerCrashedError,
    ray_errors.ObjectLostError,
    ray_errors.NodeDiedError,
)
# An actor that dies while it starts (its node went away, a worker crashed) is started again, at
# most this many times in all.
START_TRIES = 3
# Folders never shipped to the workers (besides the run directory and virtual environments).
_NEVER_SHIPPED = (".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".ruff_cache", ".tox")
_PROBE = ".ray-shared-fs-probe"


class _ActorDied(BackendError):
    """A new actor died before it was ready (a missing module, a node that went away)."""


@dataclass(eq=False)
class _Slot:
    """One place of the pool: its actor (None while it is being replaced) and its batch."""

    index: int
    handle: Any = None
    node: str = "?"
    generation: int = 0
    in_flight: int = 0
    alone: bool = False  # running one rollout that was lost before, and nothing else
    pending: list[_Call] = field(default_factory=list)
    flush_scheduled: bool = False
    record: dict[str, Any] = field(default_factory=dict)  # its entry in summary's actors

    @property
    def load(self) -> int:
        return self.in_flight + len(self.pending)


@dataclass(eq=False, slots=True)
class _Call:
    """One attempt on its way to an actor and back."""

    item: Item
    future: asyncio.Future[Reply | None]
    slot: _Slot | None = None


class RayExecutor:
    """Run attempts on a pool of Ray actors (see the module docstring)."""

    def __init__(
        self,
        plan: Plan,
        *,
        endpoint: tuple[str, str | None] | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        """``endpoint``: the model URL the rollouts reach (the gateway's base URL, else the
        endpoint's) and the key they are handed; ``notify``: one line for stderr, as it
        happens (a lost actor)."""
        self.plan = plan
        self.options = options = plan.settings.execution  # the --ray-* options
        self._slots: list[_Slot] = []
        self._calls: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self._suspects: set[str] = set()  # rollouts lost with their actor, not finished since
        self._broken: InfrastructureError | None = None
        self._connected = False
        self._per_actor: int | None = None
        url = options.chat_completions_url or ""
        self._model_url, self._key = endpoint or (url, options.api_key_value())
        self._model_is_gateway = endpoint is not None and endpoint[0] != url
        self._notify = notify
        self._batch = AUTO_BATCH if options.ray_batch == "auto" else options.ray_batch
        self._keys = itertools.count()
        self._actors: list[dict[str, Any]] = []  # every actor started, for summary.json
        self._losses: list[dict[str, Any]] = []

    @classmethod
    def from_plan(
        cls,
        plan: Plan,
        *,
        endpoint: tuple[str, str | None] | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> RayExecutor:
        """The executor of a plan's ``--ray-*`` options."""
        return cls(plan, endpoint=endpoint, notify=notify)

    def stats(self) -> dict[str, Any]:
        """Where the actors ran and which were lost, for summary.json's ``backend``."""
        return {
            "kind": "ray",
            "actors": [dict(actor) for actor in self._actors],
            "actors_lost": len(self._losses),
            "rollouts_rerun": sum(loss["rollouts"] for loss in self._losses),
            "lost": [dict(loss) for loss in self._losses],
        }

    @property
    def limit(self) -> int | None:
        """Per actor, the workflow config's limit (else 4), or two batches of an explicit
        ``--ray-batch``; times the actors."""
        if self._per_actor is None:
            return None
        batch = self.options.ray_batch
        per_actor = self._per_actor if batch == "auto" else max(self._per_actor, 2 * batch)
        return max(len(self._slots), 1) * per_actor

    @property
    def local_artifacts(self) -> bool:
        """With ``--ray-shared-fs`` only: the actors write into the run directory."""
        return self.options.ray_shared_fs

    def adopt_artifacts_dirs(self, rollout_ids: Iterable[str]) -> None:
        """Nothing to do: the actors make their own directories."""

    # -- getting ready ---------------------------------------------------------------

    async def open(self) -> None:
        """Join the cluster, ship the code, start the actors and wait for each to be ready.

        Raises:
            BackendError: the cluster cannot be joined, or an actor cannot start, runs other
                versions, or cannot load the workflow (nothing ran).
        """
        self._connect()
        try:
            count = self._actor_count()
            config = self.plan.local_components().workflow_config
            self._per_actor = (
                config.concurrency.max_concurrent if config is not None else DEFAULT_MAX_CONCURRENT
            )
            probe = self._write_probe() if self.options.ray_shared_fs else None
            self._slots = [_Slot(i) for i in range(count)]
            try:
                await self._start_all(probe)
            finally:
                if probe is not None:
                    _remove(probe[0])
        except BaseException:
            await self.close()
            raise

    async def _start_all(self, probe: tuple[str, str] | None) -> None:
        """Start every actor at once; the first that cannot start stops the others.

        Raises:
            BackendError: the first actor's reason (the others were cancelled).
        """
        try:
            async with asyncio.TaskGroup() as group:
                for slot in self._slots:
                    group.create_task(self._start(slot, probe))
        except BaseExceptionGroup as failed:
            first: BaseException = failed
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None

    def _connect(self) -> None:
        address = self.options.ray_address or os.environ.get("RAY_ADDRESS") or None
        kwargs: dict[str, Any] = {
            "runtime_env": runtime_env_of(self.plan),
            "logging_level": logging.WARNING,
            "log_to_driver": True,
        }
        if address is None:
            kwargs["include_dashboard"] = False
        else:
            _check_reachable(address)
        _relay_to_stderr()
        with _native_stderr() as said:
            try:
                # No address: a new local cluster, as documented. (Ray's own default would join
                # the cluster that the last `ray start` on this machine wrote to
                # /tmp/ray/ray_current_cluster, wherever it is now.)
                ray.init(address=address or "local", **kwargs)
            except (ConnectionError, RuntimeError, ValueError, OSError) as exc:
                where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
                if address is not None and _refused_token(said()):
                    said.clear()  # type: ignore[attr-defined]
                    has = "a token it does not take" if _has_token() else "no token"
                    raise BackendError(
                        f"cannot join {where}: it refused this driver's authentication token "
                        f"(the driver has {has}); set RAY_AUTH_MODE=token and the cluster's "
                        "token in RAY_AUTH_TOKEN (or ~/.ray/auth_token) where osmosis-run runs"
                    ) from None
                raise BackendError(f"cannot start or join {where}: {_one_line(exc)}") from None
        self._connected = True

    def _actor_count(self) -> int:
        """``--ray-actors``, else as many as the cluster's CPUs hold; checked against them."""
        cpus = self.options.ray_actor_cpus
        nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        per_node = [float(n.get("Resources", {}).get("CPU", 0)) for n in nodes]
        total = sum(per_node)
        if cpus > 0 and cpus > max(per_node, default=0):
            raise BackendError(
                f"--ray-actor-cpus {cpus:g}: no node of the Ray cluster has {cpus:g} CPUs (the "
                f"largest has {max(per_node, default=0):g}); lower it, or add a bigger node"
            )
        if self.options.ray_actors is not None:
            count = self.options.ray_actors
            if cpus > 0 and count * cpus > total:
                raise BackendError(
                    f"--ray-actors {count} x --ray-actor-cpus {cpus:g} needs {count * cpus:g} "
                    f"CPUs; the Ray cluster has {total:g}: use fewer actors or fewer CPUs each"
                )
            return count
        return max(1, math.floor(total / cpus) if cpus > 0 else math.floor(total))

    def _write_probe(self) -> tuple[str, str]:
        """A file with a random token in the run directory, for each actor to read back."""
        token = secrets.token_hex(16)
        path = (self.plan.run_dir / _PROBE).absolute()
        path.write_text(token, encoding="utf-8")
        return str(path), token

    async def _start(self, slot: _Slot, probe: tuple[str, str] | None) -> None:
        """Start the slot's actor and make it ready (versions checked, classes loaded).

        Raises:
            BackendError: it could not (the actor is killed).
        """
        for attempt in range(1, START_TRIES + 1):
            handle = _actor_class(self.options.ray_actor_cpus).remote()
            try:
                node = await self._make_ready(handle, probe)
            except _ActorDied:
                _kill(handle)
                if attempt == START_TRIES:
                    raise
                continue
            except BaseException:
                _kill(handle)
                raise
            slot.handle, slot.node = handle, node
            slot.generation += 1
            slot.record = {"node": node, "cpus": self.options.ray_actor_cpus, "lost": False}
            self._actors.append(slot.record)
            return

    async def _make_ready(self, handle: Any, probe: tuple[str, str] | None) -> str:
        """Check a new actor's versions and have it load the classes; return its node."""
        hello = await self._ready(handle.hello.remote(), "start")
        _check_versions(hello)
        shared_fs = self.options.ray_shared_fs
        shared = str((self.plan.run_dir / ROLLOUTS).absolute()) if shared_fs else None
        spec = _spec(self.plan)
        # The run's whole window: an actor holds its share, more while another is replaced, and
        # its threads (for asyncio.to_thread) start only when used.
        window = self.plan.window(self.limit)
        node = str(hello.get("ip") or hello.get("node", "?"))
        problem = await self._ready(
            handle.setup.remote(spec, self._key, shared_root=shared, probe=probe, window=window),
            "load the workflow",
        )
        if problem is not None:
            raise BackendError(
                f"on the Ray workers (node {node}): {problem}; the import paths are shipped "
                "to them, other modules must be installed on every node"
            )
        if self._model_url:
            unreachable = await self._ready(
                handle.reach.remote(self._model_url), "check the model's address"
            )
            if unreachable is not None:
                raise BackendError(self._unreachable(node, unreachable))
        return node

    def _unreachable(self, node: str, why: str) -> str:
        """Why an actor's node cannot reach the model, and what to do, in one line."""
        if self._model_is_gateway:
            return (
                f"on the Ray workers (node {node}): cannot reach the model gateway at "
                f"{self._model_url} ({why}); pass --gateway-host with an address of this "
                "machine that every node reaches (the gateway listens there, behind the run's "
                "key)"
            )
        return (
            f"on the Ray workers (node {node}): cannot reach the model endpoint at "
            f"{self._model_url} ({why}); the driver's preflight does not prove the workers "
            "reach it: give an address every node reaches, or drop --no-gateway"
        )

    async def _ready(self, ref: Any, doing: str) -> Any:
        """Await one of a new actor's calls within ``--ray-ready-timeout``.

        Raises:
            BackendError: the actor died (a missing module, ...) or took too long.
        """
        timeout = self.options.ray_ready_timeout
        try:
            return await asyncio.wait_for(_awaitable(ref), timeout)
        except TimeoutError:
            raise BackendError(
                f"a Ray actor did not {doing} within {timeout:g} s (--ray-ready-timeout): the "
                f"cluster may lack the resources it asks for ({self._asks()}), or its nodes "
                "are slow to set up the code"
            ) from None
        except _LOST as exc:
            raise _ActorDied(f"a Ray actor could not {doing}: {_death(exc)}") from None
        except ray_errors.RuntimeEnvSetupError as exc:
            raise BackendError(
                f"the Ray workers could not set up the shipped code: {_one_line(exc)}"
            ) from None

    def _asks(self) -> str:
        cpus = self.options.ray_actor_cpus
        return f"{cpus:g} CPU each" if cpus else "no CPU"

    # -- running ---------------------------------------------------------------------

    async def run(self, attempt: Attempt, deadlines: Deadlines) -> AttemptResult:
        """Send the attempt to an actor; its reply, or ``AttemptLost`` if the actor died.

        The actor enforces the agent and grader timeouts; the driver bounds the whole call by
        their sum and ``CALL_MARGIN_S``.
        """
        request = attempt.request
        agent, grader = request.agent_timeout_sec, request.grader_timeout_sec
        if agent is None:
            return await self._call(attempt)
        bound = agent + (grader or 0.0) + CALL_MARGIN_S
        return await deadlines.within(
            "rollout",
            bound,
            self._call(attempt),
            rollout_id=request.id,
            timed_out=lambda: AttemptResult(
                construct(
                    ExecutionOutcome, workflow=timed_out("rollout", bound, None), grader=None
                ),
                None,
                None,
            ),
        )

    async def _call(self, attempt: Attempt) -> AttemptResult:
        request, context = attempt.request, attempt.context
        suspect = request.id in self._suspects
        slot = await self._pick(alone=suspect)
        item: Item = (request, attempt.number, context.chat_completions_url, context.seed)
        call = _Call(item, asyncio.get_running_loop().create_future())
        slot.pending.append(call)
        self._schedule_flush(slot)
        try:
            reply = await call.future
        except asyncio.CancelledError:
            self._forget(call, slot)
            raise
        except AttemptLost:
            self._suspects.add(request.id)
            raise
        finally:
            if suspect:
                slot.alone = False
                self._changed.set()
        self._suspects.discard(request.id)
        if reply is None:  # cancelled on the actor without being asked: treat as lost
            raise AttemptLost("the Ray actor dropped the rollout")
        outcome, workflow_ms, grader_ms, files, omitted = reply
        artifacts = Artifacts(files=files, omitted=omitted) if files or omitted else None
        return AttemptResult(outcome, workflow_ms, grader_ms, artifacts)

    async def _pick(self, *, alone: bool) -> _Slot:
        """The least busy live actor, or with ``alone`` an idle one, kept for this call only.

        A rollout that was lost with its actor may be what killed it: it runs again alone, so
        that it cannot take the rollouts beside it down again (and they cannot take it down).
        Waits while no actor fits (every actor being replaced, or none idle).

        Raises:
            InfrastructureError: no actor is left and none can be started.
        """
        while True:
            live = [s for s in self._slots if s.handle is not None and not s.alone]
            if alone:
                idle = [s for s in live if s.load == 0]
                if idle:
                    idle[0].alone = True
                    return idle[0]
            elif live:
                return min(live, key=lambda s: s.load)
            if self._broken is not None and all(s.handle is None for s in self._slots):
                raise self._broken
            self._changed.clear()
            await self._changed.wait()

    def _schedule_flush(self, slot: _Slot) -> None:
        if len(slot.pending) >= self._batch:
            self._send(slot)
        elif not slot.flush_scheduled:
            slot.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush, slot, FLUSH_TURNS)

    def _flush(self, slot: _Slot, turns: int = 0) -> None:
        if turns > 0:
            asyncio.get_running_loop().call_soon(self._flush, slot, turns - 1)
            return
        slot.flush_scheduled = False
        if slot.pending:
            self._send(slot)

    def _send(self, slot: _Slot) -> None:
        """Send the slot's pending attempts, up to ``_batch`` per actor call."""
        if slot.handle is None:  # replaced meanwhile: put them back to whoever is alive
            calls, slot.pending = slot.pending, []
            for call in calls:
                call.future.set_exception(AttemptLost("its Ray actor was being replaced"))
            return
        size = self._batch
        while slot.pending:
            calls = slot.pending[:size]
            del slot.pending[:size]
            for call in calls:
                call.slot = slot
            slot.in_flight += len(calls)
            key = next(self._keys)
            first = slot.handle.run_batch.remote(key, [c.item for c in calls])
            replies = self._replies(slot, slot.handle, slot.generation, key, first, calls)
            task = asyncio.get_running_loop().create_task(replies)
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)
            if len(slot.pending) < size:
                break
        if slot.pending:
            self._schedule_flush(slot)

    async def _replies(
        self, slot: _Slot, handle: Any, generation: int, key: int, ref: Any, calls: list[_Call]
    ) -> None:
        """Hand each attempt of one batch its reply as it comes (or its loss).

        The first call brings the replies of the first rollouts to finish; ``more`` calls
        bring the others as they finish, so a slow one does not hold back the rest. When the
        actor is lost, only the attempts not answered yet are lost.
        """
        waiting = dict(enumerate(calls))
        try:
            while True:
                chunk: Chunk
                chunk, done = await _awaitable(ref)
                for index, reply in chunk:
                    call = waiting.pop(index)
                    slot.in_flight -= 1
                    if not call.future.done():
                        call.future.set_result(reply)
                if done:
                    break
                ref = handle.more.remote(key)  # the batch's actor, even if replaced since
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
            _settle(waiting.values(), AttemptLost("the run is closing"))
            raise
        except _LOST as exc:
            self._lost(slot, generation, exc)
            _settle(
                waiting.values(), AttemptLost(f"Ray actor on node {slot.node} lost: {_death(exc)}")
            )
        except BaseException as exc:  # a bug: each attempt raises it, the run stops
            _settle(waiting.values(), exc)
        else:  # the actor said it was all, without some (it should not): they run again
            _settle(waiting.values(), AttemptLost("the Ray actor's replies ended early"))
        finally:
            slot.in_flight -= len(waiting)
            if slot.in_flight == 0:
                self._changed.set()  # an idle actor, for a rollout that must run alone

    def _forget(self, call: _Call, slot: _Slot) -> None:
        """A cancelled attempt: out of its batch if not sent yet, else cancelled on the actor."""
        if call in slot.pending:
            slot.pending.remove(call)
        elif call.slot is not None and call.slot.handle is not None:
            with contextlib.suppress(Exception):
                call.slot.handle.cancel.remote([call.item[0].id])

    def _lost(self, slot: _Slot, generation: int, error: BaseException) -> None:
        """The slot's actor died: replace it (once per death, whoever noticed first)."""
        if slot.generation != generation or slot.handle is None:
            return
        again = slot.in_flight + len(slot.pending)
        why = _death(error)
        slot.record["lost"] = True
        self._losses.append({"node": slot.node, "rollouts": again, "reason": why})
        if self._notify is not None:
            rollouts = "1 rollout runs" if again == 1 else f"{again} rollouts run"
            self._notify(
                f"osmosis-run: lost the Ray actor on node {slot.node} ({why}); {rollouts} again"
            )
        dead, slot.handle = slot.handle, None
        with contextlib.suppress(Exception):
            ray.kill(dead, no_restart=True)
        task = asyncio.get_running_loop().create_task(self._replace(slot))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _replace(self, slot: _Slot) -> None:
        """Start a new actor in the slot; after ``REPLACE_TRIES`` failures leave it empty."""
        last: BackendError | None = None
        for _ in range(REPLACE_TRIES):
            try:
                await self._start(slot, None)
            except BackendError as exc:
                last = exc
                continue
            self._changed.set()
            return
        if all(s.handle is None for s in self._slots):
            self._broken = InfrastructureError(
                f"every Ray actor was lost and none could be started again ({last})"
            )
        self._changed.set()

    async def close(self) -> None:
        """Cancel what is in flight, end the actors, leave (or stop) the cluster."""
        for task in list(self._calls):
            task.cancel()
        if self._calls:
            await asyncio.wait(set(self._calls), timeout=2.0)
        live = [slot.handle for slot in self._slots if slot.handle is not None]
        if live:  # each actor removes its scratch directory, which ray.kill would leave behind
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.gather(*(h.release.remote() for h in live), return_exceptions=True),
                    RELEASE_S,
                )
        for slot in self._slots:
            if slot.handle is not None:
                with contextlib.suppress(Exception):
                    ray.kill(slot.handle, no_restart=True)
                slot.handle = None
        if self._connected:
            self._connected = False
            ray.shutdown()


def _check_reachable(address: str) -> None:
    """Fail fast on a ``host:port`` nobody listens on (Ray itself waits a minute or more).

    Raises:
        BackendError: the address refuses connections or does not answer.
    """
    host, colon, port = address.rpartition(":")
    if not colon or "://" in address or not port.isdigit():
        return  # "auto", "ray://...": Ray's own forms, left to it
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise BackendError(
            f"cannot join the Ray cluster at {address}: {exc.strerror or exc}; is `ray start "
            "--head` running there, and is the port right?"
        ) from None


@contextlib.contextmanager
def _native_stderr() -> Iterator[Callable[[], str]]:
    """Hold what is written to file descriptor 2 (Ray's C++ warnings) while ``ray.init`` runs.

    Yields a function that returns what was held; it is written to stderr at the end unless
    the caller cleared it (``held.clear``) because it said it in its own words.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        keep = [True]

        def text() -> str:
            held.seek(0)
            return held.read().decode("utf-8", "replace")

        text.clear = lambda: keep.__setitem__(0, False)  # type: ignore[attr-defined]
        try:
            yield text
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            said = text()
            if said and keep[0]:
                sys.stderr.write(said)
                sys.stderr.flush()
            elif said:
                logging.getLogger(__name__).debug("Ray said, joining the cluster:\n%s", said)


def _has_token() -> bool:
    """Whether this driver has a Ray token (the variables or the file Ray reads)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    return os.path.isfile(path)


def _refused_token(said: str) -> bool:
    """Whether Ray's own words say the cluster refused this driver's token."""
    return "InvalidAuthToken" in said or "Unauthenticated" in said


def _relay_to_stderr() -> None:
    """Ray's lines relayed to the driver (workers' output, raylet notices) go to stderr.

    Ray prints a worker's stdout, and its own "(raylet) ..." error notices, to the driver's
    stdout, which carries results lines only. The printer is looked up when ``ray.init``
    registers it, so it is replaced before; a Ray without it is left as it is.
    """
    from ray._private import worker

    printer = getattr(worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "to_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        printer({**data, "is_err": True}, ignore_prefix)

    to_stderr.to_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


def _kill(handle: Any) -> None:
    with contextlib.suppress(Exception):
        ray.kill(handle, no_restart=True)


def _settle(calls: Iterable[_Call], error: BaseException) -> None:
    for call in calls:
        if not call.future.done():
            call.future.set_exception(error)


async def _awaitable(ref: Any) -> Any:
    return await ref


_remote: Any = None


def _actor_class(cpus: float) -> Any:
    """``RolloutActor`` as a Ray actor class: ``cpus`` CPUs reserved, no restarts, no silent
    retries, spread out."""
    global _remote
    if _remote is None:
        _remote = ray.remote(RolloutActor)
    return _remote.options(
        num_cpus=cpus,
        max_restarts=0,
        max_task_retries=0,
        max_concurrency=10_000,
        scheduling_strategy="SPREAD",
    )


def _spec(plan: Plan) -> dict[str, Any]:
    """What an actor loads: the run's classes and configs (its own import paths: none)."""
    run = plan.settings.run
    return {
        "workflow": run.workflow,
        "grader": run.grader,
        "workflow_config": run.workflow_config,
        "grader_config": run.grader_config,
        "workflow_config_overrides": run.workflow_config_overrides,
        "grader_config_overrides": run.grader_config_overrides,
    }


def _check_versions(hello: dict[str, str]) -> None:
    """Refuse a worker whose osmosis-run, pydantic or Python differs from the driver's.

    Raises:
        BackendError: they differ.
    """
    ours = versions()
    differ = [name for name, version in ours.items() if hello.get(name) != version]
    if differ:
        theirs = ", ".join(f"{name} {hello.get(name, '?')}" for name in differ)
        mine = ", ".join(f"{name} {ours[name]}" for name in differ)
        raise BackendError(
            f"version skew: Ray node {hello.get('node', '?')} runs {theirs}, this machine runs "
            f"{mine}; install the same versions on every node"
        )


def _death(exc: BaseException) -> str:
    """Why an actor died, in one line (a missing module named as such)."""
    text = str(exc)
    for line in text.splitlines():
        if "ModuleNotFoundError" in line or "ImportError" in line:
            return line.strip() + " (is osmosis-run installed on every node?)"
    return _one_line(exc)


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def runtime_env_of(plan: Plan) -> dict[str, Any]:
    """The ``runtime_env`` that ships the user's code: the import paths, minus what is not code.

    The cwd goes as ``working_dir`` (the actors run in its copy); every other import path's
    modules (``*.py`` files and folders) go as ``py_modules``. The run directory, the runs
    folder, ``.git`` and virtual environments are left out (and what ``.gitignore`` says).
    """
    cwd = Path.cwd().resolve()
    skip = {
        plan.run_dir.resolve(),
        Path(plan.settings.output.runs_dir).resolve(),
    }
    env: dict[str, Any] = {
        "working_dir": str(cwd),
        "excludes": [*_NEVER_SHIPPED, *_excluded_under(cwd, skip)],
    }
    modules: list[str] = []
    for folder in dict.fromkeys(Path(p).resolve() for p in plan.settings.run.import_paths):
        if folder == cwd or not folder.is_dir():
            continue
        modules.extend(_modules_in(folder, skip))
    if modules:
        env["py_modules"] = modules
    return env


def _excluded_under(root: Path, skip: set[Path]) -> list[str]:
    """Gitignore-style patterns (anchored at ``root``) for the skipped folders and venvs in it."""
    patterns = [f"/{p.relative_to(root).as_posix()}" for p in skip if p.is_relative_to(root)]
    with contextlib.suppress(OSError):
        patterns += [f"/{child.name}" for child in root.iterdir() if _is_venv(child)]
    return [p for p in patterns if p != "/."]


def _modules_in(folder: Path, skip: set[Path]) -> list[str]:
    """The top-level modules of a folder: its ``*.py`` files and folders holding Python code."""
    found: list[str] = []
    try:
        children = sorted(folder.iterdir())
    except OSError:
        return found
    for child in children:
        if child.name.startswith(".") or child.name in _NEVER_SHIPPED or child.resolve() in skip:
            continue
        if _is_module(child):
            found.append(str(child))
    return found


def _is_module(path: Path) -> bool:
    """A ``*.py`` file, or a folder (not a virtual environment) holding some."""
    if path.is_file():
        return path.suffix == ".py"
    return path.is_dir() and not _is_venv(path) and any(path.glob("*.py"))


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _is_venv(folder: Path) -> bool:
    return folder.is_dir() and (folder / "pyvenv.cfg").is_file()
