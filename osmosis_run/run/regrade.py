"""A re-grade: only the grader, over the samples another run recorded (``osmosis-run grade``).

``prepare_grade(source, values)`` reads the source run directory (it never writes to it) and
makes a ``Plan`` whose rollouts are the ones the source recorded (``RecordedRun``, the plan's
``source``): the same rollout ids, rows, labels, metadata and seeds, so ``compare`` pairs the
two runs rollout by rollout. The executor behind the seam (``backends/regrade.py``) replays
each one: a rollout whose workflow failed stays that failure, and an invalid row stays invalid;
any other has its recorded sample graded again by the new grader, its old reward cleared.

The new run is a run directory like any other (resume, gates, reports), except that its
``fingerprint.json`` is its provenance: ``graded_from`` (the source run), ``source_fingerprint``
(what the source was made from), ``source_results`` (a hash of the source's results.jsonl: a
source that changed since is not resumed into the same grade), and the grader's path, source
hash and config. Each rollout's artifacts are copied from the source into the new run before its
grader runs, so the grader sees the files the workflow left and writes beside them, in the new
run only.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from osmosis_run._construct import construct
from osmosis_run.errors import ConfigError, RunDirError
from osmosis_run.results.records import ResultLine
from osmosis_run.run.components import Components, add_import_paths, load_config, selection_of
from osmosis_run.run.dataset import Row, sha256_file
from osmosis_run.run.fingerprint import source_hash
from osmosis_run.run.plan import Plan
from osmosis_run.run.rollouts import Job, rollout_seed
from osmosis_run.run.settings import UNLIMITED, EvalSettings, load_config_file, resolve_settings
from osmosis_run.sdk.backend import DEFAULT_MAX_CONCURRENT
from osmosis_run.sdk.context import AgentWorkflowContext
from osmosis_run.sdk.loading import load_class
from osmosis_run.sdk.types import (
    AgentWorkflowConfig,
    ExecutionResult,
    GraderConfig,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
)
from osmosis_run.sdk.workflow import AgentWorkflow, Grader
from osmosis_run.store.layout import (
    ARTIFACTS,
    FINGERPRINT,
    RESULT_JSON,
    RESULTS,
    RUN_CONFIG,
    rollout_dir,
)

__all__ = [
    "INHERITED",
    "NoWorkflow",
    "RecordedRollout",
    "RecordedRun",
    "grade_concurrency",
    "prepare_grade",
]

# What a re-grade takes from the source run's run.toml: what the run is (its inputs and
# selection, kept for the record and for `osmosis-run eval --config run.toml`), how its
# rollouts are judged, and its gates (the pass threshold, --fail-under and the error budget:
# a grade of a run whose config allows 5% errors allows them too). The grade command's options
# override each. The grader, its config and timeout, concurrency, the baseline comparison and
# reports are the grade command's own.
INHERITED = (
    "dataset",
    "workflow",
    "workflow_config",
    "workflow_config_overrides",
    "import_paths",
    "samples",
    "limit",
    "offset",
    "rows",
    "ids",
    "shuffle",
    "seed",
    "shard",
    "pass_threshold",
    "fail_under",
    "max_error_rate",
    "group_by",
    "no_messages",
)


# Every rollout id osmosis-run writes (run.dataset.rollout_id) is one segment of these characters.
_ROLLOUT_ID = re.compile(r"[A-Za-z0-9._@~-]+")


class NoWorkflow(AgentWorkflow[AgentWorkflowConfig]):
    """Stands for the workflow in a re-grade, which never runs it (it raises if it is run)."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> None:  # noqa: ARG002
        """Never called: a re-grade replays the samples its source run recorded."""
        raise RuntimeError("osmosis-run grade never runs the workflow")


@dataclass(frozen=True, slots=True)
class RecordedRollout:
    """What the source run recorded of one rollout, as the re-grade replays it.

    Attributes:
        workflow: the workflow's result: its failure as recorded, or its success with the
            recorded sample (reward cleared, not removed).
        workflow_ms: how long the workflow took in the source run.
        artifacts: the rollout's artifacts directory in the source run.
    """

    workflow: ExecutionResult
    workflow_ms: float | None
    artifacts: Path


