"""Where the gateway runs: a thread of its own with its own event loop, started before rollouts.

Why a thread: the gateway's work per call (parse, forward, relay, count, record) would
otherwise queue behind the workflows' tasks on their event loop, adding their scheduling delay
to every call, and a workflow's blocking code would stall every other rollout's model calls.
On its own loop the gateway answers while the workflows' loop is busy; the two share the
interpreter lock, which both release while they wait on sockets. (A process would free the
gateway from the lock too, at the price of moving every call's accounting across a pipe;
tests/perf/gateway.py measures what the thread costs: W11, W11b.)

``Gateway.start`` binds a port (on loopback, or on ``host``: an address that rollouts on other
machines reach, see ``gateway/setup.py``), runs the preflight and returns once the gateway
answers; a failure there (a wrong URL, a refused connection, a refused key, an unusable cache,
an address it cannot bind) is a ``ConfigError`` before any rollout runs. Every request must
carry the run's own key (``new_key``), wherever it comes from.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from osmosis_run._redact import Redactor
from osmosis_run.errors import ConfigError
from osmosis_run.eventloop import new_event_loop
from osmosis_run.gateway.accounting import Ledger, LiveStats, usage_of
from osmosis_run.gateway.cache import CacheMode, ModelCache
from osmosis_run.gateway.preflight import preflight
from osmosis_run.gateway.proxy import Proxy, ProxyConfig, error_body
from osmosis_run.gateway.recording import CallRecorder
from osmosis_run.http.listener import Limits, Listener
from osmosis_run.results.records import ModelUsage

__all__ = ["LIMITS", "Gateway", "url_host"]

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0
# What the rollouts' connections may hold (the README's gateway section): a model call's body
# is a whole conversation, up to 64 MiB; its head and body come from a process on this machine.
LIMITS = Limits(
    keep_alive_s=5.0,  # uvicorn's default
    head_timeout_s=10.0,
    body_timeout_s=60.0,
    max_connections=1024,
    max_head=64 * 1024,
    max_body=64 * 1024 * 1024,
)
_NO_RETRY = ((b"x-should-retry", b"false"),)  # a refusal is not worth the client's retries


class Gateway:
    """A running model gateway for one run (the engine's ``ModelGateway``).

    Args:
        config: the upstream and how to pace it.
        run_dir: where ``rollouts/<id>/model_calls.jsonl`` go.
        record_calls: whether to write them.
        cache_path, cache_mode: the response cache (None: no cache).
        token_price: USD per million prompt and completion tokens (None: no cost).
        check: whether to run the preflight.
        limits: what its listener allows the rollouts' connections (timeouts, how many, sizes).
        host: the address it listens on (default loopback).
        advertise: the address rollouts are given, when not ``host`` (``host`` 0.0.0.0, say).
    """

    def __init__(
        self,
        config: ProxyConfig,
        *,
        run_dir: Path,
        record_calls: bool = True,
        cache_path: Path | None = None,
        cache_mode: CacheMode = "read-write",
        token_price: tuple[float, float] | None = None,
        check: bool = True,
        limits: Limits | None = None,
        host: str = "127.0.0.1",
        advertise: str | None = None,
    ) -> None:
        self.config = config
        self.host = host
        self.advertise = advertise or host
        self.limits = limits or LIMITS
        self.api_key = config.run_key
        self.token_price = token_price
        self.ledger = Ledger()
        self.redactor = Redactor((config.api_key, config.run_key))
        self.recorder = CallRecorder(run_dir, self.redactor, enabled=record_calls)
        self.cache = ModelCache(cache_path, cache_mode) if cache_path is not None else None
        self._check = check and not (self.cache is not None and cache_mode == "read-only")
        self.url = ""
        self.proxy: Proxy | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None

    @staticmethod
    def new_key() -> str:
        """A random key for one run: what rollouts send, worthless outside it."""
        return "osr-" + secrets.token_urlsafe(24)

    # The engine's side (any thread) ------------------------------------------------------

    def url_for(self, rollout_id: str) -> str:
        """A rollout's ``chat_completions_url``: ``http://<host>:<port>/v1/rollouts/<id>``."""
        return f"{self.url}/v1/rollouts/{quote(rollout_id, safe='')}"

    def open_rollout(self, rollout_id: str, *, sample_index: int, timeout_s: float | None) -> None:
        """An attempt of a rollout starts; its calls may retry for ``timeout_s`` from now."""
        self.ledger.open(rollout_id, sample_index=sample_index, timeout_s=timeout_s)

    def take_usage(self, rollout_id: str) -> ModelUsage:
        """The usage of a finished rollout (all zeros when it made no call)."""
        account = self.ledger.take(rollout_id)
        if account is None:
            return ModelUsage(cost=0.0 if self.token_price is not None else None)
        return usage_of(account, self.token_price)

    @property
    def live(self) -> LiveStats:
        """The run's model calls so far: in flight, tokens, 429s (for the live progress)."""
        return self.ledger.live

    def stats(self) -> dict[str, Any]:
        """What this invocation's gateway saw, for summary.json's ``model.gateway``."""
        live = self.ledger.live
        limit = self.proxy.limit if self.proxy is not None else None
        stats: dict[str, Any] = {
            "calls": live.calls,
            "errors": live.errors,
            "rate_limited": live.rate_limited,
            "retries": live.retries,
            "cache_hits": live.cache_hits,
        }
        if limit is not None:
            stats.update(
                max_connections=limit.ceiling,
                peak_in_flight=limit.peak,
                limit_lowest=limit.lowest,
                limit_final=limit.current,
                limit_decreases=limit.decreases,
            )
        if self.cache is not None:
            stats["cache"] = {
                "path": str(self.cache.path),
                "mode": self.cache.mode,
                "hits": self.cache.hits,
                "misses": self.cache.misses,
                "stored": self.cache.stored,
            }
        if self.recorder.failures:
            stats["unrecorded_calls"] = self.recorder.failures
        cpu = self._cpu_s()
        if cpu is not None:
            stats["cpu_s"] = round(cpu, 3)
        return stats

    def _cpu_s(self) -> float | None:
        """CPU seconds the gateway's thread has used (where the platform can tell)."""
        thread = self._thread
        if thread is None or thread.ident is None or not hasattr(time, "pthread_getcpuclockid"):
            return None
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except OSError:  # the thread has ended
            return None

    # Lifecycle -----------------------------------------------------------------------------

    def start(self) -> Gateway:
        """Start serving (and run the preflight); return once the gateway answers.

        Raises:
            ConfigError: the preflight failed, or the port could not be bound.
        """
        self._thread = threading.Thread(target=self._main, name="osmosis-run gateway", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise ConfigError("the model gateway did not start within 60 s")
        if self._failure is not None:
            self._thread.join(STOP_TIMEOUT_S)
            if self.cache is not None:
                self.cache.close()
            raise self._failure
        return self

    def close(self) -> None:
        """Stop serving and release the upstream connections and the cache."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)
            self._thread = None
        if self.cache is not None:
            with contextlib.suppress(Exception):
                self.cache.close()

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    def _main(self) -> None:
        loop = new_event_loop(fast=True)  # its own code alone: uvloop where installed
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # handed to start(), raised there
            if not self._ready.is_set():
                self._failure = exc
        finally:
            self._ready.set()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        proxy = Proxy(
            self.config,
            ledger=self.ledger,
            recorder=self.recorder,
            cache=self.cache,
            redactor=self.redactor,
        )
        self.proxy = proxy
        listener = Listener(proxy, self.limits, error_body=error_body, error_headers=_NO_RETRY)
        try:
            await listener.start(self.host, 0)
        except OSError as exc:
            await proxy.close()
            raise ConfigError(
                f"the model gateway cannot listen on {self.host}: "
                f"{os.strerror(exc.errno) if exc.errno else exc}; pass "
                "--gateway-host with an address of this machine"
            ) from None
        try:
            self.url = f"http://{url_host(self.advertise)}:{listener.port}"
            if self._check:
                await preflight(proxy.client, proxy.base, model=self.config.model)
            self._ready.set()
            await self._stop.wait()
        finally:
            await listener.close()  # the rollouts' keep-alive connections too
            await proxy.close()
            self.recorder.close()


def url_host(host: str) -> str:
    """A host as it stands in a URL: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
