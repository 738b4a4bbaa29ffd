"""The rollout server: ``create_rollout_server(backend=...)`` and what ``osmosis-run serve`` runs.

    protocol.py   the wire: request models, 422 bodies, result shaping (no web framework)
    table.py      the rollouts held: leases, status changes, retention
    service.py    admit, execute through the engine's seam, answer, record, shut down
    app.py        the Starlette app: routes, Bearer auth, lifespan

Starlette and uvicorn are the optional extra ``server``; they are imported when
``create_rollout_server`` is first used, never by ``import osmosis_run``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from osmosis_run.server.app import create_rollout_server

__all__ = ["create_rollout_server"]

EXTRA_HINT = 'the rollout server needs the "server" extra: pip install "osmosis-run[server]"'


def __getattr__(name: str) -> Any:
    if name != "create_rollout_server":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from osmosis_run.server.app import create_rollout_server
    except ModuleNotFoundError as exc:
        if exc.name not in ("starlette", "uvicorn", "anyio"):
            raise
        raise ModuleNotFoundError(f"{EXTRA_HINT} ({exc.name} is missing)", name=exc.name) from None
    return create_rollout_server
