"""A worker process of ``--backend processes``: the user's classes, loaded once, many rollouts.

The runner (``backends/processes.py``) starts ``python -m osmosis_run.backends._worker SOCK
ALIVE``: a fresh interpreter in a process group of its own, ``SOCK`` its end of a socket pair
to the runner, ``ALIVE`` the read end of a pipe whose write end only the runner holds. Messages
both ways are frames (``frame``: a 4-byte length, then a pickle); pickle is safe here, both ends
are this package, on this machine, over a pipe nobody else holds.

The runner says:

- ``("setup", spec, root, window, (path, environ), notify)``: load the workflow and grader
  (``spec``: the run's settings fields) with the runner's ``sys.path`` and environment,
  artifacts under ``root``, threads for ``window`` rollouts, every grader's start said when
  ``notify``; answered ``("ready",
  problem)``, ``problem`` None or one line;
- ``("run", tag, request, number, url, key, seed, ship, made)``: run one attempt with that
  model endpoint, in place (artifacts in the run directory, as a local run writes them; when
  ``made``, its directory exists already); answered ``("grading", tag, workflow)`` when its
  grader starts, if the grader has a deadline (``ship``: the runner keeps the sample should it
  have to kill the grader) or ``notify``, then ``("done",
  tag, (outcome, workflow_ms, grader_ms))``, or ``("bug", tag, traceback)`` when osmosis-run
  itself raised;
- ``("cancel", tag)``: cancel that attempt (a Ctrl-C, a deadline of the runner's); answered
  ``("cancelled", tag)`` once it has stopped;
- ``("stop",)``: cancel everything and exit.

Each stage runs within its deadline here, as in a local run; a stage that does not stop (code
that never yields holds this process's event loop) is the runner's business: it kills this
process group. Nothing is left behind when the runner goes: a guard process forked first
(``_guard``) waits for the ``ALIVE`` pipe's end (the runner gone, even SIGKILLed) or for this
process's end (crashed, killed), then kills the whole group, subprocesses a rollout started
included. This works when this process's own code cannot run (native code holding the
interpreter lock). What user code prints on stdout goes to stderr: stdout carries the run's
results lines only.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import pickle
import select
import signal
import socket
import struct
import sys
import traceback
from typing import Any, NoReturn

__all__ = ["Frames", "frame", "main"]

HEADER = struct.Struct("!I")
# A stage past its deadline that ignores its cancellation is not abandoned here: the runner
# kills the process instead (its hard deadline), so the grace only has to outlast the runner's.
ABANDON_GRACE_S = 3600.0


def frame(message: Any) -> bytes:
    """One message as sent: its length, then its pickle."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


