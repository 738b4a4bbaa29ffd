"""osmosis_ai classes on worker processes (``--backend processes``): the workers give them
osmosis_ai's own objects too.

The same rows as the parity test, run in-process and on two worker processes: row for row the
same status, error category and reward; and every rollout ran in a worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS_DIR, results, write_jsonl

from interop.test_interop_parity import FLOWS, parity_rows

ARGS = (
    "--workflow", f"{FLOWS}:Flow", "--workflow-config", f"{FLOWS}:flow_config",
    "--grader", f"{FLOWS}:Judge", "--grader-config", f"{FLOWS}:judge_config",
    "--max-error-rate", "100%", "--agent-timeout", "5",
)  # fmt: skip


@pytest.mark.skipif(sys.platform != "linux", reason="worker processes: Linux")
def test_osmosis_ai_classes_on_worker_processes_agree_with_the_in_process_run(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("_OSMOSIS_ROLLOUT_ARTIFACT_ROOT", str(tmp_path / "osmosis-ai-artifacts"))
    write_jsonl(tmp_path / "rows.jsonl", parity_rows())
    local = cli("eval", "rows.jsonl", *ARGS, "--out", "local")
    assert local.exit_code == 0, local.output
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSMOSIS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), *sys.path])
    command = [sys.executable, "-m", "osmosis_run", "eval", "rows.jsonl", *ARGS, "--out", "procs"]
    done = subprocess.run(
        [*command, "--backend", "processes", "--workers", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    def view(run: str) -> dict[str, tuple[str, str | None, float | None]]:
        return {
            line.rollout_id: (line.status, line.error_category, line.reward)
            for line in results(tmp_path / run)
        }

    assert view("procs") == view("local")
    assert len(view("procs")) == len(parity_rows())
