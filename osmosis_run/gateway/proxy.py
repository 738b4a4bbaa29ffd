"""The gateway's requests: authorise, pace, forward (or replay), count and record each call.

Routes (``<id>`` is the rollout id; ``/v1/...`` without it works too, unaccounted):

    POST /v1/rollouts/<id>/chat/completions   JSON, or SSE passed through event by event
    GET  /v1/rollouts/<id>/models             the upstream's model list
    *    /v1/rollouts/<id>/<path>             proxied to <upstream>/<path> unchanged

Every request needs ``Authorization: Bearer <the run's key>`` (401 otherwise); the upstream
gets the provider key instead. A chat body the gateway cannot forward as JSON is a 400 saying
why: not UTF-8, not a JSON object, ``NaN`` / ``Infinity`` (or a number past a float's range), a
lone surrogate in a string, nesting past ``MAX_DEPTH``.

A chat completion retried after 429, 5xx or a dropped connection is one slow call to the
workflow; the answers the gateway makes itself carry ``x-should-retry: false`` so that the
OpenAI SDK does not retry on top of it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from osmosis_run._json import unencodable
from osmosis_run._redact import Redactor
from osmosis_run.gateway.accounting import Ledger, RolloutUsage
from osmosis_run.gateway.cache import ModelCache, cache_key, request_digest
from osmosis_run.gateway.pacing import AdaptiveLimit, Budget
from osmosis_run.gateway.recording import CallRecorder, capped, stream_summary
from osmosis_run.http.client import Client, Reply, TransportError
from osmosis_run.http.listener import Request, Response
from osmosis_run.retry import backoff, retry_after_headers

__all__ = ["Proxy", "ProxyConfig", "upstream_base"]

ROLLOUTS_PREFIX = "/v1/rollouts/"
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504, 520, 522, 524, 529})
_JSON = ("content-type", "application/json")
_NO_RETRY = ("x-should-retry", "false")
_PASSED_HEADERS = ("content-type", "x-request-id", "openai-processing-ms")
# orjson's nesting limit: the body is sent and its call recorded with it.
MAX_DEPTH = 254
_TOO_DEEP = f"the request body is nested more than {MAX_DEPTH} levels deep"


def upstream_base(url: str) -> str:
    """The upstream's base URL (``.../v1``), from a base or a chat completions endpoint."""
    base = url.rstrip("/")
    return base.removesuffix("/chat/completions").rstrip("/")


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """How the gateway talks to the upstream (built from the run's settings)."""

    upstream: str
    api_key: str | None
    run_key: str
    model: str | None = None
    model_retries: int = 5
    max_connections: int = 256
    rpm: float | None = None
    tpm: float | None = None
    retry_base_s: float = 0.25
    retry_max_s: float = 20.0
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 600.0