class RecordedRun:
    """The rollouts a run directory recorded (the last results line of each id), read lazily.

    ``jobs`` reads each rollout's result.json as its job is made; the executor then ``take``s
    what was read for it, so that memory holds only the rollouts between the two.
    """

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        self._last: dict[str, int] = {}  # rollout id -> offset of its last results line
        self._read: dict[str, RecordedRollout] = {}
        offset = 0
        with (run_dir / RESULTS).open("rb") as f:
            for number, raw in enumerate(f, start=1):
                line = _parse(raw)
                if line is not None:
                    _check_id(run_dir, number, line.rollout_id)
                    self._last[line.rollout_id] = offset
                offset += len(raw)

    @property
    def count(self) -> int:
        """How many rollouts the run recorded."""
        return len(self._last)

    def jobs(self, *, skip: Container[str] = ()) -> Iterator[Job]:
        """A job per recorded rollout, in results order, except those in ``skip``."""
        for line in self._lines():
            if line.rollout_id not in skip:
                yield self._job(line)

    def take(self, rollout_id: str) -> RecordedRollout:
        """What was recorded of a rollout whose job was made (read again if it was not).

        Raises:
            KeyError: the run recorded no such rollout.
        """
        recorded = self._read.pop(rollout_id, None)
        if recorded is not None:
            return recorded
        for line in self._lines():
            if line.rollout_id == rollout_id:
                return self._recorded(line, self._document(rollout_id))
        raise KeyError(rollout_id)

    def _lines(self) -> Iterator[ResultLine]:
        """The last results line of each rollout, in results order."""
        offset = 0
        with (self.dir / RESULTS).open("rb") as f:
            for raw in f:
                at, offset = offset, offset + len(raw)
                line = _parse(raw)
                if line is not None and self._last.get(line.rollout_id) == at:
                    yield line

    def _job(self, line: ResultLine) -> Job:
        invalid = line.status == "invalid"
        doc = None if invalid else self._document(line.rollout_id)
        request = (doc or {}).get("request") or {}
        row = Row(
            index=line.row_index,
            line=line.line,
            id=line.row_id,
            prompt=request.get("prompt") or [],
            label=request.get("label", line.label),
            metadata=request.get("metadata", line.metadata),
            error=(line.error_message or "invalid row") if invalid else None,
            digest=line.row_hash or "",
        )
        if not invalid:
            self._read[line.rollout_id] = self._recorded(line, doc)
        seed = line.seed if line.seed is not None else rollout_seed(0, row.key, line.sample_index)
        return Job(row, line.sample_index, line.rollout_id, seed)

    def _recorded(self, line: ResultLine, doc: dict[str, Any] | None) -> RecordedRollout:
        return RecordedRollout(
            workflow=_workflow_result(line, doc),
            workflow_ms=line.workflow_ms,
            artifacts=rollout_dir(self.dir, line.rollout_id) / ARTIFACTS,
        )

    def _document(self, rollout_id: str) -> dict[str, Any] | None:
        path = rollout_dir(self.dir, rollout_id) / RESULT_JSON
        try:
            doc = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None


def _check_id(run_dir: Path, number: int, rollout_id: str) -> None:
    """A rollout id names a folder of the new run: refuse one osmosis-run never writes.

    Raises:
        RunDirError: the id is not one safe path segment.
    """
    if not _ROLLOUT_ID.fullmatch(rollout_id) or rollout_id in (".", ".."):
        raise RunDirError(
            f"{run_dir / RESULTS}:{number}: rollout id {rollout_id!r} is not one osmosis-run "
            "writes (one safe path segment); this results.jsonl was edited by hand"
        )


def _parse(raw: bytes) -> ResultLine | None:
    if not raw.endswith(b"\n"):
        return None  # a torn last line: not a finished rollout
    try:
        return ResultLine.model_validate_json(raw)
    except ValidationError:
        return None


def _workflow_result(line: ResultLine, doc: dict[str, Any] | None) -> ExecutionResult:
    """The workflow's result as the source recorded it: its failure, or its sample to grade."""
    if doc is None:
        return _failure(
            f"cannot re-grade: the source run has no readable {RESULT_JSON} for this rollout",
            RolloutErrorCategory.VALIDATION_ERROR,
            stage="source",
        )
    workflow = doc.get("workflow") or {}
    recorded = doc.get("sample")
    if workflow.get("status") != str(RolloutStatus.SUCCESS):  # the workflow failed: it stays so
        error = doc.get("error") or {}
        return _failure(
            line.error_message or "the workflow failed",
            _category(line.error_category),
            stage=error.get("stage") or "workflow",
            traceback=error.get("traceback"),
        )
    sample = None
    if isinstance(recorded, dict):
        sample = RolloutSample.model_validate({**recorded, "reward": None, "remove_sample": False})
    return construct(
        ExecutionResult,
        status=RolloutStatus.SUCCESS,
        sample=sample,
        err_message=None,
        err_category=None,
        extra_fields=None,
    )


def _category(value: str | None) -> RolloutErrorCategory:
    try:
        return RolloutErrorCategory(value or "")
    except ValueError:
        return RolloutErrorCategory.AGENT_ERROR


