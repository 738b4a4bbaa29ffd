"""Execution backends: the interface, and ``LocalBackend`` which runs rollouts in-process.

LocalBackend runs the user's workflow and grader in the current process and event loop, with no
sandbox: breakpoints, prints and stack traces just work, and so does any harm the code does.
It does not enforce request deadlines; a harness (the osmosis-run runner) does.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import os
import traceback
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any, cast

from osmosis_run import _redact as redact
from osmosis_run._construct import construct
from osmosis_run.retry import retry_after, retry_after_headers
from osmosis_run.sdk import _osmosis_ai
from osmosis_run.sdk.context import (
    AgentWorkflowContext,
    GraderContext,
    RolloutContext,
    get_rollout_context,
)
from osmosis_run.sdk.loading import load_class, load_instance
from osmosis_run.sdk.types import (
    AgentWorkflowConfig,
    AgentWorkflowOutput,
    ExecutionOutcome,
    ExecutionRequest,
    ExecutionResult,
    GraderConfig,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
    json_copy,
)
from osmosis_run.sdk.workflow import AgentWorkflow, Grader

__all__ = [
    "ARTIFACTS",
    "DEFAULT_MAX_CONCURRENT",
    "ExecutionBackend",
    "LocalBackend",
    "categorize_exception",
    "coerce_output",
    "retry_after_of",
]

logger = redact.logger(__name__)  # its records never carry a run's secrets

DEFAULT_MAX_CONCURRENT = 4
# Each execution's artifacts go to <artifact root>/<rollout id>/ARTIFACTS (the SDK's layout).
ARTIFACTS = "artifacts"
_MADE_LIMIT = 1 << 16


class ExecutionBackend(ABC):
    """Something that executes rollouts; a rollout server serves one of these."""

    @abstractmethod
    async def execute(self, request: ExecutionRequest) -> ExecutionOutcome:
        """Run one rollout (workflow, then grader when grading applies)."""

    def has_capacity(self) -> bool:
        """Return whether a new rollout would be admitted now."""
        return True

    def rollout_status(self, rollout_id: str) -> dict[str, Any] | None:  # noqa: ARG002
        """Return a backend-specific status of one rollout, if the backend tracks it."""
        return None

    def cancel_rollouts(
        self,
        ids: list[str] | None = None,  # noqa: ARG002
        prefix: str | None = None,  # noqa: ARG002
        all: bool = False,  # noqa: A002, ARG002
    ) -> dict[str, str]:
        """Cancel rollouts; an empty answer means the backend does not support it."""
        return {}

    def health(self) -> dict[str, Any]:
        """Return a health report."""
        return {"status": "ok"}

    async def shutdown(self) -> None:  # noqa: B027  (an optional hook, empty by default)
        """Release what the backend holds."""


def categorize_exception(exc: BaseException) -> RolloutErrorCategory:
    """Map an exception raised by user code to the SDK's error category."""
    if isinstance(exc, TimeoutError):
        return RolloutErrorCategory.TIMEOUT
    if isinstance(exc, ValueError | TypeError | AssertionError):
        return RolloutErrorCategory.VALIDATION_ERROR
    return RolloutErrorCategory.AGENT_ERROR


def coerce_output(value: object) -> AgentWorkflowOutput | None:
    """Normalise what ``AgentWorkflow.run`` returned.

    Raises:
        TypeError: the value is none of the accepted kinds.
    """
    if value is None:
        return None
    if isinstance(value, AgentWorkflowOutput):
        return AgentWorkflowOutput.model_validate(value)
    if isinstance(value, list):
        return AgentWorkflowOutput(messages=value)
    if _osmosis_ai.is_osmosis_ai(value, "AgentWorkflowOutput"):  # mixed code: theirs is ours
        return cast("AgentWorkflowOutput", _osmosis_ai.from_osmosis_ai(value))
    raise TypeError(
        "run() must return AgentWorkflowOutput, a message list, or None; "
        f"got {type(value).__name__}"
    )


