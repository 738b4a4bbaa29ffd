"""The per-rollout path and start-up, made cheaper: each shortcut gives what the long way gives.

- ``osmosis-run CMD`` builds only CMD's click objects (``cli.app_for``): same help, same errors;
- artifacts directories a writer process made are adopted without parsing their paths, and a
  rollout whose batch is made starts without waiting;
- a selection that filters nothing keeps every row without testing each;
- result.json's request and stage briefs are encoded without copies, and say the same.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import typer.main
from conftest import TESTS_DIR, open_scheduler, qa_rows, subprocess_env, write_jsonl
from typer.testing import CliRunner

from osmosis_run import AgentWorkflow, AgentWorkflowConfig, AgentWorkflowContext
from osmosis_run.cli import app, app_for
from osmosis_run.run.dataset import Row, iter_rows
from osmosis_run.run.rollouts import Job, result_document, result_line
from osmosis_run.run.selection import Selection, select
from osmosis_run.run.settings import EvalSettings
from osmosis_run.sdk.backend import LocalBackend
from osmosis_run.sdk.types import (
    ExecutionOutcome,
    ExecutionRequest,
    ExecutionResult,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
    json_copy,
)

COMMANDS = sorted(info.name for info in app.registered_commands if info.name)


# -- start-up: only the invoked command ----------------------------------------------------


@pytest.mark.parametrize("name", COMMANDS)
def test_a_named_command_gets_an_app_of_that_command_alone(name: str) -> None:
    lean = app_for([name, "--anything"])
    assert lean is not app
    group = typer.main.get_command(lean)
    assert sorted(group.commands) == [name]  # type: ignore[attr-defined]


@pytest.mark.parametrize("args", [[], ["--help"], ["-h"], ["--version"], ["evl"], ["-x", "eval"]])
def test_anything_else_gets_the_whole_app(args: list[str]) -> None:
    assert app_for(args) is app


@pytest.mark.parametrize("name", COMMANDS)
def test_a_commands_help_is_the_same_from_its_own_app(name: str) -> None:
    runner = CliRunner()
    whole = runner.invoke(app, [name, "--help"])
    lean = runner.invoke(app_for([name]), [name, "--help"])
    assert whole.exit_code == lean.exit_code == 0
    assert lean.output == whole.output


@pytest.mark.parametrize(
    "args",
    [
        ["eval", "--no-such-option"],
        ["eval", "d.jsonl", "--concurrency"],
        ["report"],
        ["compare", "a"],
    ],
)
def test_a_usage_error_is_the_same_from_the_commands_own_app(args: list[str]) -> None:
    runner = CliRunner()
    whole = runner.invoke(app, args)
    lean = runner.invoke(app_for(args), args)
    assert whole.exit_code == lean.exit_code == 2
    assert lean.output == whole.output
    assert lean.output.startswith("error: ")


def test_the_console_script_runs_through_the_lean_app(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("osmosis-run")
    env = subprocess_env(COLUMNS="100")
    helped = subprocess.run(
        [str(exe), "eval", "--help"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert helped.returncode == 0
    assert helped.stdout.startswith("Usage: osmosis-run eval [OPTIONS]")
    typo = subprocess.run([str(exe), "evl"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert typo.returncode == 2
    assert typo.stderr == (
        "error: No such command 'evl'. Did you mean 'eval'? (`osmosis-run --help` lists the "
        "options)\n"
    )
    assert list(tmp_path.iterdir()) == []


# -- artifacts directories made ahead ------------------------------------------------------


class SeesItsDirectory(AgentWorkflow[AgentWorkflowConfig]):
    """Echo, and say where its artifacts directory is and whether it was there at the start."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        where = ctx.artifacts_dir
        assert where is not None
        content = f"{where}|{where.is_dir()}|{'/'.join(where.parts[-2:])}"
        return [*ctx.prompt, {"role": "assistant", "content": content}]


def test_adopted_directories_are_the_paths_a_join_makes(tmp_path: Path) -> None:
    backend = LocalBackend(workflow=SeesItsDirectory, artifact_root=tmp_path / "rollouts")
    ids = ["q1.s0", "row@7.s3", "a-b_c.s12"]
    backend.adopt_artifacts_dirs(ids)
    for rid in ids:
        adopted = backend._workflow_artifacts_dir(rid)
        joined = tmp_path / "rollouts" / rid / "artifacts"
        assert adopted == joined
        assert str(adopted) == str(joined)
        assert adopted is not None
        assert adopted.parts == joined.parts
        assert adopted.parent.name == rid


def test_rollouts_start_in_the_directories_the_writer_process_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(300))
    s = EvalSettings.model_validate(
        {
            "dataset": str(data),
            "workflow": "test_hot_path:SeesItsDirectory",
            "out": str(tmp_path / "run"),
            "concurrency": 16,
        }
    )
    runner = open_scheduler(s, writer_process_from=1)
    outcome = asyncio.run(runner.run())
    assert runner.store.background
    assert outcome.summary.counts == {"ungraded": 300}
    lines = (tmp_path / "run/results.jsonl").read_text().splitlines()
    assert len(lines) == 300
    rollouts = (tmp_path / "run/rollouts").absolute()
    for i in range(300):
        rid = f"q{i}.s0"
        result = (rollouts / rid / "result.json").read_text()
        expected = f"{rollouts / rid / 'artifacts'}|True|{rid}/artifacts"
        assert f'"content":"{expected}"' in result
        assert sorted(os.listdir(rollouts / rid)) == ["artifacts", "result.json", "trajectory.json"]


