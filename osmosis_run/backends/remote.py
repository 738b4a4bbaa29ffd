"""The remote executor (``eval --server URL``): each attempt runs on a rollout server.

It speaks the rollout server protocol "0.4" of osmosis-ai 0.3.8, so it drives osmosis-run's own
server (``osmosis-run serve``) and osmosis-ai's ``create_rollout_server`` alike:

    GET  /health                     once, at open: the server answers, accepts the key, and
                                     says its capacity (``concurrency.max_concurrent``)
    POST /rollout                    admission: 202 with a polling lease; 429 waits for its
                                     Retry-After; 409 (the id is still retained there, from a
                                     retry, a resume or another client) takes a fresh id
    GET  /rollout/{id}/result        long polls with the lease header until the status is final;
                                     each poll renews the lease
    POST /rollout/cancel             when the attempt is cancelled (Ctrl-C, its deadline)

The request is the one an in-process rollout gets, with the endpoint of its ``RolloutContext``
(``chat_completions_url``, ``llm_api_key``) and its timeouts, which the server enforces; the
whole attempt is bounded by the engine's ``within`` (both timeouts plus ``DEADLINE_MARGIN_S``).

What can go wrong, and what it becomes:

- transport errors and 502/503/504 are retried (``RETRY_DELAYS_S``), a poll only while its lease
  holds; a server still unreachable after them, when admitting, is an ``InfrastructureError``
  (the run stops, exit 4, and resumes later); a poll that cannot reach it raises ``AttemptLost``;
- a rollout the server no longer knows (404 or 403 on a poll: it restarted), lost its lease, or
  cancelled by someone else raises ``AttemptLost``: the engine runs it again;
- a server that answers outside the protocol, or refuses the key mid-run, is an
  ``InfrastructureError``; a request it refuses (422) is that rollout's ``validation_error``.

osmosis-ai's server reports a rollout whose grader did not apply (no grader, or a row with no
label and no metadata) as a bare failure (no message, no category, no sample); it is recorded as
what an in-process eval makes of it, an ungraded success, though without its transcript.

The wire result carries no trajectory messages and no artifacts: the trajectory is written
from the sample's messages, and result.json says where the artifacts are
(``Artifacts(unavailable=...)``). ``workflow_ms`` runs from admission to the first sight of
``grading`` (or to the end), ``grader_ms`` from there to the end: they include the time the
rollout waited on the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import secrets
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError

from osmosis_run._construct import construct
from osmosis_run.errors import ConfigError, InfrastructureError
from osmosis_run.http.client import Client, Proxied, Response, TransportError, proxy_for
from osmosis_run.retry import retry_after_headers
from osmosis_run.run.plan import Plan
from osmosis_run.run.rollouts import timed_out
from osmosis_run.run.seam import Artifacts, Attempt, AttemptLost, AttemptResult, Deadlines
from osmosis_run.sdk.backend import DEFAULT_MAX_CONCURRENT
from osmosis_run.sdk.types import (
    ExecutionOutcome,
    ExecutionResult,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
)

__all__ = ["DEADLINE_MARGIN_S", "PROTOCOL_VERSION", "RETRY_DELAYS_S", "RemoteExecutor"]

PROTOCOL_VERSION = "0.4"
LEASE_HEADER = "X-Osmosis-Rollout-Lease"
# Transport errors and gateway answers (502-504) are retried after these pauses.
RETRY_DELAYS_S = (0.1, 0.25, 0.5, 1.0, 2.0)
_GATEWAY = frozenset({502, 503, 504})
# A 429 waits for its Retry-After (the one rule, osmosis_run/retry.py: at most
# MAX_RETRY_AFTER_S), at least RETRY_AFTER_FLOOR_S; 1 s without one (osmosis-ai's client too).
RETRY_AFTER_FLOOR_S = 0.05
RETRY_AFTER_DEFAULT_S = 1.0
# A long poll may take the server's wait; the read timeout leaves this much more.
RESULT_READ_GRACE_S = 10.0
# The whole attempt may take its two timeouts plus this (queueing on the server, the network).
DEADLINE_MARGIN_S = 30.0
# A cancellation has this long to reach the server (a stop gives rollouts 2 s to end).
CANCEL_TIMEOUT_S = 1.5
HEALTH_TIMEOUT_S = 10.0
# An admission must be answered within this.
REQUEST_TIMEOUT_S = 30.0
# Rollouts in flight when neither --concurrency nor the server's health says (as in-process).
DEFAULT_LIMIT = DEFAULT_MAX_CONCURRENT
_FINAL = frozenset({"success", "failure", "cancelled"})


@dataclass(frozen=True, slots=True)
class _Admission:
    rollout_id: str
    token: str
    wait_s: float
    lease_s: float


@dataclass(slots=True)
class _Reply:
    """What one attempt got back: the result, and when it was admitted, graded and done."""

    result: ExecutionResult
    graded: bool
    admitted_at: float
    grading_at: float | None
    done_at: float
    remote_id: str | None


class RemoteExecutor:
    """Run each attempt on a rollout server (protocol "0.4"), bounded by the engine's deadline.

    Args:
        url: the server's base URL (``http://host:port``, maybe with a path prefix).
        api_key: sent as ``Authorization: Bearer`` on every request (None: no header).
        retry_delays_s: pauses between retries of a transport error or a 502/503/504.
        deadline_margin_s: what the whole attempt may take beyond its two timeouts.

    Requests go through ``osmosis_run.http.client.Client``, or through httpx (``Proxied``) when
    the environment names a proxy for the URL.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        retry_delays_s: tuple[float, ...] = RETRY_DELAYS_S,
        deadline_margin_s: float = DEADLINE_MARGIN_S,
    ) -> None:
        self.url = url.rstrip("/")
        self.retry_delays_s = retry_delays_s
        self.deadline_margin_s = deadline_margin_s
        headers = {"accept": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._headers = headers
        self._http: Client | Proxied | None = None
        self._limit: int | None = None

    @classmethod
    def from_plan(cls, plan: Plan) -> RemoteExecutor:
        """The executor of a plan with ``--server``."""
        execution = plan.settings.execution
        assert execution.server is not None
        return cls(execution.server, api_key=execution.server_api_key_value())

    @property
    def limit(self) -> int | None:
        """The server's ``max_concurrent`` (its /health), else ``DEFAULT_LIMIT``."""
        return self._limit or DEFAULT_LIMIT

    @property
    def local_artifacts(self) -> bool:
        """Never: artifacts stay on the server."""
        return False

    def adopt_artifacts_dirs(self, rollout_ids: Iterable[str]) -> None:
        """No directories to adopt: the server makes its own."""

    async def open(self) -> None:
        """Check that the server answers ``GET /health`` and accepts the key.

        Raises:
            ConfigError: a wrong URL, a refused connection, a refused key, not a rollout
                server, or one shutting down (exit code 2, nothing ran).
        """
        if proxy_for(self.url) is None:
            self._http = Client(self.url, headers=self._headers, connect_timeout_s=HEALTH_TIMEOUT_S)
        else:
            self._http = Proxied(
                self.url, headers=self._headers, connect_timeout_s=HEALTH_TIMEOUT_S
            )
        try:
            health = await self._health()
        except BaseException:
            await self.close()
            raise
        self._limit = _max_concurrent(health)

    async def _health(self) -> dict[str, Any]:
        where = f"--server {self.url}"
        try:
            response = await self._request("GET", "/health", within_s=HEALTH_TIMEOUT_S)
        except TransportError as exc:
            raise ConfigError(
                f"{where}: cannot reach the rollout server ({exc}); check the URL and that the "
                "server is running"
            ) from None
        if response.status_code in (401, 403):
            raise ConfigError(
                f"{where}: the server refused the key (HTTP {response.status_code}); give its "
                "key with --server-api-key or OSMOSIS_RUN_SERVER_API_KEY"
            )
        try:
            health = response.json() if response.status_code == 200 else None
        except ValueError:
            health = None
        if not isinstance(health, dict):
            raise ConfigError(
                f"{where}: GET /health answered HTTP {response.status_code}"
                f"{'' if response.status_code != 200 else ' without a JSON object'}; "
                "is this a rollout server (protocol 0.4)?"
            )
        lifecycle = health.get("lifecycle")
        if isinstance(lifecycle, dict) and lifecycle.get("accepting_rollouts") is False:
            raise ConfigError(f"{where}: the server is shutting down; start it again")
        return health

    async def close(self) -> None:
        """Close the connections."""
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    async def run(self, attempt: Attempt, deadlines: Deadlines) -> AttemptResult:
        """Admit the attempt, long-poll its result; cancel it on the server if cancelled."""
        request = attempt.request
        started = time.perf_counter()
        seconds = _bound(
            request.agent_timeout_sec, request.grader_timeout_sec, self.deadline_margin_s
        )
        if seconds is None:
            reply = await self._rollout(attempt)
        else:
            reply = await deadlines.within(
                "rollout",
                seconds,
                self._rollout(attempt),
                rollout_id=request.id,
                timed_out=lambda: _Reply(
                    timed_out("rollout", seconds, None), False, started, None, 0.0, None
                ),
            )
        return self._attempt_result(reply, started)

    def _attempt_result(self, reply: _Reply, started: float) -> AttemptResult:
        done = reply.done_at or time.perf_counter()
        graded_at = reply.grading_at or done
        result = reply.result
        outcome = construct(
            ExecutionOutcome, workflow=result, grader=result if reply.graded else None
        )
        where = f" (rollout {reply.remote_id})" if reply.remote_id else ""
        return AttemptResult(
            outcome,
            (graded_at - started) * 1000,
            (done - graded_at) * 1000 if reply.grading_at is not None else None,
            Artifacts(unavailable=f"kept by the rollout server {self.url}{where}"),
        )

    async def _rollout(self, attempt: Attempt) -> _Reply:
        body = _body(attempt, _remote_id(attempt))
        try:
            admitted = await self._admit(body)
            if isinstance(admitted, _Reply):
                return admitted
            return await self._poll(admitted)
        except asyncio.CancelledError:
            await self._cancel(body["rollout_id"])  # the id last sent: maybe admitted already
            raise

    async def _admit(self, body: dict[str, Any]) -> _Admission | _Reply:
        """POST the rollout until it is admitted (202), waiting out 429s.

        A 409 changes ``body["rollout_id"]`` to a fresh id. Returns a ``_Reply`` when the
        server refused the request itself (422).
        """
        delays = iter(self.retry_delays_s)
        while True:
            try:
                response = await self._request("POST", "/rollout", body=body)
            except TransportError as exc:
                await self._again(delays, self._unreachable("POST /rollout", exc))
                continue
            code = response.status_code
            if code == 202:
                return _admission(response, body["rollout_id"], self.url)
            if code == 429:
                await asyncio.sleep(_retry_after(response))
            elif code == 409:  # retained there (a retry, a resume, another client): a new id
                body["rollout_id"] = _fresh_id(body["extra_fields"]["osmosis_run"])
            elif code == 422:
                return _refused(response, body["rollout_id"])
            elif code in _GATEWAY:
                await self._again(delays, self._answered("POST /rollout", response))
            else:
                raise self._answered("POST /rollout", response)

    async def _poll(self, admission: _Admission) -> _Reply:
        """Long-poll the result, renewing the lease, until its status is final."""
        admitted_at = time.perf_counter()
        path = f"/rollout/{quote(admission.rollout_id, safe='')}/result"
        headers = {LEASE_HEADER: admission.token}
        timeout = admission.wait_s + RESULT_READ_GRACE_S
        lease_until = time.monotonic() + admission.lease_s
        grading_at: float | None = None
        delays = iter(self.retry_delays_s)
        while True:
            sent = time.monotonic()
            try:
                response = await self._request("GET", path, headers=headers, within_s=timeout)
            except TransportError as exc:
                await self._again(delays, _lost(exc), until=lease_until)
                continue
            code = response.status_code
            if code in _GATEWAY:
                lost = AttemptLost(f"the rollout server answered HTTP {code} to a poll")
                await self._again(delays, lost, until=lease_until)
                continue
            if code in (403, 404):  # the server restarted, or forgot the rollout
                raise AttemptLost(f"the rollout server no longer knows {admission.rollout_id}")
            if code != 200:
                raise self._answered(f"GET {path}", response)
            lease_until = sent + admission.lease_s
            delays = iter(self.retry_delays_s)
            wire = _json_object(response, f"GET {path}", self.url)
            status = wire.get("status")
            if status == "grading" and grading_at is None:
                grading_at = time.perf_counter()
            if status in _FINAL:
                return _reply(wire, admission.rollout_id, self.url, admitted_at, grading_at)

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        within_s: float = REQUEST_TIMEOUT_S,
    ) -> Response:
        """One whole exchange, within ``within_s``."""
        assert self._http is not None, "RemoteExecutor.open() was not awaited"
        content = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        return await self._http.request(
            method, path, body=content, headers=headers, timeout_s=within_s
        )

    async def _again(
        self,
        delays: Iterator[float],
        error: Exception,
        *,
        until: float = math.inf,
    ) -> None:
        """Sleep the next retry pause, or raise ``error`` when none is left before ``until``."""
        delay = next(delays, None)
        if delay is None or time.monotonic() + delay >= until:
            raise error
        await asyncio.sleep(delay)

    async def _cancel(self, remote_id: str) -> None:
        """Ask the server to cancel a rollout; best effort, within ``CANCEL_TIMEOUT_S``."""
        if self._http is None:
            return
        with contextlib.suppress(TransportError):
            body = {"ids": [remote_id]}
            await self._request("POST", "/rollout/cancel", body=body, within_s=CANCEL_TIMEOUT_S)

    def _unreachable(self, what: str, exc: TransportError) -> InfrastructureError:
        return InfrastructureError(f"rollout server {self.url} unreachable ({what}: {exc})")

    def _answered(self, what: str, response: Response) -> InfrastructureError:
        code = response.status_code
        if code in (401, 403):
            hint = "the server refused the key; check --server-api-key"
        elif code == 503:
            hint = "the server is shutting down"
        else:
            hint = f"{_detail(response)}; is this a rollout server (protocol 0.4)?"
        return InfrastructureError(
            f"rollout server {self.url}: {what} answered HTTP {code}: {hint}"
        )