class Outbox:
    """Frames out: those sent in one pass of the event loop leave in one write (one system
    call for a burst of replies, not one each)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parts: list[bytes] = []

    def send(self, message: Any) -> None:
        if not self.parts:
            self.loop.call_soon(self.flush)
        self.parts.append(frame(message))

    def flush(self) -> None:
        if not self.parts:
            return
        data = b"".join(self.parts)
        self.parts.clear()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class Frames:
    """The messages in a stream of frames, as its bytes arrive (both ends use it)."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        """The messages that ``data`` completes, in order."""
        self.buffer += data
        messages = []
        while len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            if len(self.buffer) < HEADER.size + size:
                break
            messages.append(pickle.loads(self.buffer[HEADER.size : HEADER.size + size]))
            del self.buffer[: HEADER.size + size]
        return messages


def main(argv: list[str]) -> NoReturn:
    """The worker's entry point: ``SOCK ALIVE`` (file descriptors)."""
    sock_fd, alive_fd = int(argv[1]), int(argv[2])
    os.dup2(2, 1)  # user code's prints go to stderr; stdout carries results lines only
    _guard(alive_fd, keep=())
    os.close(alive_fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner's Ctrl-C reaches us as "cancel"
    sock = socket.socket(fileno=sock_fd)
    from osmosis_run.eventloop import new_event_loop

    loop = new_event_loop()
    try:
        loop.run_until_complete(_Worker(loop).serve(sock))
    finally:
        loop.close()
    # The user's exit handlers run and what is buffered is written, as at any exit; the
    # interpreter's teardown (tens of milliseconds of freeing modules) is skipped, so that the
    # run does not wait for it.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _guard(alive_fd: int, *, keep: tuple[int, ...]) -> None:
    """Fork the process that kills this group when the runner or this process is gone."""
    mine_r, mine_w = os.pipe()  # its write end stays here: EOF when this process ends
    pid = os.fork()
    if pid != 0:
        os.close(mine_r)
        return
    try:  # the guard: no Python objects of the worker's are used past here
        os.close(mine_w)
        start = 3  # every other descriptor goes, the socket to the runner first among them
        for fd in sorted({alive_fd, mine_r, *keep}):
            os.closerange(start, fd)
            start = fd + 1
        os.closerange(start, os.sysconf("SC_OPEN_MAX"))
        while True:
            ready, _, _ = select.select([alive_fd, mine_r], [], [])
            if any(os.read(fd, 1) == b"" for fd in ready):
                break
    finally:
        os.killpg(0, signal.SIGKILL)  # the worker, what its rollouts started, this guard
        os._exit(0)


class _Worker(asyncio.Protocol):
    """Read frames from the runner, run attempts, write the answers."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.frames = Frames()
        self.outbox = Outbox(loop)
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.done = loop.create_future()
        self.executor: Any = None
        self.deadlines: Any = None
        self.notify = False  # every grader's start is said, not only those with a deadline
        self._ship: set[str] = set()  # rollouts whose workflow result goes with "grading"
        self._tags: dict[str, int] = {}

    async def serve(self, sock: socket.socket) -> None:
        await self.loop.create_unix_connection(lambda: self, sock=sock)
        await self.done
        for task in self.tasks.values():
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks.values()), timeout=2.0)

    # -- the connection --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.outbox.transport = transport

    def connection_lost(self, _exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)  # the runner is gone: stop

    def data_received(self, data: bytes) -> None:
        for message in self.frames.feed(data):
            self.handle(message)

    def send(self, message: Any) -> None:
        self.outbox.send(message)

    # -- the messages ----------------------------------------------------------------

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "run":
            _, tag, request, number, url, key, seed, ship, made = message
            if made:  # its artifacts directory exists: the runner's writer made it
                self.executor.backend.adopt_artifacts_dirs((request.id,))
            task = self.loop.create_task(self.run(tag, request, number, (url, key, seed), ship))
            self.tasks[tag] = task
        elif kind == "cancel":
            running = self.tasks.get(message[1])
            if running is not None:
                running.cancel()
        elif kind == "setup":
            self.send(("ready", self.setup(*message[1:])))
        elif kind == "stop" and not self.done.done():
            self.done.set_result(None)

    def setup(
        self,
        spec: dict[str, Any],
        root: str,
        window: int | None,
        runner: tuple[list[str], dict[str, str]],
        notify: bool,
    ) -> str | None:
        """Load the classes (None), or say why not in one line.

        ``runner`` is the runner's ``sys.path`` and environment as the run starts (a
        workspace's [env] and [secrets] included, set after this process was started): what
        it imports and reads, this process does. ``notify``: the runner wants to hear when
        each grader starts (a server's status).
        """
        path, environ = runner
        sys.path[:] = path
        os.environ.clear()
        os.environ.update(environ)
        self.notify = notify
        from osmosis_run.backends.local import LocalExecutor
        from osmosis_run.backends.osmosis_ai import backend_for
        from osmosis_run.errors import OsmosisRunError
        from osmosis_run.run.components import load_components
        from osmosis_run.run.deadlines import Deadlines
        from osmosis_run.run.settings import EvalSettings
        from osmosis_run.run.threads import WorkerThreads, default_size

        try:
            components = load_components(EvalSettings.model_validate(spec))
        except OsmosisRunError as exc:
            return str(exc)
        except Exception as exc:
            return f"loading the workflow raised {type(exc).__name__}: {exc}"
        self.loop.set_default_executor(WorkerThreads(default_size(window)))
        self.deadlines = Deadlines(abandon_grace_s=ABANDON_GRACE_S)
        self.executor = LocalExecutor(
            backend_for(components, artifact_root=root), on_grading=self._grading
        )
        return None

    def _grading(self, rollout_id: str, workflow: Any) -> None:
        tag = self._tags.get(rollout_id)
        if tag is None:
            return
        if rollout_id in self._ship:  # the grader has a deadline: the runner keeps the sample
            self.send(("grading", tag, workflow))
        elif self.notify:
            self.send(("grading", tag, None))

    async def run(
        self, tag: int, request: Any, number: int, endpoint: tuple[str, Any, Any], ship: bool
    ) -> None:
        from osmosis_run.run.seam import Attempt
        from osmosis_run.sdk.context import RolloutContext

        url, key, seed = endpoint
        context = RolloutContext(
            chat_completions_url=url, api_key=key, rollout_id=request.id, seed=seed
        )
        self._tags[request.id] = tag
        if ship:
            self._ship.add(request.id)
        try:
            result = await self.executor.run(Attempt(request, number, context), self.deadlines)
        except asyncio.CancelledError:
            self.send(("cancelled", tag))
            if self.done.done():
                raise
            return
        except BaseException:
            self.send(("bug", tag, traceback.format_exc()))
            return
        finally:
            self.tasks.pop(tag, None)
            self._tags.pop(request.id, None)
            self._ship.discard(request.id)
        self.send(("done", tag, (result.outcome, result.workflow_ms, result.grader_ms)))


if __name__ == "__main__":
    main(sys.argv)
