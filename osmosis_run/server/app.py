"""``create_rollout_server``: the ASGI app (Starlette) that serves a ``LocalBackend``.

The routes only translate HTTP to ``RolloutService`` calls and back; the protocol's rules live
in ``service.py`` (what happens), ``table.py`` (leases, retention) and ``protocol.py`` (bodies,
errors). Bearer auth wraps every route, ``/health`` included, compared in constant time. A poll
stops waiting when its client hangs up.

The four routes are called straight from the app (``_RolloutApp``), past Starlette's middleware
stack and router: on a trivial rollout those layers cost as much Python as the rollout itself.
A route that crashes raises to the server, which logs it and answers 500 (closing the
connection), as it does after Starlette's error middleware.
Whatever they would answer differently (an unknown path, a wrong method, a trailing slash, an
app mounted under a root path, the lifespan) still goes through them.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from osmosis_run.run.seam import Executor, ModelGateway
from osmosis_run.sdk.backend import LocalBackend
from osmosis_run.server.protocol import (
    LEASE_HEADER,
    CancelRolloutsRequest,
    ProtocolError,
    RolloutInitRequest,
    dumps,
    parse_body,
)
from osmosis_run.server.service import (
    DEFAULT_POLLING_LEASE_TIMEOUT_SEC,
    DEFAULT_RESULT_RETENTION_SEC,
    DEFAULT_RESULT_WAIT_TIMEOUT_SEC,
    RolloutService,
    Workers,
)

__all__ = ["create_rollout_server", "default_run_dir"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

T = TypeVar("T", bound=BaseModel)
_JSON = "application/json"
_JSON_BYTES = _JSON.encode()
_LEASE_KEY = LEASE_HEADER.lower()


def default_run_dir(runs_dir: str | os.PathLike[str] = "runs") -> Path:
    """``runs/serve-<UTC date and time>-<pid>``: a new run directory for each server start."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return Path(runs_dir) / f"serve-{stamp}-{os.getpid()}"


def _configure_default_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )


def create_rollout_server(
    *,
    backend: LocalBackend,
    lifespan: Callable[[Any], Any] | None = None,
    configure_logging: bool = True,
    result_wait_timeout_sec: float = DEFAULT_RESULT_WAIT_TIMEOUT_SEC,
    polling_lease_timeout_sec: float = DEFAULT_POLLING_LEASE_TIMEOUT_SEC,
    result_retention_sec: float = DEFAULT_RESULT_RETENTION_SEC,
    api_key: str | None = None,
    out: str | os.PathLike[str] | None = None,
    concurrency: int | None = None,
    pass_threshold: float = 1.0,
    gateway: ModelGateway | None = None,
    secrets: tuple[str, ...] = (),
    workers: Workers | None = None,
    executor: Executor | None = None,
) -> Starlette:
    """Build the ASGI app that serves ``backend`` over the rollout protocol "0.4".

    Wire-compatible with osmosis-ai 0.3.8's ``create_rollout_server``: the same routes,
    bodies, status codes, headers and timings. Served rollouts are recorded in a run directory,
    as eval records them.

    Args:
        backend: the ``LocalBackend`` to serve; its artifacts go into the run directory.
        lifespan: an async context manager factory entered around the server's own lifespan.
        configure_logging: install a default INFO log handler when the process has none.
        result_wait_timeout_sec: how long a poll waits for a status change.
        polling_lease_timeout_sec: how long a rollout lives without a poll (must exceed the
            wait); then it fails with ``lease_expired`` and its execution is cancelled.
        result_retention_sec: how long a final result stays pollable (and its id taken).
        api_key: when set, every route wants ``Authorization: Bearer <api_key>``.
        out: the run directory (default ``runs/serve-<UTC time>-<pid>``).
        concurrency: rollouts executing at once (default: the workflow config's limit,
            else 4, or the ``executor``'s; 0 for no limit).
        pass_threshold: a success with at least this reward passed, in the run's records and
            summary (``osmosis-run serve`` gives the config's ``pass_threshold``, as eval reads it).
        gateway: a started model gateway every rollout calls instead of the URL its caller sent
            (``osmosis-run serve --chat-completions-url``); its run key is never written. The
            caller closes it once the server has stopped.
        secrets: more strings never written to the run directory (the gateway's upstream key).
        workers: run the rollouts in worker processes (``osmosis-run serve --workers N``),
            started with the server's lifespan and stopped with it; ``concurrency`` stays the
            limit of rollouts executing at once, over all of them.
        executor: runs each rollout's attempt instead of ``backend`` (``osmosis-run serve``
            gives a module-level osmosis_ai ``HarborBackend``'s ``BackendExecutor``, whose
            rollouts' files go to ``out``), opened with the server's lifespan and closed with
            it; not with ``workers``.

    Raises:
        ValueError: a timing is invalid, ``api_key`` is blank, or both ``workers`` and
            ``executor`` are given.
        TypeError: ``backend`` is not a ``LocalBackend``.
        RunDirError: the run directory cannot be used.
        BackendError: (in the lifespan) a worker process cannot start or load the classes,
            or the ``executor`` cannot open.
    """
    if api_key is not None and not api_key.strip():
        raise ValueError("api_key must be non-empty when provided")
    if not isinstance(backend, LocalBackend):
        raise TypeError(
            f"backend must be an osmosis_run LocalBackend, got {type(backend).__name__}"
        )
    if configure_logging:
        _configure_default_logging()
    default = backend.max_concurrent if executor is None else executor.limit
    limit = default if concurrency is None else (concurrency or None)
    service = RolloutService(
        backend,
        run_dir=Path(out) if out is not None else default_run_dir(),
        result_wait_s=result_wait_timeout_sec,
        lease_s=polling_lease_timeout_sec,
        retention_s=result_retention_sec,
        concurrency=limit,
        secrets=(*((api_key,) if api_key else ()), *secrets),
        pass_threshold=pass_threshold,
        gateway=gateway,
        workers=workers,
        executor=executor,
    )

    @asynccontextmanager
    async def serving(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if lifespan is not None:
                await stack.enter_async_context(lifespan(app))
            await service.start()
            try:
                yield
            finally:
                await service.shutdown()

    routes = _routes(service)
    middleware = [Middleware(_BearerAuth, api_key=api_key)] if api_key is not None else []
    app = _RolloutApp(
        routes=routes,
        middleware=middleware,
        lifespan=serving,
        exception_handlers={HTTPException: _http_error},
    )
    app.direct(routes, api_key)
    app.state.rollouts = service
    return app


Answer = tuple[int, bytes, dict[str, str] | None]


def _routes(service: RolloutService) -> list[Route]:
    """The protocol's four routes, as plain ASGI endpoints (no Request/Response objects)."""

    async def health(_scope: Scope, _receive: Receive) -> Answer:
        return 200, service.health(), None

    async def rollout(scope: Scope, receive: Receive) -> Answer:
        body = await _body(RolloutInitRequest, scope, receive)
        return 202, service.admit(body), None

    async def result(scope: Scope, receive: Receive) -> Answer:
        token = _header(scope, _LEASE_KEY)
        if not token:
            return 422, _lease_missing(token), None
        rollout_id = scope["path_params"]["rollout_id"]
        return 200, await _poll(service, rollout_id, token, receive), None

    async def cancel(scope: Scope, receive: Receive) -> Answer:
        return 200, service.cancel(await _body(CancelRolloutsRequest, scope, receive)), None

    return _get_alone(
        [
            Route("/health", _Endpoint(health), methods=["GET"]),
            Route("/rollout", _Endpoint(rollout), methods=["POST"]),
            Route("/rollout/cancel", _Endpoint(cancel), methods=["POST"]),
            Route(_RESULT_PATH, _Endpoint(result), methods=["GET"]),
        ]
    )


class _RolloutApp(Starlette):
    """Starlette, calling the protocol's routes directly (see the module's docstring)."""

    _routes: dict[tuple[str, str], _Endpoint]
    _result: _Endpoint | None = None
    _expected: bytes | None = None

    def direct(self, routes: list[Route], api_key: str | None) -> None:
        """Call these routes directly, after the Bearer check when ``api_key`` is set."""
        self._routes = {}
        for route in routes:
            assert isinstance(route.endpoint, _Endpoint)
            for method in route.methods or ():
                if route.path == _RESULT_PATH:
                    self._result = route.endpoint
                else:
                    self._routes[method, route.path] = route.endpoint
        self._expected = _bearer(api_key) if api_key is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self._endpoint(scope) if scope["type"] == "http" else None
        if endpoint is None:
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self
        if self._expected is not None and not _authorized(scope, self._expected):
            await _unauthorized(send)
            return
        await endpoint(scope, receive, send)

    def _endpoint(self, scope: Scope) -> _Endpoint | None:
        if scope.get("root_path"):
            return None
        path: str = scope["path"]
        endpoint = self._routes.get((scope["method"], path))
        if endpoint is not None or self._result is None or scope["method"] != "GET":
            return endpoint
        # /rollout/{rollout_id}/result, as Starlette's route matches it (one segment).
        if path.startswith(_RESULT_HEAD) and path.endswith(_RESULT_TAIL):
            rollout_id = path[len(_RESULT_HEAD) : -len(_RESULT_TAIL)]
            if rollout_id and "/" not in rollout_id:
                scope["path_params"] = {"rollout_id": rollout_id}
                return self._result
        return None


_RESULT_PATH = "/rollout/{rollout_id}/result"
_RESULT_HEAD, _, _RESULT_TAIL = _RESULT_PATH.partition("{rollout_id}")


class _Endpoint:
    """An ASGI endpoint answering JSON: ``handle`` gives the status, the body and headers."""

    def __init__(self, handle: Callable[[Scope, Receive], Awaitable[Answer]]) -> None:
        self.handle = handle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            status, body, headers = await self.handle(scope, receive)
        except ProtocolError as exc:
            status, body, headers = exc.status, dumps({"detail": exc.detail}), exc.headers
        except _Disconnected:
            return
        await _send_json(send, status, body, headers)


async def _send_json(
    send: Send, status: int, body: bytes, headers: dict[str, str] | None = None
) -> None:
    raw = [(b"content-length", str(len(body)).encode()), (b"content-type", _JSON_BYTES)]
    if headers:
        raw.extend((name.lower().encode(), value.encode()) for name, value in headers.items())
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class _Disconnected(Exception):
    """The client hung up before its request body arrived: nothing to answer."""


def _get_alone(routes: list[Route]) -> list[Route]:
    """FastAPI's GET routes answer GET alone (405 to HEAD); Starlette's add HEAD."""
    for route in routes:
        if route.methods is not None:
            route.methods.discard("HEAD")
    return routes


def _header(scope: Scope, name: str) -> str | None:
    key = name.encode("latin-1")
    for header, value in scope["headers"]:
        if header == key:
            return str(value.decode("latin-1"))
    return None


async def _body(model: type[T], scope: Scope, receive: Receive) -> T:
    """Read the whole request body and validate it as FastAPI would.

    Raises:
        ProtocolError: a 422.
        _Disconnected: the client went away.
    """
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    parsed: T = parse_body(model, body, _header(scope, "content-type"))
    return parsed


async def _poll(service: RolloutService, rollout_id: str, token: str, receive: Receive) -> bytes:
    """A poll that stops waiting when its client disconnects (watched only while it waits)."""
    watcher: asyncio.Task[None] | None = None

    def gone() -> asyncio.Future[None]:
        nonlocal watcher
        loop = asyncio.get_running_loop()
        hung_up: asyncio.Future[None] = loop.create_future()
        watcher = loop.create_task(_until_disconnect(receive, hung_up))
        return hung_up

    try:
        return await service.poll(rollout_id, token, gone=gone)
    finally:
        if watcher is not None:
            watcher.cancel()


async def _until_disconnect(receive: Receive, gone: asyncio.Future[None]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    if not gone.done():
        gone.set_result(None)


def _lease_missing(token: str | None) -> bytes:
    if token is None:
        error: dict[str, Any] = {
            "type": "missing",
            "loc": ["header", LEASE_HEADER],
            "msg": "Field required",
            "input": None,
        }
    else:
        error = {
            "type": "string_too_short",
            "loc": ["header", LEASE_HEADER],
            "msg": "String should have at least 1 character",
            "input": token,
            "ctx": {"min_length": 1},
        }
    return dumps({"detail": [error]})


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {}) or None
    return Response(
        dumps({"detail": exc.detail}),
        status_code=exc.status_code,
        media_type=_JSON,
        headers=headers,
    )


class _BearerAuth:
    """Every request (lifespan aside) wants ``Authorization: Bearer <key>``, compared in
    constant time; otherwise 401."""

    def __init__(self, app: ASGIApp, *, api_key: str) -> None:
        self.app = app
        self.expected = _bearer(api_key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not _authorized(scope, self.expected):
            await _unauthorized(send)
            return
        await self.app(scope, receive, send)


def _bearer(api_key: str) -> bytes:
    return f"Bearer {api_key}".encode()


def _authorized(scope: Scope, expected: bytes) -> bool:
    """Whether the request's Authorization header is ``expected`` (constant-time)."""
    given = b""
    for name, value in scope["headers"]:
        if name == b"authorization":
            given = value
            break
    return hmac.compare_digest(given, expected)


async def _unauthorized(send: Send) -> None:
    body = b'{"detail":"unauthorized"}'
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", _JSON_BYTES),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
