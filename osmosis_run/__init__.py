"""osmosis-run: a rollout runner for Osmosis agent workflows and reward graders.

How this package is laid out (data flows one way: cli -> settings -> runner -> backend -> store):

    types.py         SDK data models: configs, samples, requests, results, status enums
    context.py       what workflows and graders receive; the ambient RolloutContext
    workflow.py      the AgentWorkflow and Grader base classes users subclass
    backend.py       ExecutionBackend and LocalBackend (in-process execution)
    loading.py       "module:attr" -> object, one typed error per failure mode
    errors.py        the one exception tree
    settings.py      every eval option in one model; CLI > environment > config file > defaults
    components.py    loading a run's classes, configs and row selection (eval and validate)
    dataset.py       JSONL rows -> Row objects; bad rows become data with file:line
    selection.py     which rows a run takes (ranges, ids, shards, seeded shuffle)
    runner.py        the eval engine: bounded window, deadlines, retries, interrupts
    rollouts.py      one rollout's identity and the records it leaves
    store.py         the run directory: results.jsonl, rollouts/<id>/..., summary.json, run.toml
    writer.py        a writer process makes rollout directories and files on another core
                     (_writer_child.py, standard library only, is that process)
    records.py       ResultLine and Summary, the public shapes of results.jsonl and summary.json
    metrics.py       summary statistics and pass@k; gates.py: quality gates, error budget
    atif.py          samples -> ATIF v1.7 trajectories (atif_models.py validates them)
    rundata.py       a run directory read back; report.py, compare.py, junit.py,
                     step_summary.py, html_report.py and validate.py build on it
    cli/             the Typer app; the only place that imports typer and rich
    examples/        the workflows and graders the README and configs/ run

The names below are the SDK surface of ``osmosis_ai.rollout``: code written for it ports by
changing the import line.
"""

import logging

from osmosis_run.backend import ExecutionBackend, LocalBackend
from osmosis_run.context import (
    AgentWorkflowContext,
    GraderContext,
    RolloutContext,
    SampleSource,
    get_rollout_context,
)
from osmosis_run.types import (
    AgentWorkflowConfig,
    AgentWorkflowOutput,
    BaseConfig,
    ConcurrencyConfig,
    ExecutionOutcome,
    ExecutionRequest,
    ExecutionResult,
    GraderConfig,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
)
from osmosis_run.workflow import AgentWorkflow, Grader

__version__ = "0.1.0"

__all__ = [
    "AgentWorkflow",
    "AgentWorkflowConfig",
    "AgentWorkflowContext",
    "AgentWorkflowOutput",
    "BaseConfig",
    "ConcurrencyConfig",
    "ExecutionBackend",
    "ExecutionOutcome",
    "ExecutionRequest",
    "ExecutionResult",
    "Grader",
    "GraderConfig",
    "GraderContext",
    "LocalBackend",
    "RolloutContext",
    "RolloutErrorCategory",
    "RolloutSample",
    "RolloutStatus",
    "SampleSource",
    "get_rollout_context",
]

# A library leaves logging to its application; this keeps Python from printing our records.
logging.getLogger(__name__).addHandler(logging.NullHandler())
