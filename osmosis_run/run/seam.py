"""The execution seam: how the engine has one attempt of one rollout run, by any backend.

The engine owns everything a run is about: which rollouts and how many in flight
(scheduler.py, or the rollout server's service), deadlines from the moment a rollout starts
(deadlines.py), and each rollout's attempts, retries and records (lifecycle.py, the one
lifecycle both drivers use). What runs an attempt is an ``Executor``: it gets an ``Attempt`` and
gives back an ``AttemptResult`` (the outcome, its timings, and where the artifacts are). The
engine imports no concrete executor; the command line picks one and hands it over.

    class Executor(Protocol):
        limit: int | None          # the backend's own default for rollouts in flight
        local_artifacts: bool      # attempts write their artifacts in place, in the run directory
        async def open(self) -> None        # before any rollout: load, connect, start workers
        async def run(self, attempt, deadlines) -> AttemptResult
        def adopt_artifacts_dirs(self, rollout_ids) -> None   # made ahead by the writer process
        async def close(self) -> None

``deadlines`` is a ``run.deadlines.Deadlines`` the driver made (typed here by the ``Deadlines``
protocol; the executor never gets the scheduler or the server): ``await deadlines.within(stage,
seconds, work, rollout_id=..., timed_out=...)`` runs ``work`` within ``seconds`` from now and
returns its result, or ``timed_out()`` when it overran (cancelled; abandoned if it ignores the
cancellation, and kept in ``deadlines.abandoned``; a timeout too if it returned late because
blocking code held the loop). An in-process executor wraps each stage with it; a remote one
forwards the timeouts and wraps the whole call.

Raising ``AttemptLost`` says the backend lost the attempt before it finished (an actor died, a
connection dropped): the engine runs it again without counting it against ``--retries``, at most
``LOST_LIMIT`` times, then records a failure. Any other exception is unexpected, and what it
does is the driver's explicit policy (``Lifecycle(on_executor_error=...)``): eval's scheduler
stops the run and raises it with its traceback (``"stop"``); the rollout server fails that
rollout with ``internal_error`` and logs the traceback (``"fail"``), and goes on serving.

The backends behind the seam, each written against this interface alone (their module
docstrings say the rest):

- **LocalExecutor** (backends/local.py): holds a ``LocalBackend``; ``run`` enters the attempt's
  ``RolloutContext``, then ``within("workflow", agent_timeout, backend.run_workflow(request))``
  and, when grading applies, ``within("grader", ...)`` (a stage without a deadline is awaited
  as it is); artifacts are written in place, in the rollout's folder of the run directory
  (``adopt_artifacts_dirs`` hands over those the writer process made ahead), so ``artifacts``
  is ``None``.
- **RemoteExecutor** (backends/remote.py, ``eval --server URL``): results arrive later. ``open``
  asks ``GET /health`` once (the key is accepted; the server's ``max_concurrent`` is ``limit``);
  ``run`` POSTs the request (a 429 waits for its Retry-After), then long-polls
  ``/rollout/{id}/result`` with its lease, all inside ``within("rollout", agent + grader +
  margin, ...)``, and cancels the rollout on the server when that wait is cancelled (Ctrl-C, the
  deadline). A poll that cannot reach the server, or a rollout it no longer knows (it
  restarted), raises ``AttemptLost``; a server unreachable at admission is an
  ``InfrastructureError``, which stops the run (exit 4). Artifacts stay on the server:
  ``Artifacts(unavailable="...")``, said in result.json.
- **ProcessExecutor** (backends/processes.py, ``--backend processes``): worker processes on
  this machine, each a fresh interpreter holding the classes. ``open`` starts and readies
  them; ``run`` sends the attempt to the least busy worker over a socket pair and returns its
  reply; artifacts are written in place. A worker that dies raises ``AttemptLost`` for its
  attempts (they run again alone, to find the culprit, and are recorded as "the worker process
  running this rollout died (SIGSEGV) 4 times in a row" via ``AttemptLost.repeated``); a stage
  whose code does not stop at its deadline has its worker's process group killed, and is a
  ``timeout``. ``close`` stops the workers; nothing outlives the run.
- **RayExecutor** (backends/ray.py, ``--backend ray``): batches of requests, actors dying
  mid-call. ``open`` joins the cluster, ships the code and waits for each actor of the pool to
  be ready; ``run`` puts the attempt into the batch of the least busy actor, sent as one actor
  call when full (``--ray-batch``) or after a few loop turns, and returns when that rollout's
  own reply arrives (replies come per rollout, not per batch), with the files it wrote as
  ``Artifacts(files=..., omitted=...)`` (in place with ``--ray-shared-fs``: ``local_artifacts``).
  An actor lost mid-call raises ``AttemptLost`` for each attempt it held without a reply, and
  is replaced. ``close`` has each actor remove its scratch directory, then ends the actors.
- **OsmosisAiExecutor** (backends/osmosis_ai.py, osmosis_ai classes unchanged): another SDK's
  classes. LocalExecutor over ``OsmosisAiBackend``, which gives them osmosis_ai's own context
  objects and enters osmosis_ai's ambient ``RolloutContext``; the outcome is converted to ours.
- **RegradeExecutor** (backends/regrade.py, ``osmosis-run grade``): runs only the grader, on the
  samples a finished run recorded.
- **FakeExecutor** (backends/fake.py): outcomes from a handler function, for the engine's tests
  (as httpx ships ``MockTransport``).
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from osmosis_run.results.records import ModelUsage
from osmosis_run.sdk.context import RolloutContext
from osmosis_run.sdk.types import ExecutionOutcome, ExecutionRequest

__all__ = [
    "LOST_LIMIT",
    "Artifacts",
    "Attempt",
    "AttemptLost",
    "AttemptResult",
    "Deadlines",
    "Executor",
    "ModelGateway",
    "Spending",
]

T = TypeVar("T")

# An attempt the backend loses this many times in a row (an actor dying on it each time) is
# recorded as that rollout's failure instead of being run again.
LOST_LIMIT = 3


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of one rollout.

    Attributes:
        request: what to run (its ``id`` is the rollout id; timeouts are in it).
        number: 1 for the first attempt, 2 for the first retry, ...
        context: the rollout's ambient context: its id, model endpoint, key and seed. An
            in-process executor enters it around user code; a remote one sends its endpoint.
    """

    request: ExecutionRequest
    number: int
    context: RolloutContext