@dataclass(slots=True)
class _Sent:
    """What an upstream exchange gave: a response (streamed: still open) or an error."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    stream: Reply | None = None
    error: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    tries: int = 0  # upstream attempts made


class Proxy:
    """The request handler of the gateway's HTTP server (runs on the gateway's event loop)."""

    def __init__(
        self,
        config: ProxyConfig,
        *,
        ledger: Ledger,
        recorder: CallRecorder,
        cache: ModelCache | None,
        redactor: Redactor,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.ledger = ledger
        self.recorder = recorder
        self.cache = cache
        self.redactor = redactor
        self.base = upstream_base(config.upstream)
        self.limit = AdaptiveLimit(config.max_connections)
        self.rpm = Budget(config.rpm) if config.rpm else None
        self.tpm = Budget(config.tpm) if config.tpm else None
        self._rng = rng or random.Random()
        self._auth = f"Bearer {config.run_key}".encode()
        headers = {"accept-encoding": "identity"}
        if config.api_key:
            headers["authorization"] = f"Bearer {config.api_key}"
        # Every upstream call (the preflight, chat completions, other paths) goes through the
        # one client (osmosis_run/http/client.py); proxy variables are not used.
        self.client = Client(
            self.base,
            headers={"user-agent": "osmosis-run-gateway", **headers},
            connect_timeout_s=config.connect_timeout_s,
        )
        self._stream_usage = True  # the upstream takes stream_options.include_usage

    async def close(self) -> None:
        """Close the upstream connections."""
        await self.client.aclose()

    async def __call__(self, request: Request, response: Response) -> None:
        """Serve one request."""
        path, _, query = request.target.partition("?")
        if not path.startswith("/v1/"):
            await _error(response, 404, f"no such path: {path}", "not_found")
            return
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, self._auth):
            await _error(response, 401, "missing or wrong API key for this run", "invalid_api_key")
            return
        rollout_id: str | None = None
        rest = path[len("/v1/") :]
        if path.startswith(ROLLOUTS_PREFIX):
            rollout_id, _, rest = path[len(ROLLOUTS_PREFIX) :].partition("/")
        if rest == "chat/completions" and request.method == "POST":
            await self._chat(rollout_id, request, response)
        else:
            await self._pass(request, response, rest, query)

    async def _pass(self, request: Request, response: Response, rest: str, query: str) -> None:
        """Any other path: forwarded as it is (one attempt; no accounting)."""
        path = f"/{rest}" + (f"?{query}" if query else "")
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        try:
            reply = await self.client.request(
                request.method,
                path,
                body=request.body,
                headers=headers,
                timeout_s=self.config.read_timeout_s,
            )
        except TransportError as exc:
            await _error(response, 502, f"upstream {self.base}: {_describe(exc)}", "upstream_error")
            return
        await response.send(
            reply.status_code, _passed(reply.headers), self.redactor.text_bytes(reply.content)
        )

    async def _chat(self, rollout_id: str | None, request: Request, response: Response) -> None:
        try:
            body = _chat_body(request.body)
            if self.config.model:
                body["model"] = self.config.model
            content = _encoded(body)
        except _Unsendable as exc:
            await _error(response, 400, str(exc), exc.code)
            return
        account = self.ledger.account(rollout_id) if rollout_id else None
        call = _Call(self, rollout_id, account, body, content, size=len(request.body))
        live = self.ledger.live
        live.in_flight += 1
        live.calls += 1
        try:
            await call.run(response)
        finally:
            live.in_flight -= 1
            call.finish()

    async def send(self, call: _Call, content: bytes, *, stream: bool) -> _Sent:
        """POST a chat completion upstream, retrying 429, 5xx and dropped connections.

        A streamed response that is not retried comes back open, its slot in the in-flight
        limit still held: the caller reads it, then calls ``done_streaming``.
        """
        url = "/chat/completions"
        deadline = call.account.deadline if call.account is not None else None
        attempts: list[dict[str, Any]] = []
        number = 0
        while True:
            number += 1
            sent = await self._attempt(url, content, stream=stream, deadline=deadline)
            if sent.error is None and sent.status not in RETRIED_STATUSES:
                sent.attempts, sent.tries = attempts, number
                return sent
            wait = backoff(
                number,
                base_s=self.config.retry_base_s,
                max_s=self.config.retry_max_s,
                rng=self._rng,
            )
            asked = retry_after_headers(sent.headers) if sent.error is None else None
            delay = max(wait, asked) if asked is not None else wait
            attempts.append(
                {
                    "attempt": number,
                    "status": sent.status if sent.error is None else None,
                    "error": sent.error or _brief(sent.body),
                    "retry_after_s": asked,
                }
            )
            call.note_failure(sent.status if sent.error is None else None)
            late = deadline is not None and time.monotonic() + delay > deadline
            if number > self.config.model_retries or late:
                attempts[-1]["gave_up"] = "deadline" if late else "retries"
                sent.attempts, sent.tries = attempts, number
                return sent
            attempts[-1]["retry_in_s"] = round(delay, 3)
            call.retried()
            await asyncio.sleep(delay)

    async def _attempt(
        self, url: str, content: bytes, *, stream: bool, deadline: float | None
    ) -> _Sent:
        if self.rpm is not None:
            await self.rpm.take(1)
        if self.tpm is not None:
            await self.tpm.take(0)
        sent_at = await self.limit.acquire()
        timeout = self.config.read_timeout_s
        if deadline is not None:
            timeout = max(0.001, min(timeout, deadline - time.monotonic()))
        try:
            reply = await self.client.send("POST", url, body=content, timeout_s=timeout)
        except TransportError as exc:
            self.limit.release()
            return _Sent(0, {}, error=f"upstream {self.base}: {_describe(exc)}")
        except BaseException:  # cancelled (the gateway is closing): the slot is free again
            self.limit.release()
            raise
        headers = reply.headers
        if reply.status_code == 429:
            self.limit.throttled(sent_at)
        if stream and reply.status_code == 200:
            return _Sent(200, headers, stream=reply)
        try:
            data = await reply.aread()
        except TransportError as exc:
            return _Sent(0, {}, error=f"upstream {self.base}: {_describe(exc)}")
        finally:
            await reply.aclose()
            self.limit.release()
        if reply.status_code == 200:
            self.limit.succeeded()
        return _Sent(reply.status_code, headers, body=data)

    def done_streaming(self, *, ok: bool) -> None:
        """A streamed response has been read to its end (or abandoned)."""
        self.limit.release()
        if ok:
            self.limit.succeeded()


class _Call:
    """One chat completion call, from the workflow's request to its record."""

    def __init__(
        self,
        proxy: Proxy,
        rollout_id: str | None,
        account: RolloutUsage | None,
        body: dict[str, Any],
        content: bytes,
        *,
        size: int,
    ) -> None:
        self.proxy = proxy
        self.rollout_id = rollout_id
        self.account = account
        self.body = body
        self.content = content  # the body as JSON, as it goes upstream
        # Compact JSON of a parsed document is never longer than the document (bar a model
        # put in by --model), so a body this small is recorded as it is, not dumped and parsed.
        self.small = size + len(proxy.config.model or "") <= proxy.recorder.max_body_bytes
        self.stream = body.get("stream") is True
        self.started = time.monotonic()
        self.started_at = time.time()
        self.status = 0
        self.cached = False
        self.usage: dict[str, Any] | None = None
        self.response_record: Any = None
        self.error: str | None = None
        self.attempts: list[dict[str, Any]] = []
        self.tries = 0  # upstream attempts made (none for a replay)
        self.key: str | None = None
        self.fresh = False
        self.done = False
        if account is not None:
            account.calls += 1
            self.number = account.calls
            self.fresh, account.fresh = account.fresh, False
        else:
            self.number = 0

    async def run(self, response: Response) -> None:
        cache = self.proxy.cache
        if cache is not None:
            index = self.account.sample_index if self.account is not None else 0
            digest = request_digest(self.body)
            seen = self.account.occurrence(digest) if self.account is not None else 0
            self.key = cache_key(digest, sample_index=index, occurrence=seen)
            if cache.reads:
                hit = cache.get(self.key)
                if hit is not None:
                    await self._replay(response, *hit)
                    return
            if not cache.writes:
                await self._fail(
                    response,
                    503,
                    f"model cache {cache.path} has no response for this request (read-only "
                    "mode); re-run with --model-cache-mode read-write to fill it",
                    "cache_miss",
                )
                return
        if self.stream:
            await self._streamed(response)
        else:
            await self._whole(response)

    async def _whole(self, response: Response) -> None:
        sent = await self.proxy.send(self, self.content, stream=False)
        self.attempts = sent.attempts
        self.tries += sent.tries
        if sent.error is not None:
            await self._fail(response, 502, sent.error, "upstream_error")
            return
        self.status = sent.status
        body = self.proxy.redactor.text_bytes(sent.body)
        parsed = self._record_response(body)
        if sent.status == 200:
            document = parsed if body is sent.body else _loads(sent.body)
            self.usage = _usage_of(document)
            self.error = _not_a_completion(document, self.proxy.base)
            if self.error is None and self.key is not None and self.proxy.cache is not None:
                self.proxy.cache.put(self.key, "json", sent.body)  # only a complete answer
        else:
            self.error = _brief(body)
        headers = _passed(sent.headers)
        if sent.status != 200:
            headers.append(_NO_RETRY)
        self.finish()  # counted before the workflow can see the answer and end its rollout
        await response.send(sent.status, headers, body)

    async def _streamed(self, response: Response) -> None:
        body = self.body
        given = body.get("stream_options")
        asked: dict[str, Any] = given if isinstance(given, dict) else {}
        wants_usage = bool(asked.get("include_usage"))
        added = not wants_usage and self.proxy._stream_usage
        if added:
            body = {**body, "stream_options": {**asked, "include_usage": True}}
        sent = await self.proxy.send(self, _dumps(body) if added else self.content, stream=True)
        self.tries += sent.tries
        if (
            added
            and sent.status == 400
            and "stream_options" in sent.body.decode("utf-8", "replace")
        ):
            self.proxy._stream_usage = False  # an upstream without usage in streams
            added = False
            sent = await self.proxy.send(self, self.content, stream=True)
            self.tries += sent.tries
        self.attempts = sent.attempts
        if sent.error is not None:
            await self._fail(response, 502, sent.error, "upstream_error")
            return
        self.status = sent.status
        if sent.stream is None:  # an error answer: passed through whole
            data = self.proxy.redactor.text_bytes(sent.body)
            self.response_record = capped(data, self.proxy.recorder.max_body_bytes)
            self.error = _brief(data)
            self.finish()
            await response.send(sent.status, [*_passed(sent.headers), _NO_RETRY], data)
            return
        await self._relay(response, sent.stream, sent.headers, drop_usage=added)

    async def _relay(
        self,
        response: Response,
        upstream: Reply,
        headers: dict[str, str],
        *,
        drop_usage: bool,
    ) -> None:
        """Pass a stream's events to the client as each arrives; note what they say.

        Only a stream that ended with ``data: [DONE]`` and carried no error is cached.
        """
        state: dict[str, Any] = {"chunks": 0}
        content: list[str] = []
        kept: list[bytes] = []
        ok = False
        try:
            await response.start(200, _passed(headers) or [("content-type", "text/event-stream")])
            buffer = b""
            async for data in upstream.aiter_bytes():
                buffer = (buffer + data).replace(b"\r\n", b"\n")
                while (end := buffer.find(b"\n\n")) >= 0:
                    event, buffer = buffer[: end + 2], buffer[end + 2 :]
                    kept.append(event)  # the cache keeps it all, usage chunk included
                    if _read_event(event, state, content) and drop_usage:
                        continue  # the usage-only chunk the client did not ask for
                    if b"[DONE]" in event and "done" in state:
                        self._streamed_to_end(state, content)
                    await response.write(self.proxy.redactor.text_bytes(event))
            if buffer.strip():  # a last event without its blank line
                kept.append(buffer)
                _read_event(buffer, state, content)
                await response.write(self.proxy.redactor.text_bytes(buffer))
            self._streamed_to_end(state, content)  # counted before the workflow sees the end
            await response.end()
            ok = True
        except TransportError as exc:
            self.error = f"upstream {self.proxy.base}: {_describe(exc)} (mid-stream)"
            response.keep_alive = False  # the client sees the stream cut off
        except ConnectionError:
            self.error = "the client closed the connection mid-stream"
            raise
        finally:
            await upstream.aclose()
            self.proxy.done_streaming(ok=ok)
            self._streamed_to_end(state, content)
            complete = ok and self.error is None and "error" not in state
            if complete and self.key is not None and self.proxy.cache is not None:
                self.proxy.cache.put(self.key, "sse", b"".join(kept))

    async def _replay(self, response: Response, kind: str, data: bytes) -> None:
        """Answer from the cache, as the upstream answered then."""
        self.cached = True
        self.status = 200
        self.proxy.ledger.live.cache_hits += 1
        if kind == "sse":
            state: dict[str, Any] = {"chunks": 0}
            content: list[str] = []
            asked = self.body.get("stream_options")
            wants_usage = isinstance(asked, dict) and bool(asked.get("include_usage"))
            await response.start(200, [("content-type", "text/event-stream")])
            for event in _events(data):
                if _read_event(event, state, content) and not wants_usage:
                    continue
                if b"[DONE]" in event and "done" in state:
                    self._streamed_to_end(state, content)
                await response.write(self.proxy.redactor.text_bytes(event))
            await response.end()
            self._streamed_to_end(state, content)
            return
        self.usage = _usage_of(self._record_response(data))
        self.finish()
        await response.send(200, [_JSON], self.proxy.redactor.text_bytes(data))

    def _record_response(self, body: bytes) -> Any:
        """Keep ``body`` for the call's record (``capped``); return it parsed (None: not JSON)."""
        limit = self.proxy.recorder.max_body_bytes
        parsed = _loads(body)
        if parsed is None or len(body) > limit:
            self.response_record = capped(body, limit)
        else:
            self.response_record = parsed
        return parsed

    async def _fail(self, response: Response, status: int, message: str, code: str) -> None:
        self.status = status
        self.error = message
        self.finish()
        await _error(response, status, message, code)

    def note_failure(self, status: int | None) -> None:
        live = self.proxy.ledger.live
        if status == 429:
            live.rate_limited += 1
            if self.account is not None:
                self.account.usage.rate_limited += 1

    def retried(self) -> None:
        self.proxy.ledger.live.retries += 1
        if self.account is not None:
            self.account.usage.retries += 1

    def _streamed_to_end(self, state: dict[str, Any], content: list[str]) -> None:
        if self.done:
            return
        self.usage = state.get("usage")
        self.response_record = stream_summary(content, state)
        if self.error is None and "error" in state:
            self.error = (
                f"upstream {self.proxy.base}: the stream carried an error ({state['error']})"
            )
        elif self.error is None and "done" not in state:
            self.error = (
                f"upstream {self.proxy.base}: the stream ended before data: [DONE] (mid-stream)"
            )
        self.finish()

    def finish(self) -> None:
        """Count the call in its rollout's usage and write its record (once)."""
        if self.done:
            return
        self.done = True
        elapsed_ms = (time.monotonic() - self.started) * 1000
        live = self.proxy.ledger.live
        tokens = 0
        account = self.account
        # A failed call: an error status, or a 200 that was cut off or said it failed.
        failed = self.status != 200 or self.error is not None
        if account is not None:
            account.usage.requests += 1
            account.usage.model_wait_ms += elapsed_ms
            tokens = account.add_tokens(self.usage, live, billed=not self.cached)
            account.usage.errors += failed
        else:
            tokens = RolloutUsage().add_tokens(self.usage, live, billed=not self.cached)
        live.errors += failed
        if self.proxy.tpm is not None and tokens:
            self.proxy.tpm.charge(tokens)
        if account is None or not account.opened:
            return
        record = {
            "call": self.number,
            "started_at": round(self.started_at, 3),
            "ms": round(elapsed_ms, 3),
            "status": self.status,
            "attempt": self.tries,
            "stream": self.stream,
            "cached": self.cached,
            "model": self.body.get("model"),
            "request": self.body
            if self.small
            else capped(self.content, self.proxy.recorder.max_body_bytes),
            "response": self.response_record,
            "usage": self.usage,
            "error": self.error,
        }
        if self.attempts:
            record["previous_attempts"] = self.attempts
        self.proxy.recorder.write(self.rollout_id, record, fresh=self.fresh)