# -- selection ------------------------------------------------------------------------------


def test_a_selection_that_filters_nothing_keeps_every_row_in_order(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [*qa_rows(5), "not json"])
    rows = list(select(iter_rows(str(data)), Selection()))
    assert [row.index for row in rows] == [0, 1, 2, 3, 4, 5]
    assert rows[-1].error is not None
    limited = list(select(iter_rows(str(data)), Selection(limit=2)))
    assert [row.index for row in limited] == [0, 1]


@pytest.mark.parametrize(
    ("selection", "kept"),
    [
        (Selection(offset=4), [4, 5]),
        (Selection(rows=((1, 2),)), [1, 2]),
        (Selection(ids=frozenset({"q3"})), [3]),
    ],
)
def test_a_filter_still_filters(tmp_path: Path, selection: Selection, kept: list[int]) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(6))
    assert [row.index for row in select(iter_rows(str(data)), selection)] == kept


# -- result.json ----------------------------------------------------------------------------


def _result_json(outcome: ExecutionOutcome) -> dict[str, Any]:
    row = Row(3, 4, "q3", [{"role": "user", "content": "p3"}], label="p3", digest="ab")
    job = Job(row, 0, "q3.s0", 7)
    timings: dict[str, float | None] = {"workflow_ms": 1.25, "grader_ms": None}
    line = result_line(job, outcome, timings, 1, pass_threshold=1.0)
    request = ExecutionRequest(id="q3.s0", prompt=row.prompt or [], label="p3")
    before = dict(request.__dict__)
    doc: dict[str, Any] = json.loads(result_document(job, line, outcome, request, timings))
    assert request.__dict__ == before
    assert doc["request"] == before
    return doc


def _result(status: RolloutStatus, **fields: Any) -> ExecutionResult:
    sample = RolloutSample(messages=[{"role": "assistant", "content": "p3"}], reward=1.0)
    return ExecutionResult(status=status, sample=sample, **fields)


def test_result_json_briefs_say_what_each_stage_gave() -> None:
    ok = _result(RolloutStatus.SUCCESS)
    doc = _result_json(ExecutionOutcome(workflow=ok, grader=ok))
    brief = {"status": "success", "err_category": None, "err_message": None}
    assert doc["workflow"] == doc["grader"] == brief
    failed = _result(
        RolloutStatus.FAILURE, err_message="boom", err_category=RolloutErrorCategory.AGENT_ERROR
    )
    doc = _result_json(ExecutionOutcome(workflow=ok, grader=failed))
    assert doc["workflow"] == brief
    assert doc["grader"] == {
        "status": "failure",
        "err_category": "agent_error",
        "err_message": "boom",
    }
    odd = _result(RolloutStatus.SUCCESS, err_message="a note")  # success with a message: kept
    doc = _result_json(ExecutionOutcome(workflow=odd, grader=None))
    assert doc["workflow"] == {"status": "success", "err_category": None, "err_message": "a note"}
    assert doc["grader"] is None


# -- json_copy: a transcript's messages copied inline, as the recursion copies them ---------


def _copied_apart(original: Any, copy: Any) -> None:
    """Equal, no dict or list shared, every other value shared, dict subclasses made dicts."""
    assert copy == original
    if isinstance(original, dict | list):
        assert copy is not original
        assert type(copy) is (dict if isinstance(original, dict) else list)
        children = list(original.values()) if isinstance(original, dict) else original
        copies = list(copy.values()) if isinstance(copy, dict) else copy
        for before, after in zip(children, copies, strict=True):
            _copied_apart(before, after)
    else:
        assert copy is original  # str, numbers, tuples (even holding lists), objects: shared


@pytest.mark.parametrize(
    "value",
    [
        [{"role": "user", "content": "p0"}, {"role": "assistant", "content": "p0"}],
        [{"role": "user", "content": [{"type": "text", "text": "hi"}], "extra": {"k": [1, 2]}}],
        [OrderedDict(role="user"), [1, [2]], (3, [4]), "text", None, {"nested": {"a": {}}}],
        {"messages": [{"role": "user"}], "meta": OrderedDict(a=[1])},
        [],
        ({"a": 1},),
        "text",
    ],
    ids=["chat", "parts", "mixed", "dict", "empty", "tuple", "scalar"],
)
def test_json_copy_copies_containers_and_shares_the_rest(value: Any) -> None:
    copy = json_copy(value)
    _copied_apart(value, copy)
    if isinstance(copy, list) and copy and isinstance(copy[0], dict):
        copy[0]["role"] = "changed"  # the copy is the workflow's own
        assert value[0].get("role") != "changed"
