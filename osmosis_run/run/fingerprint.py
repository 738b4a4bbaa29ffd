"""What a run is made from, so that a resume never mixes two versions in one set of metrics.

The fingerprint holds the dataset's content hash (``stdin`` or ``stream`` for a stream, which is
read once and never hashed), the workflow and grader paths and a hash of the source of the
modules that define them, the configs, the samples and the selection (and ``--model`` when the
gateway rewrites the model). The default run directory
is named from the dataset and a hash of the fingerprint, so the same command finds the same run
again, and a changed input gets a directory of its own.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any

from osmosis_run.run.dataset import dataset_stem, is_stream, sha256_file
from osmosis_run.run.selection import Selection
from osmosis_run.run.settings import EvalSettings

__all__ = ["build_fingerprint", "default_run_dir", "source_hash"]


def source_hash(obj: type | None) -> str | None:
    """SHA-256 of the source file of the module that defines ``obj`` (None when unknown)."""
    if obj is None:
        return None
    module = sys.modules.get(obj.__module__)
    try:
        path = inspect.getsourcefile(module) if module is not None else None
    except TypeError:
        path = None
    if path is None or not Path(path).is_file():
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def build_fingerprint(
    settings: EvalSettings, selection: Selection, workflow: type | None, grader: type | None
) -> dict[str, Any]:
    """The inputs that decide a run's results, as plain JSON values.

    A run on a rollout server (``--server``) holds the server's URL in place of the workflow,
    grader and configs, which the server loads itself (never the server's key).
    """
    s = settings
    fingerprint: dict[str, Any]
    if s.execution.remote:  # the server's code is its own: its URL stands for it
        fingerprint = {
            "dataset": _dataset_entry(s.run.dataset or "-"),
            "server": s.execution.server,
            "samples": s.run.samples,
            "selection": json.loads(selection.model_dump_json()),
        }
        if s.gateway_model() is not None:
            fingerprint["model"] = s.gateway_model()
        return fingerprint
    fingerprint = {
        "dataset": _dataset_entry(s.run.dataset or "-"),
        "workflow": s.run.workflow,
        "workflow_source": source_hash(workflow),
        "grader": s.run.grader,
        "grader_source": source_hash(grader),
        "workflow_config": [s.run.workflow_config, s.run.workflow_config_overrides],
        "grader_config": [s.run.grader_config, s.run.grader_config_overrides],
        "samples": s.run.samples,
        "selection": json.loads(selection.model_dump_json()),
    }
    if s.gateway_model() is not None:  # another model's answers are another run
        fingerprint["model"] = s.gateway_model()
    return fingerprint


def _dataset_entry(dataset: str) -> str:
    """The dataset's content hash; a stream, read once, is never read here to hash it."""
    if dataset == "-":
        return "stdin"
    return "stream" if is_stream(dataset) else sha256_file(dataset)


def default_run_dir(settings: EvalSettings, fingerprint: dict[str, Any]) -> Path:
    """``runs/<dataset-stem>-<8 hex of the fingerprint>``."""
    text = json.dumps(fingerprint, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    dataset = settings.run.dataset
    stem = "stdin" if dataset in (None, "-") else dataset_stem(dataset or "")
    return Path(settings.output.runs_dir) / f"{stem}-{digest}"