def _read_event(event: bytes, state: dict[str, Any], content: list[str]) -> bool:
    """Note what one SSE event says; True when it is a usage-only chunk (no choices).

    ``state`` gets ``done`` at ``data: [DONE]`` and ``error`` at an error (an ``event: error``,
    or a ``data: {"error": ...}`` as vLLM and others send).
    """
    usage_only = failed = False
    for line in event.split(b"\n"):
        if not line.startswith(b"data:"):
            if line.startswith(b"event:") and line[6:].strip() == b"error":
                failed = True
                state.setdefault("error", "an error event")
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            state["done"] = True
            continue
        try:
            chunk = json.loads(payload) if payload else None
        except ValueError:
            continue
        if isinstance(chunk, dict):
            usage_only = _read_chunk(chunk, state, content, failed=failed) or usage_only
    return usage_only


def _read_chunk(
    chunk: dict[str, Any], state: dict[str, Any], content: list[str], *, failed: bool
) -> bool:
    """Note what one chunk says; True when it is a usage-only chunk."""
    if failed or chunk.get("error"):
        state["error"] = _error_message(chunk.get("error") or chunk)
        return False
    state["chunks"] += 1
    state["model"] = chunk.get("model", state.get("model"))
    if isinstance(chunk.get("usage"), dict):
        state["usage"] = chunk["usage"]
    choices = chunk.get("choices")
    if not choices:
        return isinstance(chunk.get("usage"), dict)
    _read_choice(choices[0], state, content)
    return False


