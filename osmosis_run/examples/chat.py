"""A one-call chat workflow: send the prompt to an OpenAI-compatible endpoint, keep the reply.

The endpoint and key come from the ambient ``RolloutContext`` (``--chat-completions-url`` and
``--api-key``, or ``OSMOSIS_CHAT_COMPLETIONS_URL`` and ``OSMOSIS_API_KEY``). It uses the
standard library only: ``urllib.request`` in a worker thread. The key goes in the
Authorization header and nowhere else: error messages never contain it.

Run it with ``osmosis-run eval --config configs/chat.toml``.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from typing import Any

from osmosis_run.sdk.context import AgentWorkflowContext, get_rollout_context
from osmosis_run.sdk.types import AgentWorkflowConfig, AgentWorkflowOutput
from osmosis_run.sdk.workflow import AgentWorkflow

__all__ = [
    "ChatCompletionsWorkflow",
    "ChatConfig",
    "assistant_message",
    "completions_endpoint",
    "config",
    "post_json",
]

NO_URL = "no chat completions URL: pass --chat-completions-url or set OSMOSIS_CHAT_COMPLETIONS_URL"
_EXCERPT_CHARS = 200
_TOKEN_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


class ChatConfig(AgentWorkflowConfig):
    """Settings of the chat workflow: the model and its sampling parameters."""

    model: str = "gpt-4o-mini"
    temperature: float = 0.0
    max_tokens: int | None = None
    timeout_s: float = 60


config = ChatConfig(name="chat", description="one chat completions call per rollout")


def completions_endpoint(url: str) -> str:
    """Return the chat completions endpoint of a base URL (``.../v1``) or of the endpoint itself."""
    base = url.rstrip("/")
    return base if base.endswith("/chat/completions") else f"{base}/chat/completions"


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


def _excerpt(payload: bytes) -> str:
    text = " ".join(payload.decode("utf-8", "replace").split())
    return text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + "..."


def _http_error(exc: urllib.error.HTTPError, url: str, api_key: str | None) -> RuntimeError:
    try:
        body = exc.read(4096)
    finally:
        exc.close()
    message = f"chat completions request to {url} failed: HTTP {exc.code}: {_excerpt(body)}"
    return RuntimeError(_redact(message, api_key))


def post_json(
    url: str, body: dict[str, Any], *, api_key: str | None, timeout: float
) -> dict[str, Any]:
    """POST ``body`` as JSON and return the decoded JSON answer (blocking).

    Raises:
        RuntimeError: the server answered with an HTTP error or could not be reached.
        TimeoutError: the server did not answer within ``timeout`` seconds.
        ValueError: the answer is not a JSON object.
    """
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload: bytes = response.read()
    except urllib.error.HTTPError as exc:
        raise _http_error(exc, url, api_key) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise TimeoutError(f"{url} did not answer within {timeout:g} s") from None
        raise RuntimeError(_redact(f"cannot reach {url}: {exc.reason}", api_key)) from None
    return _json_object(payload)


def _json_object(payload: bytes) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except ValueError:
        data = None
    if isinstance(data, dict):
        return data
    raise ValueError(f"chat completions answer is not a JSON object: {_excerpt(payload)}")


def assistant_message(response: dict[str, Any]) -> dict[str, Any]:
    """Return ``choices[0].message`` with the response's ``usage`` and ``model`` attached.

    Raises:
        ValueError: the response has no ``choices[0].message`` object.
    """
    try:
        message = response["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        message = None
    if isinstance(message, dict):
        extras = {key: response[key] for key in ("usage", "model") if key in response}
        return {"role": "assistant", **extras, **message}
    raise ValueError("chat completions answer has no choices[0].message object")


def _token_metrics(message: dict[str, Any]) -> dict[str, float]:
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return {}
    counts = {key: usage.get(key) for key in _TOKEN_KEYS}
    return {
        key: float(value)
        for key, value in counts.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


def _settings(value: AgentWorkflowConfig | None) -> ChatConfig:
    if value is None:
        return ChatConfig(name="chat")
    if isinstance(value, ChatConfig):
        return value
    return ChatConfig.model_validate(value.model_dump())


def _endpoint() -> tuple[str, str | None]:
    """The endpoint URL and API key of the running rollout (or of the environment)."""
    ambient = get_rollout_context()
    if ambient is not None:
        url, api_key = ambient.chat_completions_url, ambient.api_key
    else:
        url = os.environ.get("OSMOSIS_CHAT_COMPLETIONS_URL", "")
        api_key = os.environ.get("OSMOSIS_API_KEY") or None
    if not url:
        raise ValueError(NO_URL)
    return completions_endpoint(url), api_key


def _request_body(prompt: list[dict[str, Any]], settings: ChatConfig) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": settings.model,
        "messages": prompt,
        "temperature": settings.temperature,
    }
    if settings.max_tokens is not None:
        body["max_tokens"] = settings.max_tokens
    return body


class ChatCompletionsWorkflow(AgentWorkflow[ChatConfig]):
    """Ask the configured model once and return the prompt plus its reply."""

    async def run(self, ctx: AgentWorkflowContext[ChatConfig]) -> AgentWorkflowOutput:
        """Send the prompt to the chat completions endpoint and return the transcript."""
        settings = _settings(ctx.config)
        url, api_key = _endpoint()
        body = _request_body(ctx.prompt, settings)
        response = await asyncio.to_thread(
            post_json, url, body, api_key=api_key, timeout=settings.timeout_s
        )
        reply = assistant_message(response)
        return AgentWorkflowOutput(messages=[*ctx.prompt, reply], metrics=_token_metrics(reply))
