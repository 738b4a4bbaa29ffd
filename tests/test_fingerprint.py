"""The fingerprint of a run: what it is made from, and its JSON kept as it was."""

from __future__ import annotations

from pathlib import Path

from osmosis_run.run.components import load_components, selection_of
from osmosis_run.run.dataset import sha256_file
from osmosis_run.run.fingerprint import build_fingerprint, source_hash
from osmosis_run.run.settings import EvalSettings


def test_the_fingerprint_keeps_its_json(tmp_path: Path) -> None:
    """Run directories made before the settings were grouped must still resume."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "p"}\n', encoding="utf-8")
    settings = EvalSettings.model_validate(
        {
            "dataset": str(data),
            "workflow": "eval_flows:Echo",
            "grader": "eval_flows:ExactMatch",
            "workflow_config": "eval_flows:two_at_once",
            "samples": 2,
            "rows": "0-3",
            "seed": 5,
            "concurrency": 9,
            "html": "r.html",
        }
    )
    components = load_components(settings)
    fingerprint = build_fingerprint(
        settings, selection_of(settings), components.workflow, components.grader
    )
    assert fingerprint == {
        "dataset": sha256_file(str(data)),
        "workflow": "eval_flows:Echo",
        "workflow_source": source_hash(components.workflow),
        "grader": "eval_flows:ExactMatch",
        "grader_source": source_hash(components.grader),
        "workflow_config": ["eval_flows:two_at_once", {}],
        "grader_config": [None, {}],
        "samples": 2,
        "selection": {
            "offset": 0,
            "limit": None,
            "rows": [[0, 3]],
            "ids": None,
            "shard": None,
            "shuffle": False,
            "seed": 5,
        },
    }
    assert list(fingerprint) == [
        "dataset", "workflow", "workflow_source", "grader", "grader_source",
        "workflow_config", "grader_config", "samples", "selection",
    ]  # fmt: skip


def test_a_remote_run_is_fingerprinted_by_its_server(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "p"}\n', encoding="utf-8")
    settings = EvalSettings(dataset=str(data), server="http://127.0.0.1:9/", workflow="x:Y")
    fingerprint = build_fingerprint(settings, selection_of(settings), None, None)
    assert list(fingerprint) == ["dataset", "server", "samples", "selection"]
    assert fingerprint["server"] == "http://127.0.0.1:9"