def _read_choice(choice: Any, state: dict[str, Any], content: list[str]) -> None:
    if not isinstance(choice, dict):
        return
    delta = choice.get("delta") or {}
    if isinstance(delta.get("content"), str):
        content.append(delta["content"])
    for tool in delta.get("tool_calls") or []:
        if not isinstance(tool, dict):
            continue
        calls = state.setdefault("tool_calls", {})
        entry = calls.setdefault(tool.get("index", 0), {"type": "function", "function": {}})
        if tool.get("id"):
            entry["id"] = tool["id"]
        function = tool.get("function") or {}
        if function.get("name"):
            entry["function"]["name"] = function["name"]
        if function.get("arguments"):
            entry["function"]["arguments"] = (
                entry["function"].get("arguments", "") + function["arguments"]
            )
    if choice.get("finish_reason"):
        state["finish"] = choice["finish_reason"]


def _events(data: bytes) -> list[bytes]:
    """A stored stream split back into its events."""
    events, rest = [], data
    while (end := rest.find(b"\n\n")) >= 0:
        events.append(rest[: end + 2])
        rest = rest[end + 2 :]
    if rest:
        events.append(rest)
    return events


def _loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _usage_of(body: Any) -> dict[str, Any] | None:
    usage = body.get("usage") if isinstance(body, dict) else None
    return usage if isinstance(usage, dict) else None


