"""Before any rollout: is there an OpenAI-compatible API at the URL, and does it take the key?

``GET <base>/models`` first; an upstream without that route (404, 405) gets one tiny chat
completion instead (``max_tokens: 1``). A refused connection, a timeout, a refused key (401,
403) or no API at all (404 both ways) is a ``ConfigError``: one line, exit code 2, nothing run.
Anything else (200, or a 400 about the tiny request itself) means the endpoint is there.
"""

from __future__ import annotations

import json as jsonlib

from osmosis_run.errors import ConfigError
from osmosis_run.http.client import Client, TransportError

__all__ = ["PREFLIGHT_TIMEOUT_S", "preflight"]

PREFLIGHT_TIMEOUT_S = 10.0
_SKIP = "pass --no-preflight to skip this check"


async def preflight(client: Client, base: str, *, model: str | None) -> None:
    """Check the upstream once (``client`` speaks to ``base``).

    Raises:
        ConfigError: the endpoint cannot be reached, refuses the key, or is not an OpenAI API.
    """
    status = await _get(client, "/models", base)
    if status in (404, 405):
        tiny = {
            "model": model or "osmosis-run-preflight",
            "messages": [{"role": "user", "content": "ping"}],
            "max_tokens": 1,
        }
        status = await _get(client, "/chat/completions", base, json=tiny)
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


async def _get(client: Client, path: str, base: str, *, json: object | None = None) -> int:
    method, body = ("GET", b"") if json is None else ("POST", jsonlib.dumps(json).encode())
    try:
        reply = await client.request(method, path, body=body, timeout_s=PREFLIGHT_TIMEOUT_S)
    except TransportError as exc:
        if exc.kind == "connect":
            raise ConfigError(
                f"model endpoint {base}: cannot connect ({exc}); is the server running? "
                f"Check --chat-completions-url, or {_SKIP}"
            ) from None
        if exc.kind == "timeout":
            raise ConfigError(
                f"model endpoint {base}: no answer within {PREFLIGHT_TIMEOUT_S:g} s; {_SKIP}"
            ) from None
        raise ConfigError(f"model endpoint {base}: {exc}; {_SKIP}") from None
    return reply.status_code
