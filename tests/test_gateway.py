"""The model gateway against a scripted loopback upstream, called with the real ``openai`` SDK."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fake_upstream import Reply, Upstream, serve_upstream
from openai import AsyncOpenAI

from osmosis_run.errors import ConfigError
from osmosis_run.gateway.cache import ModelCache, cache_key, request_digest
from osmosis_run.gateway.host import Gateway
from osmosis_run.gateway.pacing import AdaptiveLimit, Budget
from osmosis_run.gateway.proxy import ProxyConfig, upstream_base
from osmosis_run.store.layout import MODEL_CALLS

UPSTREAM_KEY = "sk-upstream-SECRET-0123456789"
HELLO = [{"role": "user", "content": "hello there model"}]


@contextmanager
def running(
    up: Upstream, run_dir: Path, *, key: str | None = UPSTREAM_KEY, **options: Any
) -> Iterator[Gateway]:
    config = {k: options.pop(k) for k in list(options) if k in ProxyConfig.__dataclass_fields__}
    config.setdefault("retry_base_s", 0.01)
    proxy = ProxyConfig(upstream=up.url, api_key=key, run_key=Gateway.new_key(), **config)
    with Gateway(proxy, run_dir=run_dir, **options) as gateway:
        yield gateway


def client(gateway: Gateway, rollout: str, **options: Any) -> Any:
    return AsyncOpenAI(base_url=gateway.url_for(rollout), api_key=gateway.api_key, **options)


def ask(gateway: Gateway, rollout: str = "r0", **request: Any) -> Any:
    async def go() -> Any:
        async with client(gateway, rollout, max_retries=0) as c:
            return await c.chat.completions.create(
                model="m", messages=request.pop("messages", HELLO), **request
            )

    return asyncio.run(go())


def records(run_dir: Path, rollout: str = "r0") -> list[dict[str, Any]]:
    path = run_dir / "rollouts" / rollout / MODEL_CALLS
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def up() -> Iterator[Upstream]:
    with serve_upstream(api_key=UPSTREAM_KEY) as upstream:
        yield upstream


def test_usage_of_json_and_streamed_calls_equals_the_upstreams_count(
    up: Upstream, tmp_path: Path
) -> None:
    async def calls(gateway: Gateway) -> list[Any]:
        async with client(gateway, "r0") as c:
            whole = await c.chat.completions.create(model="m", messages=HELLO)
            asked = await c.chat.completions.create(
                model="m", messages=HELLO, stream=True, stream_options={"include_usage": True}
            )
            asked_chunks = [chunk async for chunk in asked]
            plain = await c.chat.completions.create(model="m", messages=HELLO, stream=True)
            plain_chunks = [chunk async for chunk in plain]
        return [whole, asked_chunks, plain_chunks]

    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        whole, asked, plain = asyncio.run(calls(gateway))
        usage = gateway.take_usage("r0")
    assert whole.usage.total_tokens == 7
    assert asked[-1].usage.total_tokens == 7  # the last SSE chunk, as the client asked
    assert all(chunk.choices for chunk in plain)  # no usage-only chunk it did not ask for
    assert "".join(c.choices[0].delta.content or "" for c in plain) == "echo: hello there model"
    # The gateway asked for usage in the stream either way, and counted it.
    assert [r.body.get("stream_options") for r in up.chat_requests()] == [
        None,
        {"include_usage": True},
        {"include_usage": True},
    ]
    assert (usage.requests, usage.total_tokens) == (3, up.total_tokens)
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        up.prompt_tokens,
        up.completion_tokens,
    )
    assert (usage.retries, usage.rate_limited, usage.errors) == (0, 0, 0)


def test_the_upstream_gets_the_provider_key_and_the_workflow_only_the_runs(
    up: Upstream, tmp_path: Path
) -> None:
    with running(up, tmp_path) as gateway:
        ask(gateway)
        assert gateway.api_key.startswith("osr-")
        assert UPSTREAM_KEY not in gateway.api_key
        assert gateway.url_for("a/b") == f"{gateway.url}/v1/rollouts/a%2Fb"
    assert {r.authorization for r in up.requests} == {f"Bearer {UPSTREAM_KEY}"}


def test_requests_without_the_runs_key_get_401(up: Upstream, tmp_path: Path) -> None:
    with running(up, tmp_path) as gateway:
        url = f"{gateway.url_for('r0')}/chat/completions"
        body = {"model": "m", "messages": HELLO}
        missing = httpx.post(url, json=body)
        wrong = httpx.post(url, json=body, headers={"Authorization": f"Bearer {UPSTREAM_KEY}"})
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert missing.json()["error"]["message"] == "missing or wrong API key for this run"
    assert up.chat_requests() == []


def test_a_429_without_retry_after_is_retried_with_backoff_as_one_slow_call(
    up: Upstream, tmp_path: Path
) -> None:
    up.script([Reply(status=429), Reply(status=429)])
    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        reply = ask(gateway)
        usage = gateway.take_usage("r0")
    assert reply.choices[0].message.content == "echo: hello there model"
    assert (usage.requests, usage.retries, usage.rate_limited, usage.errors) == (1, 2, 2, 0)
    [record] = records(tmp_path)
    assert (record["status"], record["attempt"]) == (200, 3)
    assert [a["status"] for a in record["previous_attempts"]] == [429, 429]
    assert all(
        a["retry_after_s"] is None and a["retry_in_s"] > 0 for a in record["previous_attempts"]
    )


def test_retry_after_is_honoured(up: Upstream, tmp_path: Path) -> None:
    up.script([Reply(status=429, retry_after=0.4)])
    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        ask(gateway)
    first, second = up.chat_requests()
    # An event loop's timer may fire up to its clock's resolution early (uvloop's: 1 ms).
    assert second.at - first.at >= 0.4 - 0.002
    assert records(tmp_path)[0]["previous_attempts"][0]["retry_after_s"] == 0.4


def test_a_500_is_retried(up: Upstream, tmp_path: Path) -> None:
    up.script([Reply(status=500)])
    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        reply = ask(gateway)
        usage = gateway.take_usage("r0")
    assert reply.usage.total_tokens == 7
    assert (usage.retries, usage.rate_limited) == (1, 0)
    previous = records(tmp_path)[0]["previous_attempts"]
    assert [(a["status"], a["error"]) for a in previous] == [(500, "The server had an error")]


def test_a_dropped_connection_is_retried(up: Upstream, tmp_path: Path) -> None:
    up.script([Reply(drop=True), Reply(drop=True)])
    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        reply = ask(gateway)
        usage = gateway.take_usage("r0")
    assert reply.usage.total_tokens == 7
    assert (usage.retries, usage.errors) == (2, 0)
    previous = records(tmp_path)[0]["previous_attempts"]
    assert [(a["status"], a["error"]) for a in previous] == [
        (None, f"upstream {up.url}: the connection dropped")
    ] * 2


def test_a_refused_connection_is_retried_then_reported(tmp_path: Path) -> None:
    dead = Upstream(url="http://127.0.0.1:9/v1")
    with running(dead, tmp_path, check=False, model_retries=2) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        with pytest.raises(openai.APIStatusError) as caught:
            ask(gateway)
    assert caught.value.status_code == 502
    assert caught.value.body == {
        "message": "upstream http://127.0.0.1:9/v1: cannot connect (connection refused)",
        "type": "osmosis_run_gateway",
        "code": "upstream_error",
    }
    assert len(records(tmp_path)[0]["previous_attempts"]) == 3


def test_retries_end_at_model_retries_and_the_sdk_does_not_retry_on_top(
    up: Upstream, tmp_path: Path
) -> None:
    up.default = Reply(status=429)
    with running(up, tmp_path, model_retries=1) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)

        async def go() -> None:
            async with client(gateway, "r0", max_retries=3) as c:  # the SDK would retry 429s
                await c.chat.completions.create(model="m", messages=HELLO)

        with pytest.raises(openai.RateLimitError):
            asyncio.run(go())
        usage = gateway.take_usage("r0")
    assert len(up.chat_requests()) == 2  # one attempt and one retry, nothing more
    assert (usage.requests, usage.retries, usage.rate_limited, usage.errors) == (1, 1, 2, 1)
    assert records(tmp_path)[0]["previous_attempts"][-1]["gave_up"] == "retries"


def test_no_retry_starts_past_the_rollouts_deadline(up: Upstream, tmp_path: Path) -> None:
    up.script([Reply(status=429, retry_after=30)])
    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=2.0)
        started = time.monotonic()
        with pytest.raises(openai.RateLimitError):
            ask(gateway)
        assert time.monotonic() - started < 1.5
    assert records(tmp_path)[0]["previous_attempts"][0]["gave_up"] == "deadline"


def test_a_slow_response_is_time_waiting_on_the_model(up: Upstream, tmp_path: Path) -> None:
    up.script([Reply(delay=0.3)])
    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        ask(gateway)
        usage = gateway.take_usage("r0")
    assert usage.model_wait_ms >= 300
    assert records(tmp_path)[0]["ms"] >= 300


def test_streaming_passes_chunks_through_as_they_arrive(up: Upstream, tmp_path: Path) -> None:
    up.script([Reply(content="one two three four", chunk_delay=0.15)])
    arrived: list[float] = []

    async def go(gateway: Gateway) -> None:
        async with client(gateway, "r0") as c:
            stream = await c.chat.completions.create(model="m", messages=HELLO, stream=True)
            async for _ in stream:
                arrived.append(time.monotonic())

    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        asyncio.run(go(gateway))
    assert len(arrived) == 5  # four words and the finish chunk (the usage chunk is dropped)
    assert arrived[0] < up.stream_chunks_sent[-1] - 0.3  # the first long before the upstream's last
    record = records(tmp_path)[0]
    assert record["response"]["choices"][0]["message"]["content"] == "one two three four"
    assert record["usage"]["completion_tokens"] == 4


def test_a_stream_cut_by_the_upstream_is_an_error_for_the_workflow(
    up: Upstream, tmp_path: Path
) -> None:
    up.script([Reply(content="a b c d e f", drop_mid_stream=True)])

    async def go(gateway: Gateway) -> None:
        async with client(gateway, "r0", max_retries=0) as c:
            stream = await c.chat.completions.create(model="m", messages=HELLO, stream=True)
            async for _ in stream:
                pass

    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        with pytest.raises((httpx.HTTPError, openai.APIError)):
            asyncio.run(go(gateway))
        usage = gateway.take_usage("r0")
        stats = gateway.stats()
    [record] = records(tmp_path)
    assert record["status"] == 200
    assert record["error"] == f"upstream {up.url}: the connection dropped (mid-stream)"
    # A 200 cut mid-way is a failed call, in the rollout's usage and the run's counts.
    assert (usage.requests, usage.errors, stats["errors"]) == (1, 1, 1)


def test_models_and_other_paths_are_proxied(up: Upstream, tmp_path: Path) -> None:
    with running(up, tmp_path) as gateway:
        headers = {"Authorization": f"Bearer {gateway.api_key}"}
        models = httpx.get(f"{gateway.url_for('r0')}/models", headers=headers)
        other = httpx.post(f"{gateway.url}/v1/embeddings", json={"input": "x"}, headers=headers)
    assert models.json()["data"][0]["id"] == "up-model"
    assert other.status_code == 404
    assert other.json() == {"error": {"message": "no route POST /v1/embeddings"}}
    assert [r.authorization for r in up.requests] == [f"Bearer {UPSTREAM_KEY}"] * 3  # + preflight


def test_model_replaces_the_requests_model(up: Upstream, tmp_path: Path) -> None:
    with running(up, tmp_path, model="served-model") as gateway:
        ask(gateway)
    assert up.chat_requests()[0].body["model"] == "served-model"


def test_a_burst_of_429s_lowers_the_in_flight_limit_and_success_grows_it_back(
    up: Upstream, tmp_path: Path
) -> None:
    up.script([Reply(status=429, retry_after=0.05, delay=0.05)] * 8)
    up.default = Reply(delay=0.01)

    async def burst(gateway: Gateway, n: int) -> None:
        async with client(gateway, "r0", max_retries=0) as c:
            await asyncio.gather(
                *(c.chat.completions.create(model="m", messages=HELLO) for _ in range(n))
            )

    with running(up, tmp_path, max_connections=8) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        asyncio.run(burst(gateway, 8))
        after_burst = gateway.stats()
        asyncio.run(burst(gateway, 80))
        recovered = gateway.stats()
        usage = gateway.take_usage("r0")
    assert (usage.requests, usage.rate_limited, usage.errors) == (88, 8, 0)
    assert after_burst["limit_decreases"] == 1  # one burst, one decrease
    assert after_burst["limit_lowest"] == 4
    assert recovered["limit_final"] == 8
    assert up.peak_in_flight <= 8


def test_the_adaptive_limit_halves_once_per_burst_and_keeps_one() -> None:
    async def go() -> AdaptiveLimit:
        limit = AdaptiveLimit(4)
        sent = [await limit.acquire() for _ in range(4)]
        waiting = asyncio.ensure_future(limit.acquire())
        await asyncio.sleep(0.01)
        assert not waiting.done()  # four in flight: the fifth waits
        for at in sent:
            limit.throttled(at)
        assert (limit.current, limit.decreases) == (2, 1)
        for _ in range(4):
            limit.release()
        await waiting
        limit.throttled(time.monotonic())
        limit.throttled(time.monotonic())
        assert limit.current == 1
        return limit

    assert asyncio.run(go()).lowest == 1


def test_the_rpm_budget_paces_calls_after_its_burst() -> None:
    async def go() -> float:
        budget = Budget(per_minute=1200)  # 20 a second, a burst of 100
        for _ in range(100):
            await budget.take(1)
        started = time.monotonic()
        for _ in range(4):
            await budget.take(1)
        return time.monotonic() - started

    assert asyncio.run(go()) >= 0.15


def test_the_tpm_budget_waits_out_its_debt() -> None:
    async def go() -> float:
        budget = Budget(per_minute=600)  # 10 tokens a second
        budget.charge(budget.capacity + 3)  # a response used more than the bucket held
        started = time.monotonic()
        await budget.take(0)
        return time.monotonic() - started

    assert asyncio.run(go()) >= 0.25


def test_upstream_base_takes_a_base_or_an_endpoint() -> None:
    assert upstream_base("http://h:8000/v1/") == "http://h:8000/v1"
    assert upstream_base("http://h:8000/v1/chat/completions") == "http://h:8000/v1"


def test_records_cap_long_bodies_and_redact_the_keys(up: Upstream, tmp_path: Path) -> None:
    up.script([Reply(content=f"the key is {UPSTREAM_KEY}")])
    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        gateway.recorder.max_body_bytes = 400
        reply = ask(gateway, messages=[{"role": "user", "content": "x" * 500}])
    assert reply.choices[0].message.content == "the key is [REDACTED]"  # not even to the workflow
    text = (tmp_path / "rollouts/r0" / MODEL_CALLS).read_text()
    assert UPSTREAM_KEY not in text
    assert gateway.api_key not in text
    [record] = records(tmp_path)
    assert record["request"]["truncated"] is True
    assert record["request"]["bytes"] > 500
    assert len(record["request"]["head"]) == 400
    assert record["response"]["choices"][0]["message"]["content"] == "the key is [REDACTED]"


def test_a_long_answer_is_cut_in_the_record_but_still_counted(up: Upstream, tmp_path: Path) -> None:
    up.script([Reply(content="y" * 600)])
    with running(up, tmp_path) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        gateway.recorder.max_body_bytes = 400
        reply = ask(gateway, messages=[{"role": "user", "content": "short"}])
        usage = gateway.take_usage("r0")
    assert reply.choices[0].message.content == "y" * 600
    [record] = records(tmp_path)
    assert record["request"] == {"model": "m", "messages": [{"role": "user", "content": "short"}]}
    assert record["response"]["truncated"] is True
    assert len(record["response"]["head"]) == 400
    assert record["usage"] is not None
    assert usage.requests == 1
    assert usage.total_tokens == record["usage"]["total_tokens"]


def test_calls_are_not_recorded_with_no_record_calls(up: Upstream, tmp_path: Path) -> None:
    with running(up, tmp_path, record_calls=False) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        ask(gateway)
        assert gateway.take_usage("r0").requests == 1
    assert not (tmp_path / "rollouts/r0" / MODEL_CALLS).exists()


def test_calls_of_unknown_rollouts_are_served_but_not_recorded(
    up: Upstream, tmp_path: Path
) -> None:
    with running(up, tmp_path) as gateway:
        ask(gateway, rollout="..")
    assert not (tmp_path / MODEL_CALLS).exists()
    assert list(tmp_path.rglob(MODEL_CALLS)) == []


def test_token_price_gives_cost(up: Upstream, tmp_path: Path) -> None:
    with running(up, tmp_path, token_price=(2.0, 10.0)) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        ask(gateway)
        usage = gateway.take_usage("r0")
        idle = gateway.take_usage("r1")
    assert usage.cost == pytest.approx(
        (2 * usage.prompt_tokens + 10 * usage.completion_tokens) / 1e6
    )
    assert (idle.requests, idle.cost) == (0, 0.0)


# The cache -------------------------------------------------------------------------------


def test_a_cached_run_replays_with_the_upstream_stopped(tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    with (
        serve_upstream(api_key=UPSTREAM_KEY) as up,
        running(up, tmp_path / "a", cache_path=cache) as gw,
    ):
        gw.open_rollout("r0", sample_index=0, timeout_s=None)
        first = ask(gw)
        streamed = _stream_text(gw)
        url = up.url
    stopped = Upstream(url=url)  # nothing listens there any more
    with running(stopped, tmp_path / "b", cache_path=cache, cache_mode="read-only") as gw:
        gw.open_rollout("r0", sample_index=0, timeout_s=None)
        again = ask(gw)
        assert _stream_text(gw) == streamed
        usage = gw.take_usage("r0")
        stats = gw.stats()
    assert again.model_dump() == first.model_dump()
    assert (usage.requests, usage.total_tokens) == (2, 14)
    assert stats["cache_hits"] == 2
    assert stats["cache"]["misses"] == 0
    assert [r["cached"] for r in records(tmp_path / "b")] == [True, True]


def _stream_text(gateway: Gateway) -> str:
    async def go() -> str:
        async with client(gateway, "r0", max_retries=0) as c:
            stream = await c.chat.completions.create(model="m", messages=HELLO, stream=True)
            return "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices])

    return asyncio.run(go())


def test_a_read_only_miss_is_an_error_naming_the_cache(up: Upstream, tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    ModelCache(cache, "read-write").close()
    with running(up, tmp_path, cache_path=cache, cache_mode="read-only") as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        with pytest.raises(openai.APIStatusError) as caught:
            ask(gateway)
    assert caught.value.status_code == 503
    assert caught.value.body == {
        "message": f"model cache {cache} has no response for this request (read-only mode); "
        "re-run with --model-cache-mode read-write to fill it",
        "type": "osmosis_run_gateway",
        "code": "cache_miss",
    }
    assert up.chat_requests() == []


def test_refresh_asks_the_upstream_again_and_stores_the_new_answer(
    up: Upstream, tmp_path: Path
) -> None:
    cache = tmp_path / "cache.sqlite"
    for content in ("first", "second"):
        up.script([Reply(content=content)])
        mode = "read-write" if content == "first" else "refresh"
        with running(up, tmp_path, cache_path=cache, cache_mode=mode) as gateway:
            gateway.open_rollout("r0", sample_index=0, timeout_s=None)
            assert ask(gateway).choices[0].message.content == content
    with running(up, tmp_path, cache_path=cache) as gateway:
        gateway.open_rollout("r0", sample_index=0, timeout_s=None)
        assert ask(gateway).choices[0].message.content == "second"
    assert len(up.chat_requests()) == 2


def test_cache_keys_leave_out_stream_options_and_keep_the_sample_and_repeat() -> None:
    body = {"model": "m", "messages": HELLO, "temperature": 0.7, "stream": True}
    digest = request_digest(body)
    assert request_digest({**body, "stream_options": {"include_usage": True}}) == digest
    assert request_digest({**body, "temperature": 0.0}) != digest
    assert request_digest({**body, "model": "other"}) != digest
    assert request_digest(dict(reversed(body.items()))) == digest  # canonical: key order
    keys = {cache_key(digest, sample_index=s, occurrence=o) for s in range(2) for o in range(2)}
    assert len(keys) == 4


def test_an_unusable_cache_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "not-a-db").write_text("hello, I am text " * 100)
    with pytest.raises(ConfigError) as caught:
        ModelCache(tmp_path / "not-a-db", "read-write")
    assert str(caught.value).startswith(f"--model-cache {tmp_path / 'not-a-db'}: cannot use it")
    with pytest.raises(ConfigError) as missing:
        ModelCache(tmp_path / "none.sqlite", "read-only")
    assert str(missing.value) == (
        f"--model-cache {tmp_path / 'none.sqlite'}: no such file (read-only mode replays a "
        "cache a run filled; fill it with --model-cache-mode read-write)"
    )


# Preflight -------------------------------------------------------------------------------


def test_preflight_refused_connection(tmp_path: Path) -> None:
    with (
        pytest.raises(ConfigError) as caught,
        running(Upstream(url="http://127.0.0.1:9/v1"), tmp_path),
    ):
        pass
    assert str(caught.value) == (
        "model endpoint http://127.0.0.1:9/v1: cannot connect (connection refused); is the "
        "server running? Check --chat-completions-url, or pass --no-preflight to skip this check"
    )


def test_preflight_refused_key(up: Upstream, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught, running(up, tmp_path, key="sk-wrong-key-000000"):
        pass
    assert str(caught.value) == (
        f"model endpoint {up.url}: the API key was refused (HTTP 401); check --api-key or "
        "OSMOSIS_API_KEY, or pass --no-preflight to skip this check"
    )
    assert "sk-wrong" not in str(caught.value)


def test_preflight_wrong_url(up: Upstream, tmp_path: Path) -> None:
    wrong = Upstream(url=up.url.removesuffix("/v1") + "/v2")
    with pytest.raises(ConfigError) as caught, running(wrong, tmp_path):
        pass
    assert str(caught.value) == (
        f"model endpoint {wrong.url}: no OpenAI-compatible API there (HTTP 404 for /models and "
        "/chat/completions); check --chat-completions-url (a base URL such as "
        "http://host:8000/v1), or pass --no-preflight to skip this check"
    )


def test_preflight_can_be_skipped(tmp_path: Path) -> None:
    with running(Upstream(url="http://127.0.0.1:9/v1"), tmp_path, check=False) as gateway:
        assert gateway.url.startswith("http://127.0.0.1:")


def test_a_client_expecting_100_continue_is_answered(up: Upstream, tmp_path: Path) -> None:
    import subprocess

    with running(up, tmp_path) as gateway:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "y " * 900}]})
        started = time.monotonic()
        done = subprocess.run(
            ["curl", "-s", "--expect100-timeout", "10", "-H", "Expect: 100-continue",
             "-H", "Content-Type: application/json",
             "-H", f"Authorization: Bearer {gateway.api_key}", "-d", body,
             f"{gateway.url_for('r0')}/chat/completions"],
            capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        elapsed = time.monotonic() - started
    assert json.loads(done.stdout)["usage"]["prompt_tokens"] == 900
    assert elapsed < 5  # curl waits 10 s for a 100 Continue that never comes
