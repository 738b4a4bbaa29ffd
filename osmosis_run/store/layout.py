"""Every name in a run directory, defined once: the store writes them, readers read them.

    run.toml            the resolved configuration; ``--config run.toml`` reproduces the run
    fingerprint.json    what the run was made from; a resume with other inputs is refused
    results.jsonl       one results line per finished rollout, appended as it finishes
    summary.json        the metrics, written at the end and on interrupt
    invocation.json     the invocation writing the run: when it started, what it planned
    rollouts/<id>/      artifacts/, trajectory.json (ATIF v1.7), result.json,
                        model_calls.jsonl (every model call through the gateway)

The writer process (``_writer_child.py``) runs with the standard library only and cannot import
this module: it gets the names it needs as command-line arguments (``writer.child_command``).
No other module of the store spells a name out (``tests/test_store.py`` checks).
"""

from __future__ import annotations

from pathlib import Path

from osmosis_run.sdk.backend import ARTIFACTS

__all__ = [
    "ARTIFACTS",
    "FINGERPRINT",
    "INVOCATION",
    "MODEL_CALLS",
    "RESULTS",
    "RESULT_JSON",
    "ROLLOUTS",
    "RUN_CONFIG",
    "SUMMARY",
    "TRAJECTORY_JSON",
    "rollout_dir",
]

RUN_CONFIG = "run.toml"
FINGERPRINT = "fingerprint.json"
RESULTS = "results.jsonl"
SUMMARY = "summary.json"
INVOCATION = "invocation.json"
ROLLOUTS = "rollouts"
RESULT_JSON = "result.json"
TRAJECTORY_JSON = "trajectory.json"
MODEL_CALLS = "model_calls.jsonl"


def rollout_dir(run_dir: Path, rollout_id: str) -> Path:
    """``<run_dir>/rollouts/<rollout_id>``."""
    return run_dir / ROLLOUTS / rollout_id
