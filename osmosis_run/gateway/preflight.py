"""Before any rollout: is there an OpenAI-compatible API at the URL, and does it take the key?

``GET <base>/models`` first; an upstream without that route (404, 405) gets one tiny chat
completion instead (``max_tokens: 1``). A refused connection, a timeout, a refused key (401,
403) or no API at all (404 both ways) is a ``ConfigError``: one line, exit code 2, nothing run.
Anything else (200, or a 400 about the tiny request itself) means the endpoint is there.
"""

from __future__ import annotations

import httpx

from osmosis_run.errors import ConfigError

__all__ = ["PREFLIGHT_TIMEOUT_S", "preflight"]

PREFLIGHT_TIMEOUT_S = 10.0
_SKIP = "pass --no-preflight to skip this check"


async def preflight(client: httpx.AsyncClient, base: str, *, model: str | None) -> None:
    """Check the upstream once.

    Raises:
        ConfigError: the endpoint cannot be reached, refuses the key, or is not an OpenAI API.
    """
    status = await _get(client, f"{base}/models", base)
    if status in (404, 405):
        tiny = {
            "model": model or "osmosis-run-preflight",
            "messages": [{"role": "user", "content": "ping"}],
            "max_tokens": 1,
        }
        status = await _get(client, f"{base}/chat/completions", base, json=tiny)
        if status in (404, 405):
            raise ConfigError(
                f"model endpoint {base}: no OpenAI-compatible API there (HTTP {status} for "
                "/models and /chat/completions); check --chat-completions-url (a base URL such "
                f"as http://host:8000/v1), or {_SKIP}"
            )
    if status in (401, 403):
        raise ConfigError(
            f"model endpoint {base}: the API key was refused (HTTP {status}); check --api-key "
            f"or OSMOSIS_API_KEY, or {_SKIP}"
        )


async def _get(
    client: httpx.AsyncClient, url: str, base: str, *, json: object | None = None
) -> int:
    try:
        if json is None:
            reply = await client.get(url, timeout=PREFLIGHT_TIMEOUT_S)
        else:
            reply = await client.post(url, json=json, timeout=PREFLIGHT_TIMEOUT_S)
    except httpx.ConnectError as exc:
        raise ConfigError(
            f"model endpoint {base}: cannot connect ({_reason(exc)}); is the server running? "
            f"Check --chat-completions-url, or {_SKIP}"
        ) from None
    except httpx.TimeoutException:
        raise ConfigError(
            f"model endpoint {base}: no answer within {PREFLIGHT_TIMEOUT_S:g} s; {_SKIP}"
        ) from None
    except httpx.HTTPError as exc:
        raise ConfigError(f"model endpoint {base}: {type(exc).__name__}: {exc}; {_SKIP}") from None
    return reply.status_code


def _reason(exc: BaseException) -> str:
    """What the operating system said (httpx says "All connection attempts failed")."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower()
        cause = cause.__cause__ or cause.__context__
    return str(exc) or "connection failed"
