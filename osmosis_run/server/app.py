"""``create_rollout_server``: the ASGI app (Starlette) that serves a ``LocalBackend``.

The routes only translate HTTP to ``RolloutService`` calls and back; the protocol's rules live
in ``service.py`` (what happens), ``table.py`` (leases, retention) and ``protocol.py`` (bodies,
errors). Bearer auth wraps every route, ``/health`` included, compared in constant time. A poll
stops waiting when its client hangs up.
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
)

__all__ = ["create_rollout_server", "default_run_dir"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

T = TypeVar("T", bound=BaseModel)
_JSON = "application/json"
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
            else 4; 0 for no limit).

    Raises:
        ValueError: a timing is invalid, or ``api_key`` is blank.
        TypeError: ``backend`` is not a ``LocalBackend``.
        RunDirError: the run directory cannot be used.
    """
    if api_key is not None and not api_key.strip():
        raise ValueError("api_key must be non-empty when provided")
    if not isinstance(backend, LocalBackend):
        raise TypeError(
            f"backend must be an osmosis_run LocalBackend, got {type(backend).__name__}"
        )
    if configure_logging:
        _configure_default_logging()
    limit = backend.max_concurrent if concurrency is None else (concurrency or None)
    service = RolloutService(
        backend,
        run_dir=Path(out) if out is not None else default_run_dir(),
        result_wait_s=result_wait_timeout_sec,
        lease_s=polling_lease_timeout_sec,
        retention_s=result_retention_sec,
        concurrency=limit,
        secrets=(api_key,) if api_key else (),
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
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=serving,
        exception_handlers={HTTPException: _http_error},
    )
    app.state.rollouts = service
    return app


def _routes(service: RolloutService) -> list[Route]:
    async def health(_request: Request) -> Response:
        return _json(200, service.health())

    async def rollout(request: Request) -> Response:
        try:
            return _json(202, service.admit(await _body(RolloutInitRequest, request)))
        except ProtocolError as exc:
            return _error(exc)

    async def result(request: Request) -> Response:
        token = request.headers.get(_LEASE_KEY)
        if not token:
            return _lease_missing(token)
        rollout_id = request.path_params["rollout_id"]
        try:
            return _json(200, await _poll(service, rollout_id, token, request.receive))
        except ProtocolError as exc:
            return _error(exc)

    async def cancel(request: Request) -> Response:
        try:
            return _json(200, service.cancel(await _body(CancelRolloutsRequest, request)))
        except ProtocolError as exc:
            return _error(exc)

    return _get_alone(
        [
            Route("/health", health, methods=["GET"]),
            Route("/rollout", rollout, methods=["POST"]),
            Route("/rollout/cancel", cancel, methods=["POST"]),
            Route("/rollout/{rollout_id}/result", result, methods=["GET"]),
        ]
    )


def _get_alone(routes: list[Route]) -> list[Route]:
    """FastAPI's GET routes answer GET alone (405 to HEAD); Starlette's add HEAD."""
    for route in routes:
        if route.methods is not None:
            route.methods.discard("HEAD")
    return routes


async def _body(model: type[T], request: Request) -> T:
    body = await request.body()
    parsed: T = parse_body(model, body, request.headers.get("content-type"))
    return parsed


async def _poll(service: RolloutService, rollout_id: str, token: str, receive: Receive) -> bytes:
    """A poll that stops waiting when its client disconnects."""
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()
    watcher = loop.create_task(_until_disconnect(receive, gone))
    try:
        return await service.poll(rollout_id, token, gone=gone)
    finally:
        watcher.cancel()


async def _until_disconnect(receive: Receive, gone: asyncio.Future[None]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    if not gone.done():
        gone.set_result(None)


def _lease_missing(token: str | None) -> Response:
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
    return _json(422, dumps({"detail": [error]}))


def _json(status: int, body: bytes, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status, media_type=_JSON, headers=headers)


def _error(exc: ProtocolError) -> Response:
    return _json(exc.status, dumps({"detail": exc.detail}), exc.headers or None)


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _json(exc.status_code, dumps({"detail": exc.detail}), dict(exc.headers or {}) or None)


class _BearerAuth:
    """Every request (lifespan aside) wants ``Authorization: Bearer <key>``, compared in
    constant time; otherwise 401."""

    def __init__(self, app: ASGIApp, *, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            given = b""
            for name, value in scope["headers"]:
                if name == b"authorization":
                    given = value
                    break
            if not hmac.compare_digest(given, self.expected):
                body = b'{"detail":"unauthorized"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", _JSON.encode()),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
