"""osmosis_ai classes on the Ray backend: the actors give them osmosis_ai's own objects too.

The same rows as the parity test, run in-process and on a local Ray cluster (started by the
run, inside a private network namespace with only loopback up, HOME a temporary folder, as
the Ray suite runs): row for row the same status, error category and reward.
"""

from __future__ import annotations

import os
import shutil
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


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_osmosis_ai_classes_on_ray_agree_with_the_in_process_run(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("_OSMOSIS_ROLLOUT_ARTIFACT_ROOT", str(tmp_path / "osmosis-ai-artifacts"))
    write_jsonl(tmp_path / "rows.jsonl", parity_rows())
    local = cli("eval", "rows.jsonl", *ARGS, "--out", "local")
    assert local.exit_code == 0, local.output
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OSMOSIS_", "RAY_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(TESTS_DIR), *sys.path]),
        HOME=str(home),
        RAY_USAGE_STATS_ENABLED="0",
        _OSMOSIS_ROLLOUT_ARTIFACT_ROOT=str(tmp_path / "osmosis-ai-artifacts"),
    )
    command = [sys.executable, "-m", "osmosis_run", "eval", "rows.jsonl", *ARGS, "--out", "ray"]
    command += ["--backend", "ray", "--ray-actors", "1"]
    done = subprocess.run(
        ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    def view(run: str) -> dict[str, tuple[str, str | None, float | None]]:
        return {
            line.rollout_id: (line.status, line.error_category, line.reward)
            for line in results(tmp_path / run)
        }

    assert view("ray") == view("local")
    assert len(view("ray")) == len(parity_rows())