def _failure(
    message: str,
    category: RolloutErrorCategory,
    *,
    stage: str,
    traceback: str | None = None,
) -> ExecutionResult:
    extra: dict[str, Any] = {"stage": stage}
    if traceback is not None:
        extra["traceback"] = traceback
    return ExecutionResult(
        status=RolloutStatus.FAILURE,
        sample=None,
        err_message=message,
        err_category=category,
        extra_fields=extra,
    )


def prepare_grade(source: Path, values: Mapping[str, Any]) -> Plan:
    """Check the source run, load the new grader, and fix what the re-grade is.

    Args:
        source: the run directory whose samples are graded again (only read).
        values: the grade command's options, by their settings names (``grader``, ``out``,
            ``grader_timeout``, ``concurrency``, the gates and reports, ...).

    Raises:
        OsmosisRunError: the source is not a run directory, the grader cannot be loaded, an
            option is invalid, or ``--out`` is the source run (exit code 2).
    """
    _check_source(source)
    settings = _grade_settings(source, values)
    if not settings.run.grader:
        raise ConfigError("no grader: give --grader module:Class")
    add_import_paths(settings)
    grader = load_class(settings.run.grader, Grader, role="--grader")
    s = settings.run
    grader_config = load_config(
        s.grader_config, s.grader_config_overrides, GraderConfig, "grader_config"
    )
    recorded = RecordedRun(source)
    if recorded.count == 0:
        raise ConfigError(f"{source} has no finished rollouts to grade; run its eval first")
    fingerprint = _fingerprint(source, settings, grader)
    run_dir = _run_dir(source, settings, fingerprint)
    components = Components(
        workflow=NoWorkflow, grader=grader, workflow_config=None, grader_config=grader_config
    )
    return Plan(
        settings=settings,
        dataset=str(source / RESULTS),
        selection=selection_of(settings),
        components=components,
        fingerprint=fingerprint,
        run_dir=run_dir,
        planned=recorded.count,
        concurrency=grade_concurrency(settings, components),
        source=recorded,
    )


def grade_concurrency(settings: EvalSettings, components: Components) -> int | None:
    """``--concurrency`` (``UNLIMITED``: no limit), else the grader config's, else the default."""
    if settings.execution.concurrency == UNLIMITED:
        return None
    if settings.execution.concurrency is not None:
        return settings.execution.concurrency
    if components.grader_config is not None:
        return components.grader_config.concurrency.max_concurrent
    return DEFAULT_MAX_CONCURRENT


def _check_source(source: Path) -> None:
    if not source.exists():
        raise RunDirError(f"{source} does not exist; give the directory `osmosis-run eval` printed")
    if not source.is_dir():
        raise RunDirError(f"{source} is a file, not a run directory")
    if not (source / RESULTS).is_file():
        raise RunDirError(
            f"{source} is not an osmosis-run run directory (no {RESULTS}); "
            "give the directory `osmosis-run eval` printed"
        )


def _grade_settings(source: Path, values: Mapping[str, Any]) -> EvalSettings:
    """The source's inputs and judging, the grade's own options over them; never retried."""
    config = source / RUN_CONFIG
    saved = load_config_file(config) if config.is_file() else {}
    inherited = {key: saved[key] for key in INHERITED if key in saved}
    given = {key: value for key, value in values.items() if value is not None}
    # A replayed workflow failure is not transient: nothing in a re-grade is retried.
    return resolve_settings({**inherited, **given, "retries": 0})


def _fingerprint(source: Path, settings: EvalSettings, grader: type) -> dict[str, Any]:
    s = settings.run
    try:
        source_fingerprint = json.loads((source / FINGERPRINT).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # a run directory made by hand, or by an older osmosis-run
        source_fingerprint = None
    return {
        "graded_from": str(source.resolve()),
        "source_fingerprint": source_fingerprint,
        "source_results": sha256_file(source / RESULTS),
        "grader": s.grader,
        "grader_source": source_hash(grader),
        "grader_config": [s.grader_config, s.grader_config_overrides],
    }


def _run_dir(source: Path, settings: EvalSettings, fingerprint: Mapping[str, Any]) -> Path:
    """``--out``, else ``<source>-grade-<8 hex of the fingerprint>`` beside the source."""
    if settings.output.out:
        run_dir = Path(settings.output.out)
    else:
        text = json.dumps(dict(fingerprint), sort_keys=True, default=str)
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        run_dir = source.parent / f"{source.resolve().name}-grade-{digest}"
    target, origin = run_dir.resolve(), source.resolve()
    if target == origin or target.is_relative_to(origin):
        raise ConfigError(
            f"--out {run_dir} is inside the source run {source}, which a grade never changes; "
            "choose another --out"
        )
    return run_dir
