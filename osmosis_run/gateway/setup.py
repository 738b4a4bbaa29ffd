"""The gateway a run's settings ask for: none without an endpoint or with ``--no-gateway``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from osmosis_run.errors import ConfigError
from osmosis_run.run.settings import EvalSettings

if TYPE_CHECKING:
    from osmosis_run.gateway.host import Gateway

__all__ = ["check_gateway_options", "gateway_for", "needs_gateway"]


def needs_gateway(settings: EvalSettings) -> bool:
    """Whether a run puts a gateway between its rollouts and the model endpoint."""
    return bool(settings.execution.chat_completions_url) and not settings.gateway.no_gateway


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
    try:
        from osmosis_run.gateway.host import Gateway
        from osmosis_run.gateway.proxy import ProxyConfig
    except ImportError as exc:
        raise ConfigError(
            f"the model gateway needs httptools ({exc}); pip install 'osmosis-run[gateway]', "
            "or pass --no-gateway"
        ) from None
    g, e = settings.gateway, settings.execution
    config = ProxyConfig(
        upstream=e.chat_completions_url or "",
        api_key=e.api_key_value(),
        run_key=Gateway.new_key(),
        model=settings.gateway_model(),
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
    )
    return gateway.start()