@dataclass(frozen=True, slots=True)
class Artifacts:
    """Artifacts that did not land in the run directory by themselves.

    Attributes:
        files: shipped back with the reply: path relative to the artifacts directory -> bytes.
        omitted: paths left out (over a size cap), said in result.json.
        unavailable: why no artifacts can come back at all (a remote server keeps them).
    """

    files: Mapping[str, bytes] = field(default_factory=dict)
    omitted: tuple[str, ...] = ()
    unavailable: str | None = None


@dataclass(slots=True)
class AttemptResult:
    """What an attempt gave: its outcome, how long each stage ran, and its artifacts.

    ``artifacts`` is None when the executor wrote them in place (in the run directory).
    """

    outcome: ExecutionOutcome
    workflow_ms: float | None
    grader_ms: float | None
    artifacts: Artifacts | None = None


class AttemptLost(Exception):
    """The backend lost the attempt before it finished; the engine runs it again.

    Args:
        reason: what happened, in a few words.
        repeated: how the failure is worded when the rollout is lost ``LOST_LIMIT + 1`` times
            in a row, followed by "N times in a row" (``"the worker process running this
            rollout died (SIGSEGV)"``); None: "the backend lost this rollout N times in a row
            (reason)".
    """

    def __init__(self, reason: str, *, repeated: str | None = None) -> None:
        super().__init__(reason)
        self.repeated = repeated


class Deadlines(Protocol):
    """The engine's deadline machinery, handed to executors (``run.deadlines.Deadlines``)."""

    async def within(
        self,
        stage: str,
        seconds: float | None,
        work: Coroutine[Any, Any, T],
        *,
        rollout_id: str,
        timed_out: Any,
    ) -> T:
        """Run ``work`` within ``seconds`` from now; past it, ``timed_out()``.

        ``timed_out`` is a callable returning the value that stands for the overrun (a
        timeout result). Work that ignores its cancellation is abandoned after a grace.
        """
        ...


class Executor(Protocol):
    """Runs attempts: in-process, on a rollout server, on a Ray actor pool, ..."""

    @property
    def limit(self) -> int | None:
        """The backend's own default for rollouts in flight (None: no limit)."""
        ...

    @property
    def local_artifacts(self) -> bool:
        """Whether attempts write their artifacts in place, under the run directory."""
        ...

    async def open(self) -> None:
        """Get ready before any rollout runs (connect, start workers, check versions)."""
        ...

    async def run(self, attempt: Attempt, deadlines: Deadlines) -> AttemptResult:
        """Run one attempt.

        Raises:
            AttemptLost: the backend lost it (an actor died, a connection dropped).
        """
        ...

    def adopt_artifacts_dirs(self, rollout_ids: Iterable[str]) -> None:
        """Directories made ahead for these rollouts (by the writer process) exist now."""
        ...

    async def close(self) -> None:
        """Release what the executor holds."""
        ...


class Spending(Protocol):
    """What the model calls of this invocation used so far (the gateway's ``LiveStats``);
    calls the model cache answered are free, and not counted."""

    @property
    def billed_prompt_tokens(self) -> int:
        """Prompt tokens of every call the upstream answered."""
        ...

    @property
    def billed_completion_tokens(self) -> int:
        """Completion tokens of every call the upstream answered."""
        ...

    @property
    def billed_tokens(self) -> int:
        """Total tokens of every call the upstream answered."""
        ...


class ModelGateway(Protocol):
    """What the engine asks of the model gateway (``osmosis_run.gateway``), when a run has one.

    The engine gives each rollout ``url_for(rollout_id)`` and ``api_key`` in its
    ``RolloutContext``, opens the rollout's account as each attempt starts (so that the
    gateway's retries stay within the attempt's deadline), and takes its usage into the
    results line when the rollout is recorded.
    """

    @property
    def api_key(self) -> str:
        """The run's own key, which rollouts send to the gateway."""
        ...

    def url_for(self, rollout_id: str) -> str:
        """The rollout's ``chat_completions_url``."""
        ...

    def open_rollout(self, rollout_id: str, *, sample_index: int, timeout_s: float | None) -> None:
        """An attempt of the rollout starts now; it may run ``timeout_s`` (None: no deadline)."""
        ...

    def take_usage(self, rollout_id: str) -> ModelUsage:
        """What the rollout's model calls used (its account is closed)."""
        ...

    def stats(self) -> dict[str, Any]:
        """What the gateway saw in this invocation (for summary.json)."""
        ...

    @property
    def live(self) -> Spending:
        """The run's model calls so far, as they happen (what the run budgets count)."""
        ...
