"""The gateway a run's settings ask for: none without an endpoint or with ``--no-gateway``.

Where it listens (``gateway_address``): rollouts in this process reach it on loopback, but a
rollout on another node of a Ray cluster, or on a rollout server on another machine, would be
handed its own loopback. So with a Ray cluster or a ``--server`` whose address is not loopback,
the gateway listens on this machine's address toward that host (the one the kernel routes
from: what that host sees this machine as), and rollouts are given that address;
``--gateway-host`` says it outright (``0.0.0.0``: every interface, rollouts given the routed
address). Off loopback, the run's key (``osr-...``, new each run) is what keeps others out:
every request without it gets 401. The Ray actors check the address from their own nodes before
any rollout runs (``backends/ray.py``).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from osmosis_run.errors import ConfigError
from osmosis_run.run.settings import EvalSettings
from osmosis_run.run.settings.models import GatewayOptions

if TYPE_CHECKING:
    from osmosis_run.gateway.host import Gateway

__all__ = [
    "LOOPBACK",
    "check_gateway_options",
    "gateway_address",
    "gateway_for",
    "needs_gateway",
    "route_from",
    "start_gateway",
]

LOOPBACK = "127.0.0.1"
_ANY = ("0.0.0.0", "::")


def needs_gateway(settings: EvalSettings) -> bool:
    """Whether a run puts a gateway between its rollouts and the model endpoint."""
    return settings.uses_gateway


def check_gateway_options(settings: EvalSettings) -> None:
    """Options that mean nothing without the gateway are a usage error rather than ignored.

    Raises:
        ConfigError: ``--model`` or ``--model-cache`` with ``--no-gateway``, or without an
            endpoint.
    """
    g = settings.gateway
    given = [
        name for name, value in (("--model", g.model), ("--model-cache", g.model_cache)) if value
    ]
    if not given or needs_gateway(settings):
        return
    why = (
        "--no-gateway passes the endpoint straight through"
        if g.no_gateway
        else "there is no model endpoint (--chat-completions-url)"
    )
    verb = "needs" if len(given) == 1 else "need"
    raise ConfigError(f"{' and '.join(given)} {verb} the model gateway, but {why}")


def gateway_for(settings: EvalSettings, run_dir: Path) -> Gateway | None:
    """Start the gateway of a run (preflight included), or None when the run has none.

    Raises:
        ConfigError: the preflight failed, the cache cannot be used, httptools is missing.
    """
    check_gateway_options(settings)
    if not needs_gateway(settings):
        return None
    e = settings.execution
    return start_gateway(
        settings.gateway,
        upstream=e.chat_completions_url or "",
        api_key=e.api_key_value(),
        run_dir=run_dir,
        model=settings.gateway_model(),
        address=gateway_address(settings),
    )


def start_gateway(
    options: GatewayOptions,
    *,
    upstream: str,
    api_key: str | None,
    run_dir: Path,
    host: str | None = None,
    model: str | None = None,
    address: tuple[str, str] | None = None,
) -> Gateway:
    """Start a gateway to ``upstream`` with these options (preflight included); eval's and
    serve's. ``host`` (else ``options.gateway_host``, else loopback) is where it listens;
    ``address`` (bind, advertised) overrides both; ``model`` defaults to ``options.model``.

    Raises:
        ConfigError: the preflight failed, the cache cannot be used, the address cannot be
            bound, httptools is missing.
    """
    try:
        from osmosis_run.gateway.host import Gateway
        from osmosis_run.gateway.proxy import ProxyConfig
    except ImportError as exc:
        raise ConfigError(
            f"the model gateway needs httptools ({exc}); pip install 'osmosis-run[gateway]', "
            "or pass --no-gateway"
        ) from None
    g = options
    if address is None:
        bind = host or g.gateway_host or LOOPBACK
        address = (bind, _advertised(bind, None))
    config = ProxyConfig(
        upstream=upstream,
        api_key=api_key,
        run_key=Gateway.new_key(),
        model=model if model is not None else g.model,
        model_retries=g.model_retries,
        max_connections=g.max_model_connections,
        rpm=g.rpm,
        tpm=g.tpm,
    )
    gateway = Gateway(
        config,
        run_dir=run_dir,
        record_calls=not g.no_record_calls,
        cache_path=Path(g.model_cache) if g.model_cache else None,
        cache_mode=g.model_cache_mode,
        token_price=g.token_price,
        check=not g.no_preflight,
        host=address[0],
        advertise=address[1],
    )
    return gateway.start()


def gateway_address(settings: EvalSettings) -> tuple[str, str]:
    """Where a run's gateway listens and what address its rollouts are given.

    ``--gateway-host``; else, when the rollouts run on another machine (a Ray cluster or a
    ``--server`` whose host is not loopback), this machine's address toward it; else loopback.

    Raises:
        ConfigError: that host's name does not resolve.
    """
    peer = _peer_host(settings)
    given = settings.gateway.gateway_host
    if given is not None:
        return given, _advertised(given, peer)
    if peer is None or _is_loopback(peer):
        return LOOPBACK, LOOPBACK
    local = route_from(peer)
    return local, local


def _peer_host(settings: EvalSettings) -> str | None:
    """The host the rollouts run on, when it is another machine's (None: this process's)."""
    e = settings.execution
    if e.server is not None:
        return urlsplit(e.server).hostname
    if e.backend != "ray":
        return None
    address = e.ray_address or os.environ.get("RAY_ADDRESS") or ""
    if address.startswith("ray://"):
        address = address.removeprefix("ray://")
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit():
        return None  # "auto", or a local cluster: the nodes of this machine
    return host.strip("[]")


def _advertised(bind: str, peer: str | None) -> str:
    """The address rollouts are given for a gateway listening on ``bind``."""
    if bind not in _ANY:
        return bind
    if peer is not None and not _is_loopback(peer):
        return route_from(peer)
    return LOOPBACK


def route_from(host: str) -> str:
    """This machine's address on the route toward ``host`` (the kernel's choice; no packet
    is sent).

    Raises:
        ConfigError: the name does not resolve, or no route leads there.
    """
    try:
        family, _, _, _, target = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(target)
            return str(probe.getsockname()[0])
    except OSError as exc:
        raise ConfigError(
            f"cannot tell this machine's address toward {host} for the model gateway: "
            f"{exc.strerror or exc}; pass --gateway-host with an address the rollouts reach"
        ) from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
