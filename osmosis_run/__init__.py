"""osmosis-run: a rollout runner for Osmosis agent workflows and reward graders.

How this package is laid out: layers, each importing only the ones above it in this list (a
test holds it); data flows one way: cli -> run (settings, plan) -> scheduler -> executor ->
sdk backend, and finished rollouts -> store.

    errors.py        the one exception tree (exported here)
    _construct.py, _json.py, _redact.py
                     fast model building, the JSON encoder, keeping secrets out of output
    retry.py, eventloop.py
                     the one back-off and Retry-After rule; the one event-loop factory
    http/            HTTP/1.1: the listener serve and the gateway share, the one client
    sdk/             what users write against: types, contexts, AgentWorkflow and Grader,
                     ExecutionBackend and LocalBackend, "module:attr" loading
    results/         what results mean, no file access: records (ResultLine, Summary, RunData),
                     the one outcome rule, metrics, comparing two runs, gates
    store/           the run directory: its layout, the store and its writer process, reading
                     a run back
    run/             the engine: settings, components, fingerprint, dataset rows, selection, the
                     scheduler and its execution seam, rollout records, ATIF, validate, Osmosis
                     workspace eval configs
    gateway/         the model gateway: per-rollout URLs, usage, pacing, call records, cache
    backends/        what runs an attempt behind the seam: in-process, osmosis_ai classes
                     unchanged (with osmosis_ai's own objects), a rollout server (--server), a
                     Ray actor pool (Ray is imported for --backend ray only), and a fake for tests
    server/          the rollout server: protocol, leases and retention, the app (extra "server")
    reports/         readers of a run: the text report, JUnit, the step summary, the HTML report
    examples/        the workflows and graders the README and configs/ run
    view/            osmosis-run view: the live web app over run directories (extra "server")
    cli/             the Typer app; the only place that imports typer and rich

The names below are the SDK surface of ``osmosis_ai.rollout`` (code written for it ports by
changing the import line) and osmosis-run's error tree.
"""

import logging

from osmosis_run.errors import (
    AttributeNotFoundError,
    BackendError,
    ConfigError,
    DatasetError,
    FingerprintMismatchError,
    ImportPathError,
    InfrastructureError,
    LoadError,
    ModuleNotFoundLoadError,
    OsmosisRunError,
    RunDirError,
    UserModuleImportError,
    WrongKindError,
)
from osmosis_run.sdk.backend import ExecutionBackend, LocalBackend
from osmosis_run.sdk.context import (
    AgentWorkflowContext,
    GraderContext,
    RolloutContext,
    SampleSource,
    get_rollout_context,
)
from osmosis_run.sdk.types import (
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
from osmosis_run.sdk.workflow import AgentWorkflow, Grader

__version__ = "0.1.0"

__all__ = [
    "AgentWorkflow",
    "AgentWorkflowConfig",
    "AgentWorkflowContext",
    "AgentWorkflowOutput",
    "AttributeNotFoundError",
    "BackendError",
    "BaseConfig",
    "ConcurrencyConfig",
    "ConfigError",
    "DatasetError",
    "ExecutionBackend",
    "ExecutionOutcome",
    "ExecutionRequest",
    "ExecutionResult",
    "FingerprintMismatchError",
    "Grader",
    "GraderConfig",
    "GraderContext",
    "ImportPathError",
    "InfrastructureError",
    "LoadError",
    "LocalBackend",
    "ModuleNotFoundLoadError",
    "OsmosisRunError",
    "RolloutContext",
    "RolloutErrorCategory",
    "RolloutSample",
    "RolloutStatus",
    "RunDirError",
    "SampleSource",
    "UserModuleImportError",
    "WrongKindError",
    "get_rollout_context",
]

# A library leaves logging to its application; this keeps Python from printing our records.
logging.getLogger(__name__).addHandler(logging.NullHandler())
