"""Mixed code: osmosis_run workflows returning or registering osmosis_ai objects; and plain
osmosis_run code never importing osmosis_ai, even where it is installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import TESTS_DIR, results, subprocess_env, write_jsonl

MODES = ["their_output", "their_sample", "their_source_on_ours", "their_source_on_theirs"]


def test_osmosis_ai_outputs_samples_and_sources_work_in_an_osmosis_run_workflow(
    cli: Any, tmp_path: Path
) -> None:
    write_jsonl(tmp_path / "rows.jsonl", [{"id": m, "prompt": m, "label": "ok"} for m in MODES])
    result = cli(
        "eval", "rows.jsonl", "--workflow", "interop.mixed_flows:Mixed",
        "--grader", "interop.mixed_flows:Exact", "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = {line.row_id: line for line in results(tmp_path / "run")}
    assert {k: (v.status, v.reward) for k, v in lines.items()} == dict.fromkeys(
        MODES, ("success", 1.0)
    )
    assert lines["their_output"].metrics == {"turns": 2.0}
    assert lines["their_source_on_theirs"].metrics == {"from": "theirs"}
    trajectory = json.loads(
        (tmp_path / "run" / "rollouts" / "their_sample.s0" / "trajectory.json").read_text()
    )
    assert trajectory["steps"][-1]["message"] == "ok"


def test_plain_osmosis_run_code_never_imports_osmosis_ai(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "rows.jsonl", [{"prompt": "hi", "label": "ok"}])
    env = subprocess_env(PYTHONPATH=f"{TESTS_DIR}:{TESTS_DIR.parent}")
    done = subprocess.run(
        [sys.executable, "-m", "osmosis_run", "eval", "rows.jsonl",
         "--workflow", "interop.plain_flows:Plain", "--out", "run"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (line,) = results(tmp_path / "run")
    assert line.status == "ungraded"
    assert line.metrics == {"osmosis_ai_loaded": 0.0}


def test_an_osmosis_run_workflow_with_an_osmosis_ai_grader(cli: Any, tmp_path: Path) -> None:
    """Each class gets its own SDK's objects (the grader asserts it got osmosis_ai's context)."""
    write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "prompt": "their_output", "label": "ok"}])
    result = cli(
        "eval", "rows.jsonl", "--workflow", "interop.mixed_flows:Mixed",
        "--grader", "interop.osmosis_ai_flows:Judge", "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert [(x.status, x.reward) for x in results(tmp_path / "run")] == [("success", 1.0)]