class LocalBackend(ExecutionBackend):
    """Run an ``AgentWorkflow`` and an optional ``Grader`` in this process and event loop.

    Args:
        workflow: an ``AgentWorkflow`` subclass or a ``"module:attr"`` path to one.
        workflow_config: an ``AgentWorkflowConfig`` instance or a path to one.
        grader: a ``Grader`` subclass or a path to one.
        grader_config: a ``GraderConfig`` instance or a path to one.
        artifact_root: where ``<rollout-id>/artifacts`` directories go; default
            ``$OSMOSIS_ARTIFACT_ROOT``, else ``~/.osmosis``.
    """

    def __init__(
        self,
        *,
        workflow: type[AgentWorkflow[Any]] | str,
        workflow_config: AgentWorkflowConfig | str | None = None,
        grader: type[Grader] | str | None = None,
        grader_config: GraderConfig | str | None = None,
        artifact_root: str | os.PathLike[str] | None = None,
    ) -> None:
        self.workflow_cls: type[AgentWorkflow[Any]] = load_class(
            workflow, AgentWorkflow, role="workflow"
        )
        self.workflow_config: AgentWorkflowConfig | None = (
            load_instance(workflow_config, AgentWorkflowConfig, role="workflow_config")
            if workflow_config
            else None
        )
        self.grader_cls: type[Grader] | None = (
            load_class(grader, Grader, role="grader") if grader else None
        )
        self.grader_config: GraderConfig | None = (
            load_instance(grader_config, GraderConfig, role="grader_config")
            if grader_config
            else None
        )
        self.max_concurrent: int | None = (
            self.workflow_config.concurrency.max_concurrent
            if self.workflow_config is not None
            else DEFAULT_MAX_CONCURRENT
        )
        root = artifact_root or os.environ.get("OSMOSIS_ARTIFACT_ROOT") or Path.home() / ".osmosis"
        self.artifact_root = Path(root)
        self._limiter = asyncio.Semaphore(self.max_concurrent) if self.max_concurrent else None
        self._queued = 0
        self._running = 0
        self._warned_artifacts = False
        # Artifacts directories made ahead of time (prepare_artifacts_dir, from another thread)
        # and those the workflow got, which its grader reuses: a dict hit instead of a syscall.
        self._ready: dict[str, Path | None] = {}
        self._made: dict[str, Path | None] = {}

    def health(self) -> dict[str, Any]:
        """Return ``{"status": "ok", "concurrency": {...}}`` with live queue counts."""
        concurrency = {
            "max_concurrent": self.max_concurrent,
            "queued": self._queued,
            "running": self._running,
        }
        return {"status": "ok", "concurrency": concurrency}

    async def execute(self, request: ExecutionRequest) -> ExecutionOutcome:
        """Run the workflow, then the grader when grading applies, holding one slot for both."""
        async with self._slot():
            workflow = await self.run_workflow(request)
            grader = (
                await self.run_grader(request, workflow)
                if self.grading_applies(request, workflow)
                else None
            )
        return ExecutionOutcome(workflow=workflow, grader=grader)

    def grading_applies(self, request: ExecutionRequest, workflow: ExecutionResult) -> bool:
        """Whether the grader runs: configured, workflow succeeded, label or metadata, asked."""
        return (
            self.grader_cls is not None
            and workflow.status == RolloutStatus.SUCCESS
            and (request.label is not None or request.metadata is not None)
            and request.grade
        )

    async def run_workflow(self, request: ExecutionRequest) -> ExecutionResult:
        """Run the workflow of one rollout; an exception it raises becomes a failed result."""
        config = copy.deepcopy(self.workflow_config) if self.workflow_config is not None else None
        # Own copies: a workflow that edits its prompt in place must not change the request,
        # which a harness may retry or share between the samples of one row.
        ctx = AgentWorkflowContext(
            prompt=json_copy(request.prompt),
            config=config,
            metadata=json_copy(request.metadata) if request.metadata is not None else None,
            artifacts_dir=self._workflow_artifacts_dir(request.id),
        )
        rollout_ctx = _rollout_context(request.id)
        try:
            with rollout_ctx:
                if _osmosis_ai.loaded():  # mixed code: osmosis_ai's integrations in our workflow
                    sample = await self._run_beside_osmosis_ai(ctx, config, rollout_ctx, request)
                else:
                    output = coerce_output(await self.workflow_cls(config).run(ctx))
                    sample = (  # a returned transcript needs no await (one coroutine fewer)
                        _sample_of(output, request)
                        if output is not None
                        else await _sample_from(output, rollout_ctx, request)
                    )
        except BaseException as exc:  # sys.exit(), a stray CancelledError: one rollout's failure
            _reraise_if_cancelled(exc)
            return _failure(exc, "workflow", request.id)
        return _success(sample)

    async def _run_beside_osmosis_ai(
        self,
        ctx: AgentWorkflowContext[Any],
        config: AgentWorkflowConfig | None,
        rollout_ctx: RolloutContext,
        request: ExecutionRequest,
    ) -> RolloutSample | None:
        """Run the workflow inside osmosis_ai's ambient context too, and take its sample source.

        osmosis_ai's integrations (``OsmosisMemorySession``, ``OsmosisLitellmModel``, ...) read
        the endpoint from, and register their sample source on, osmosis_ai's context; an
        osmosis_ai ``RolloutSample`` returned or given by a source becomes ours.
        """
        with _osmosis_ai.ambient(
            rollout_id=rollout_ctx.rollout_id,
            chat_completions_url=rollout_ctx.chat_completions_url,
            api_key=rollout_ctx.api_key,
        ) as theirs:
            value = await self.workflow_cls(config).run(ctx)
            if _osmosis_ai.is_osmosis_ai(value, "RolloutSample"):
                sample = _osmosis_ai.sample_from_osmosis_ai(value)
                if sample is not None and sample.label is None:
                    sample.label = request.label
                return sample
            output = coerce_output(value)
            if output is None and rollout_ctx.sample_source is None and theirs is not None:
                rollout_ctx.sample_source = theirs.sample_source
            return await _sample_from(output, rollout_ctx, request)

    async def run_grader(
        self, request: ExecutionRequest, workflow: ExecutionResult
    ) -> ExecutionResult:
        """Grade the workflow's sample; a missing reward or an exception is a failed result."""
        if self.grader_cls is None:
            raise ValueError("this LocalBackend has no grader")
        ctx = GraderContext(
            label=request.label,
            sample=workflow.sample,
            metadata=json_copy(request.metadata) if request.metadata is not None else None,
            artifacts_dir=self._grader_artifacts_dir(request.id),
        )
        try:
            with _rollout_context(request.id):
                await self.grader_cls(self.grader_config).grade(ctx)
            _check_graded(ctx.sample)
        except BaseException as exc:  # sys.exit(), a stray CancelledError: one rollout's failure
            _reraise_if_cancelled(exc)
            return _failure(exc, "grader", request.id, sample=ctx.sample)
        return _success(ctx.sample)

    def adopt_artifacts_dirs(self, rollout_ids: Iterable[str]) -> None:
        """Use artifacts directories a harness made ahead of time for these rollouts.

        Each ``<artifact_root>/<id>/artifacts`` must exist already (osmosis-run's writer
        process makes them in batches); the rollouts then start without a system call.
        """
        root, ready = self.artifact_root, self._ready
        for rollout_id in rollout_ids:
            ready[rollout_id] = _child(_child(root, rollout_id), ARTIFACTS)

    def _workflow_artifacts_dir(self, rollout_id: str) -> Path | None:
        if rollout_id in self._ready:
            path = self._ready.pop(rollout_id)
        else:
            path = self.artifacts_dir(rollout_id, likely_new=True)
        if self.grader_cls is not None:
            if len(self._made) >= _MADE_LIMIT:  # rollouts never graded: forget the oldest half
                for stale in list(itertools.islice(self._made, _MADE_LIMIT // 2)):
                    del self._made[stale]
            self._made[rollout_id] = path
        return path

    def _grader_artifacts_dir(self, rollout_id: str) -> Path | None:
        if rollout_id in self._made:
            return self._made.pop(rollout_id)
        return self.artifacts_dir(rollout_id)

    def artifacts_dir(self, rollout_id: str, *, likely_new: bool = False) -> Path | None:
        """Make ``<root>/<rollout_id>/artifacts`` and return it, or None if it cannot be made."""
        path = self.artifact_root / rollout_id / ARTIFACTS
        try:
            _make_artifacts_dir(path, likely_new=likely_new)
        except OSError as exc:
            if not self._warned_artifacts:
                self._warned_artifacts = True
                logger.warning("cannot create artifacts directory %s: %s", path, exc)
            return None
        return path

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """Hold one concurrency slot, keeping the queued/running counts right on cancellation."""
        self._queued += 1
        try:
            if self._limiter is not None:
                await self._limiter.acquire()
        finally:
            self._queued -= 1
        self._running += 1
        try:
            yield
        finally:
            self._running -= 1
            if self._limiter is not None:
                self._limiter.release()


def _join(path: Path, name: str) -> Path:
    return path / name


# ``path / name`` parses ``name`` for separators; a rollout id is a single path segment (the
# request validates it), so the child can be made without parsing: pathlib's own helper for
# names it knows are segments (iterdir, glob), three times faster. A Python without it joins.
_child: Callable[[Path, str], Path] = getattr(Path, "_make_child_relpath", _join)


def _make_artifacts_dir(path: Path, *, likely_new: bool) -> None:
    """Create ``<root>/<id>/artifacts`` with as few system calls as the common case needs.

    A new rollout costs two ``mkdir`` calls; an existing directory (the grader's call, a resumed
    rollout) costs one ``stat``.
    """
    if not likely_new and path.is_dir():
        return
    try:
        os.mkdir(path.parent)
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not path.is_dir():
            raise


def _rollout_context(rollout_id: str) -> RolloutContext:
    """A fresh ambient context for one rollout, inheriting the harness's model endpoint."""
    outer = get_rollout_context()
    if outer is None:
        return RolloutContext(rollout_id=rollout_id)
    return outer.derive(rollout_id, seed=outer.seed)


async def _sample_from(
    output: AgentWorkflowOutput | None, rollout_ctx: RolloutContext, request: ExecutionRequest
) -> RolloutSample | None:
    if output is not None:
        return _sample_of(output, request)
    sample = await rollout_ctx.get_sample()
    if sample is not None and not isinstance(sample, RolloutSample):
        sample = _osmosis_ai.from_osmosis_ai(sample)  # an osmosis_ai SampleSource's sample
    if sample is not None and sample.label is None:
        sample.label = request.label
    return sample


def _sample_of(output: AgentWorkflowOutput, request: ExecutionRequest) -> RolloutSample | None:
    """The sample of what the workflow returned (no sample source to await)."""
    if output.messages is None:
        return None
    # The output was validated just now: build the sample without validating it a second time.
    # Every field given: no default factory runs.
    return construct(
        RolloutSample,
        messages=output.messages,
        trajectory_messages=json_copy(output.messages),
        label=request.label,
        reward=None,
        remove_sample=False,
        metrics=dict(output.metrics),
        extra_fields={},
    )


def _success(sample: RolloutSample | None) -> ExecutionResult:
    # Every field is known good here: skip validation, which runs twice per rollout.
    return construct(
        ExecutionResult,
        status=RolloutStatus.SUCCESS,
        sample=sample,
        err_message=None,
        err_category=None,
        extra_fields=None,
    )


def _check_graded(sample: RolloutSample | None) -> None:
    if sample is None:
        raise ValueError(
            "no sample to grade: the workflow returned no messages and registered no sample source"
        )
    if sample.reward is None and not sample.remove_sample:
        raise ValueError(
            "Sample has no reward after grading: call ctx.set_reward(value), "
            "or set ctx.sample.remove_sample = True to drop the sample"
        )


def _reraise_if_cancelled(exc: BaseException) -> None:
    """Let the harness's own cancellation through; any other exception is user code's.

    A ``CancelledError`` is the harness's when this task is being cancelled (a deadline, a
    stop). One that user code let escape while nobody cancelled this task (it awaited a helper
    task that was cancelled, say) is that rollout's failure like any other exception, and so
    are ``KeyboardInterrupt`` (osmosis-run's own Ctrl-C never raises it), ``GeneratorExit`` and
    a ``BaseException`` subclass of the user's.
    """
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise exc


def _failure(
    exc: BaseException, stage: str, rollout_id: str, sample: RolloutSample | None = None
) -> ExecutionResult:
    logger.error("%s of rollout %s raised %s", stage, rollout_id, type(exc).__name__, exc_info=exc)
    diagnostics: dict[str, Any] = {
        "stage": stage,
        "error_type": type(exc).__name__,
        "traceback": "".join(traceback.format_exception(exc)),
    }
    retry_after = retry_after_of(exc)
    if retry_after is not None:
        diagnostics["retry_after_s"] = retry_after
    return ExecutionResult(
        status=RolloutStatus.FAILURE,
        sample=sample,
        err_message=_message(exc, stage),
        err_category=categorize_exception(exc),
        extra_fields=diagnostics,
    )


def _message(exc: BaseException, stage: str) -> str:
    if isinstance(exc, SystemExit):
        return f"the {stage} called sys.exit({exc.code!r})"
    if isinstance(exc, asyncio.CancelledError):
        return f"the {stage} let a CancelledError escape (it awaited a task that was cancelled?)"
    return str(exc) or type(exc).__name__


def retry_after_of(exc: BaseException) -> float | None:
    """The wait a rate-limited request asked for, when the exception (or its cause) shows one.

    Looks for a ``retry_after`` attribute (seconds), then a ``Retry-After`` header on the
    exception's ``response`` (httpx, requests and the openai client put the HTTP response
    there) or ``headers``: ``retry-after-ms``, else a number of seconds or an HTTP date, read
    by the one rule (``osmosis_run.retry``, at most ``MAX_RETRY_AFTER_S``).
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = _retry_after_here(current)
        if found is not None:
            return found
        current = current.__cause__ or current.__context__
    return None


def _retry_after_here(exc: BaseException) -> float | None:
    value = getattr(exc, "retry_after", None)
    if value is not None:
        return retry_after(value)
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        headers = getattr(exc, "headers", None)
    try:
        return retry_after_headers(headers) if headers is not None else None
    except Exception:  # an object that merely looks like headers
        return None
