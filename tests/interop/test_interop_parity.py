"""osmosis_ai subclasses run by ``osmosis-run eval`` unchanged, and by osmosis-ai's LocalBackend.

Row for row the two agree on status, error category and reward. The one difference is SPEC's:
a rollout that grading does not apply to (no label and no metadata) is an ungraded success in
osmosis-run, where osmosis-ai 0.3.8 reports a bare failure (no message, no category).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import results, write_jsonl
from osmosis_ai.rollout import ExecutionOutcome, ExecutionRequest, LocalBackend

from interop import osmosis_ai_flows as flows

FLOWS = "interop.osmosis_ai_flows"


def parity_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"id": m, "prompt": m, "label": "ok"} for m in flows.MODES]
    rows += [
        {"id": "wrong", "prompt": "output", "label": "no"},
        {"id": "remove", "prompt": "output", "metadata": {"grade": "remove"}},
        {"id": "forget", "prompt": "output", "label": "ok", "metadata": {"grade": "forget"}},
        {"id": "raise", "prompt": "output", "label": "ok", "metadata": {"grade": "raise"}},
        {"id": "bad", "prompt": "output", "label": "ok", "metadata": {"grade": "bad"}},
        {"id": "meta-only", "prompt": "source", "metadata": {"topic": "x"}},
        {"id": "bare", "prompt": "output"},  # no label, no metadata: SPEC's ungraded success
        {"id": "bare-failing", "prompt": "runtime"},
    ]
    return rows


def their_view(outcome: ExecutionOutcome) -> tuple[str, str | None, float | None]:
    """osmosis-ai's outcome in osmosis-run's terms: (status, error category, reward)."""
    workflow, grader = outcome.workflow, outcome.grader
    failed = workflow if workflow.status != "success" else grader
    if failed is not None and failed.status != "success":
        category = None if failed.err_category is None else str(failed.err_category)
        if category is None and failed.err_message is None:
            return ("bare failure", None, None)
        return ("timeout" if category == "timeout" else "failure", category, None)
    if grader is None:
        return ("ungraded", None, None)
    assert grader.sample is not None
    if grader.sample.remove_sample:
        return ("removed", None, None)
    return ("success", None, grader.sample.reward)


def run_theirs(run_dir: Path, rollout_ids: list[str], workflow: str, grader: str) -> dict[str, Any]:
    """Each rollout's request (from its result.json) executed by osmosis-ai's LocalBackend."""
    backend = LocalBackend(
        workflow=f"{FLOWS}:{workflow}",
        workflow_config=f"{FLOWS}:flow_config",
        grader=f"{FLOWS}:{grader}",
        grader_config=f"{FLOWS}:judge_config",
    )

    async def execute_all() -> dict[str, Any]:
        views = {}
        for rollout_id in rollout_ids:
            document = json.loads((run_dir / "rollouts" / rollout_id / "result.json").read_text())
            request = ExecutionRequest(**document["request"])
            views[rollout_id] = their_view(await backend.execute(request))
        return views

    return asyncio.run(execute_all())


@pytest.fixture
def artifact_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    root = tmp_path / "osmosis-ai-artifacts"
    monkeypatch.setenv("_OSMOSIS_ROLLOUT_ARTIFACT_ROOT", str(root))
    return root


def test_osmosis_ai_classes_agree_with_osmosis_ais_local_backend_row_for_row(
    cli: Any, tmp_path: Path, artifact_root: Path
) -> None:
    write_jsonl(tmp_path / "rows.jsonl", parity_rows())
    result = cli(
        "eval", "rows.jsonl",
        "--workflow", f"{FLOWS}:Flow", "--workflow-config", f"{FLOWS}:flow_config",
        "--grader", f"{FLOWS}:Judge", "--grader-config", f"{FLOWS}:judge_config",
        "--out", "run", "--max-error-rate", "100%", "--agent-timeout", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    ours = {line.rollout_id: line for line in results(tmp_path / "run")}
    theirs = run_theirs(tmp_path / "run", list(ours), "Flow", "Judge")
    expected_difference = {"bare.s0": ("ungraded", ("bare failure", None, None))}
    for rollout_id, line in ours.items():
        mine = (line.status, line.error_category, line.reward)
        if rollout_id in expected_difference:
            status, their = expected_difference[rollout_id]
            assert (mine, theirs[rollout_id]) == ((status, None, None), their), rollout_id
        else:
            assert mine == theirs[rollout_id], rollout_id
    by_id = {line.row_id: (line.status, line.error_category, line.reward) for line in ours.values()}
    assert by_id == {
        "output": ("success", None, 1.0),
        "messages": ("success", None, 1.0),
        "source": ("success", None, 1.0),
        "none": ("failure", "validation_error", None),
        "no_messages": ("failure", "validation_error", None),
        "value_error": ("failure", "validation_error", None),
        "type_error": ("failure", "validation_error", None),
        "assertion": ("failure", "validation_error", None),
        "timeout": ("timeout", "timeout", None),
        "runtime": ("failure", "agent_error", None),
        "bad_return": ("failure", "validation_error", None),
        "context": ("success", None, 1.0),
        "wrong": ("success", None, 0.0),
        "remove": ("removed", None, None),
        "forget": ("failure", "validation_error", None),
        "raise": ("failure", "agent_error", None),
        "bad": ("failure", "validation_error", None),
        "meta-only": ("success", None, 0.0),
        "bare": ("ungraded", None, None),
        "bare-failing": ("failure", "agent_error", None),
        "sleep": ("timeout", "timeout", None),
    }


def test_validate_loads_osmosis_ai_classes_and_configs(cli: Any, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "rows.jsonl", parity_rows())
    result = cli(
        "validate", "rows.jsonl",
        "--workflow", f"{FLOWS}:Flow", "--workflow-config", f"{FLOWS}:flow_config",
        "--grader", f"{FLOWS}:Judge", "--grader-config", f"{FLOWS}:judge_config",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        f"workflow         {FLOWS}:Flow (loaded)",
        f"workflow config  {FLOWS}:flow_config (loaded)",
        f"grader           {FLOWS}:Judge (loaded)",
        f"grader config    {FLOWS}:judge_config (loaded)",
        "rows.jsonl: 21 rows, 0 invalid",
    ]


def test_a_config_file_overrides_an_osmosis_ai_config_instance(cli: Any, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "rows.jsonl", [{"prompt": "output", "label": "fine"}])
    (tmp_path / "eval.toml").write_text(
        f'dataset = "rows.jsonl"\nworkflow = "{FLOWS}:Flow"\ngrader = "{FLOWS}:Judge"\n'
        f'[workflow_config]\nfrom = "{FLOWS}:flow_config"\nanswer = "fine"\n'
    )
    result = cli("eval", "--config", "eval.toml", "--out", "run")
    assert result.exit_code == 0, result.output
    assert [(x.status, x.reward) for x in results(tmp_path / "run")] == [("success", 1.0)]