class _Unsendable(Exception):
    """A chat body the gateway will not forward (answered 400 with this message)."""

    def __init__(self, message: str, code: str = "invalid_json") -> None:
        super().__init__(message)
        self.code = code


def _chat_body(raw: bytes) -> dict[str, Any]:
    """A chat request's body: a JSON object in UTF-8, without NaN or infinities.

    Raises:
        _Unsendable: it is not.
    """
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        where = f"byte 0x{raw[exc.start]:02x} at {exc.start}"
        raise _Unsendable(f"the request body is not UTF-8 text ({where})") from None
    try:
        body = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise _Unsendable(_TOO_DEEP, "too_deeply_nested") from None
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise _Unsendable("the request body must be a JSON object")
    return body


def _no_constant(name: str) -> Any:
    raise _Unsendable(f"the request body holds {name}, which is not JSON; send a number or null")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Unsendable(
            f"the request body holds {text}, past a float's range; send a smaller number"
        )
    return value


def _encoded(body: dict[str, Any]) -> bytes:
    """The body as it goes upstream (compact UTF-8 JSON).

    Raises:
        _Unsendable: a string holds a lone surrogate, or it nests past ``MAX_DEPTH``.
    """
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:  # rare: say why (or take json's way for big integers)
        pass
    problem = unencodable(body, path="")
    if problem is not None:
        raise _Unsendable(f"the request body cannot be sent: {problem}")
    if _depth(body) > MAX_DEPTH:
        raise _Unsendable(_TOO_DEEP, "too_deeply_nested")
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _depth(value: Any) -> int:
    """How deep lists and objects nest in ``value`` (without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _dumps(body: dict[str, Any]) -> bytes:
    """A body ``_encoded`` took, changed by the gateway, as JSON again."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:  # integers past 64 bits
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _not_a_completion(document: Any, base: str) -> str | None:
    """Why a 200's body is not a completion (None when it is one, to be counted and cached)."""
    if not isinstance(document, dict):
        return f"upstream {base}: a 200 answer that is not a JSON object"
    if document.get("error"):
        return (
            f"upstream {base}: a 200 answer carrying an error ({_error_message(document['error'])})"
        )
    return None


def _error_message(error: Any) -> str:
    """The message of an error the upstream sent (an object with ``message``, or text), short."""
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:300]
    if isinstance(error, str):
        return error[:300]
    return json.dumps(error)[:300]


def _passed(headers: Any) -> list[tuple[str, str]]:
    return [(k, headers[k]) for k in _PASSED_HEADERS if k in headers]


def _brief(body: bytes) -> str:
    """An error body's message, short."""
    try:
        data = json.loads(body)
    except ValueError:
        return body[:300].decode("utf-8", "replace")
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:300]
    if isinstance(error, str):
        return error[:300]
    return body[:300].decode("utf-8", "replace")


def _describe(exc: TransportError) -> str:
    return f"cannot connect ({exc})" if exc.kind == "connect" else str(exc)


async def _error(response: Response, status: int, message: str, code: str) -> None:
    await response.send(status, [_JSON, _NO_RETRY], error_body(message, code))


def error_body(message: str, code: str) -> bytes:
    """An error answer's body, in the OpenAI error shape the gateway answers every error in."""
    error = {"message": message, "type": "osmosis_run_gateway", "code": code}
    return json.dumps({"error": error}).encode()