def _bound(agent: float | None, grader: float | None, margin: float) -> float | None:
    """How long an attempt may take in all: None unless the request has a timeout."""
    if agent is None and grader is None:
        return None
    return max(agent or 0.0, 0.0) + max(grader or 0.0, 0.0) + margin


def _max_concurrent(health: dict[str, Any]) -> int | None:
    """``concurrency.max_concurrent`` of a health body, when it is a positive count."""
    concurrency = health.get("concurrency")
    value = concurrency.get("max_concurrent") if isinstance(concurrency, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _remote_id(attempt: Attempt) -> str:
    """The rollout's own id for a first attempt; a fresh one for a retry (the first is retained)."""
    rollout_id = attempt.request.id
    return rollout_id if attempt.number == 1 else _fresh_id({"rollout_id": rollout_id})


def _fresh_id(ours: dict[str, Any]) -> str:
    return f"{ours['rollout_id']}~{secrets.token_hex(4)}"


def _body(attempt: Attempt, remote_id: str) -> dict[str, Any]:
    """The ``RolloutInitRequest`` of an attempt."""
    request, context = attempt.request, attempt.context
    return {
        "rollout_id": remote_id,
        "initial_messages": request.prompt,
        "label": request.label,
        "metadata": request.metadata,
        "chat_completions_url": context.chat_completions_url or "",
        "llm_api_key": context.api_key or None,
        "grade": request.grade,
        "agent_timeout_sec": request.agent_timeout_sec,
        "grader_timeout_sec": request.grader_timeout_sec,
        "extra_fields": {
            "osmosis_run": {
                "rollout_id": request.id,
                "attempt": attempt.number,
                "seed": context.seed,
            }
        },
    }


def _admission(response: Response, rollout_id: str, url: str) -> _Admission:
    body = _json_object(response, "POST /rollout", url)
    token, wait, lease = (
        body.get("polling_lease_token"),
        body.get("result_wait_timeout_sec"),
        body.get("polling_lease_timeout_sec"),
    )
    if (
        body.get("rollout_id") != rollout_id
        or not isinstance(token, str)
        or not token
        or not _seconds(wait)
        or not _seconds(lease)
    ):
        raise InfrastructureError(
            f"rollout server {url}: POST /rollout answered 202 without a valid admission "
            f"({_clip(response.text)}); is this a rollout server (protocol 0.4)?"
        )
    return _Admission(rollout_id, token, float(wait or 0), float(lease or 0))


def _seconds(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _json_object(response: Response, what: str, url: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise InfrastructureError(
            f"rollout server {url}: {what} answered HTTP {response.status_code} without a JSON "
            "object; is this a rollout server (protocol 0.4)?"
        )
    return body


def _reply(
    wire: dict[str, Any],
    remote_id: str,
    url: str,
    admitted_at: float,
    grading_at: float | None,
) -> _Reply:
    """The attempt's result from a final result body.

    Raises:
        AttemptLost: the rollout was cancelled on the server, or lost its lease.
        InfrastructureError: the body is not a ``RolloutResultResponse``.
    """
    status, category = wire.get("status"), wire.get("err_category")
    if (
        status == "failure"
        and not wire.get("sample")
        and not category
        and not wire.get("err_message")
    ):  # osmosis-ai's word for a grader that did not apply: an ungraded success, as here
        status = "success"
    if status == "cancelled":
        raise AttemptLost(f"rollout {remote_id} was cancelled on the server")
    if category == RolloutErrorCategory.LEASE_EXPIRED:
        raise AttemptLost(f"rollout {remote_id} lost its polling lease on the server")
    try:
        sample = RolloutSample.model_validate(wire["sample"]) if wire.get("sample") else None
        result = ExecutionResult(
            status=RolloutStatus(str(status)),
            sample=sample,
            err_message=wire.get("err_message"),
            err_category=RolloutErrorCategory(category) if category else None,
            extra_fields={"stage": "server", "server_rollout_id": remote_id},
        )
    except (ValidationError, ValueError, TypeError):
        raise InfrastructureError(
            f"rollout server {url}: the result of {remote_id} is not a rollout result "
            f"({_clip(str(wire))}); is this a rollout server (protocol 0.4)?"
        ) from None
    # The wire does not say whether a grader ran: a success with a reward (or removed) was
    # graded; one without a reward was not (a grader that sets none fails instead).
    graded = (
        result.status == RolloutStatus.SUCCESS
        and sample is not None
        and (sample.reward is not None or sample.remove_sample)
    )
    return _Reply(result, graded, admitted_at, grading_at, time.perf_counter(), remote_id)


def _refused(response: Response, remote_id: str) -> _Reply:
    """A request the server refused (422): this rollout's validation error."""
    now = time.perf_counter()
    result = ExecutionResult(
        status=RolloutStatus.FAILURE,
        err_message=f"the rollout server refused the request: {_detail(response)}",
        err_category=RolloutErrorCategory.VALIDATION_ERROR,
        extra_fields={"stage": "server", "server_rollout_id": remote_id},
    )
    return _Reply(result, False, now, None, now, None)


def _retry_after(response: Response) -> float:
    """A 429's Retry-After in seconds, by the one rule; ``RETRY_AFTER_DEFAULT_S`` without one."""
    asked = retry_after_headers(response.headers)
    return max(RETRY_AFTER_DEFAULT_S if asked is None else asked, RETRY_AFTER_FLOOR_S)


def _lost(exc: TransportError) -> AttemptLost:
    return AttemptLost(f"the rollout server stopped answering ({exc})")


def _detail(response: Response) -> str:
    """The ``detail`` of an error body, else the body's start."""
    try:
        body = response.json()
    except ValueError:
        return _clip(response.text) or "no body"
    detail = body.get("detail") if isinstance(body, dict) else body
    return _clip(detail if isinstance(detail, str) else str(detail))


def _clip(text: str, size: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= size else text[: size - 3] + "..."
