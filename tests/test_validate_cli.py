"""`osmosis-run validate` (and the library's ``validate``): every problem with its file:line,
a count line, exit 0 or 2, and nothing run or written."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import write_jsonl
from typer.testing import Result

from osmosis_run import AgentWorkflow, AgentWorkflowConfig, AgentWorkflowContext
from osmosis_run.errors import AttributeNotFoundError
from osmosis_run.run.dataset import parse_row
from osmosis_run.run.settings import EvalSettings
from osmosis_run.run.validate import ValidationReport, validate

Cli = Callable[..., Result]
SIDE_EFFECT = "VALIDATE_SIDE_EFFECT"
FLOWS = [
    "--workflow",
    "test_validate_cli:SideEffect",
    "--grader",
    "eval_flows:ExactMatch",
]
# What validate says it loaded, given FLOWS (on stdout, before the problems and the count).
LOADED = (
    "workflow  test_validate_cli:SideEffect (loaded)\ngrader    eval_flows:ExactMatch (loaded)\n"
)


class SideEffect(AgentWorkflow[AgentWorkflowConfig]):
    """Echo, and leave a file behind: its absence proves that nothing ran."""

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        await asyncio.to_thread(Path(os.environ[SIDE_EFFECT]).write_text, "ran")
        return [*ctx.prompt, {"role": "assistant", "content": "x"}]


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "side-effect.txt"
    monkeypatch.setenv(SIDE_EFFECT, str(path))
    return path


def nothing_written(tmp_path: Path, marker: Path) -> bool:
    """No run directory, no rollout ran."""
    return not (tmp_path / "runs").exists() and not marker.exists()


BAD_ROWS = [
    {"id": "a", "prompt": "p", "ground_truth": "p"},
    "{not json",
    "[1, 2]",
    {"id": "c", "ground_truth": "x"},
    {"id": "d", "prompt": 5},
    {"id": 1.5, "prompt": "x"},
    "",
    {"id": "a", "prompt": "again"},
    {"prompt": "ok", "metadata": [1]},
    {"prompt": "fine", "ground_truth": {"a": 1}},
    {"id": "e", "user_prompt": ["x"]},
    {"prompt": "clean"},
]


def test_every_bad_row_is_reported_with_its_line_and_nothing_runs(
    cli: Cli, tmp_path: Path, marker: Path
) -> None:
    write_jsonl(tmp_path / "data.jsonl", BAD_ROWS)
    result = cli("validate", "data.jsonl", *FLOWS)
    assert result.exit_code == 2
    assert result.stderr == ""
    assert result.stdout == LOADED + (
        "data.jsonl:2: invalid JSON: Expecting property name enclosed in double quotes "
        "(column 2)\n"
        "data.jsonl:3: a row must be a JSON object (got array)\n"
        'data.jsonl:4: no prompt: give "messages", "prompt", or "user_prompt"\n'
        'data.jsonl:5: "prompt" must be a string or a list of chat messages (got number)\n'
        'data.jsonl:6: "id" must be a string or an integer (got number)\n'
        'data.jsonl:8: duplicate id "a" (first on line 1)\n'
        'data.jsonl:9: "metadata" must be an object (got array)\n'
        'data.jsonl:10: "ground_truth" must be a string or a number (got object)\n'
        'data.jsonl:11: "user_prompt" must be a string (got array)\n'
        "data.jsonl: 11 rows, 9 invalid\n"
    )
    assert nothing_written(tmp_path, marker)


def test_a_clean_dataset_passes(cli: Cli, tmp_path: Path, marker: Path) -> None:
    write_jsonl(tmp_path / "data.jsonl", [{"id": i, "prompt": "p", "label": 1} for i in range(3)])
    result = cli("validate", "data.jsonl", *FLOWS)
    assert result.exit_code == 0
    assert (result.stdout, result.stderr) == (LOADED + "data.jsonl: 3 rows, 0 invalid\n", "")
    assert nothing_written(tmp_path, marker)
    # The control: eval, given the same arguments, does run the workflow.
    assert cli("eval", "data.jsonl", *FLOWS).exit_code == 0
    assert not nothing_written(tmp_path, marker)


def test_one_row(cli: Cli, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "data.jsonl", [{"prompt": "p"}])
    result = cli("validate", "data.jsonl", *FLOWS)
    assert (result.exit_code, result.stdout) == (0, LOADED + "data.jsonl: 1 row, 0 invalid\n")


def test_stdin_rows_are_named_stdin(cli: Cli, marker: Path, tmp_path: Path) -> None:
    result = cli("validate", "-", *FLOWS, input='{"prompt": "p"}\n\n[]\n')
    assert result.exit_code == 2
    assert result.stdout == LOADED + (
        "<stdin>:3: a row must be a JSON object (got array)\n<stdin>: 2 rows, 1 invalid\n"
    )
    assert nothing_written(tmp_path, marker)


def test_the_printed_list_is_capped(cli: Cli, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "data.jsonl", ["[]"] * 60 + [{"prompt": "p"}])
    result = cli("validate", "data.jsonl", *FLOWS)
    assert result.exit_code == 2
    lines = result.stdout.splitlines()[2:]
    assert lines[:50] == [
        f"data.jsonl:{n}: a row must be a JSON object (got array)" for n in range(1, 51)
    ]
    assert lines[50:] == ["... and 10 more", "data.jsonl: 61 rows, 60 invalid"]


def test_an_empty_dataset_is_a_problem(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_text("\n\n")
    result = cli("validate", "data.jsonl", *FLOWS)
    assert result.exit_code == 2
    assert result.stdout == LOADED + (
        "data.jsonl: no rows; a dataset holds one JSON object per line\n"
        "data.jsonl: 0 rows, 0 invalid\n"
    )


def test_selection_sets_the_rollout_count_but_every_row_is_read(cli: Cli, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "data.jsonl", [{"id": f"r{i}", "prompt": "p"} for i in range(5)] + ["x"])
    result = cli("validate", "data.jsonl", *FLOWS, "--limit", "2", "-n", "3")
    assert result.exit_code == 2
    assert result.stdout == LOADED + (
        "data.jsonl:6: invalid JSON: Expecting value (column 1)\n"
        "data.jsonl: 6 rows, 1 invalid; selected 2 rows x 3 samples = 6 rollouts\n"
    )


def test_ids_that_match_no_row_are_problems(cli: Cli, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "data.jsonl", [{"id": f"r{i}", "prompt": "p"} for i in range(3)])
    result = cli("validate", "data.jsonl", *FLOWS, "--ids", "r1,zz,r2,aa")
    assert result.exit_code == 2
    assert result.stdout == LOADED + (
        'data.jsonl: --ids: no row has the id "aa"\n'
        'data.jsonl: --ids: no row has the id "zz"\n'
        "data.jsonl: 3 rows, 0 invalid; selected 2 rows x 1 sample = 2 rollouts\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--workflow", "no_such_module:W"],
            'cannot import "no_such_module:W": no module named "no_such_module"; check the '
            "spelling, install the package, or run from the folder that holds it",
        ),
        (
            ["--workflow", "eval_flows:Ecko"],
            'cannot import "eval_flows:Ecko": "eval_flows" has no attribute "Ecko"; '
            'did you mean "Echo"?',
        ),
        (
            ["--workflow", "eval_flows"],
            'invalid import path "eval_flows": expected "module:attr", '
            'for example "my_rollout:MyWorkflow"',
        ),
        (
            ["--workflow", "eval_flows:Echo", "--grader", "eval_flows:Echo"],
            '--grader "eval_flows:Echo" is the class Echo, expected a subclass of Grader',
        ),
        (
            ["--workflow", "eval_flows:Echo", "--workflow-config", "eval_flows:Echo"],
            '--workflow-config "eval_flows:Echo" is the class Echo, expected an instance of '
            "AgentWorkflowConfig; instantiate it in your module",
        ),
        (["--grader", "eval_flows:ExactMatch"], "no workflow: give --workflow module:Class"),
        (
            ["--workflow", "eval_flows:Echo", "--shard", "2/2"],
            '--shard "2/2": need 0 <= I < N, for example 0/4',
        ),
    ],
)
def test_loading_errors_are_one_line(
    cli: Cli, tmp_path: Path, marker: Path, args: list[str], message: str
) -> None:
    write_jsonl(tmp_path / "data.jsonl", ["[]"])
    result = cli("validate", "data.jsonl", *args)
    assert result.exit_code == 2
    assert result.stderr == f"error: {message}\n"
    assert nothing_written(tmp_path, marker)


def test_a_missing_dataset_is_one_line(cli: Cli) -> None:
    result = cli("validate", "missing.jsonl", *FLOWS)
    assert result.exit_code == 2
    assert result.stderr == "error: dataset missing.jsonl does not exist; check the path\n"


def test_no_dataset_is_one_line(cli: Cli) -> None:
    result = cli("validate", *FLOWS)
    assert result.exit_code == 2
    assert result.stderr == "error: no dataset: give DATASET (a JSONL file, or - for stdin)\n"


def test_a_config_file_is_read_as_eval_reads_it(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    write_jsonl(folder / "data.jsonl", [{"prompt": "p"}, "[]"])
    (folder / "eval.toml").write_text(
        'dataset = "data.jsonl"\n'
        'workflow = "eval_flows:Echo"\n'
        "[workflow_config]\n"
        'from = "eval_flows:two_at_once"\n'
        'description = "overridden"\n'
    )
    result = cli("validate", "--config", "conf/eval.toml")
    assert result.exit_code == 2
    assert result.stdout == (
        "config file      conf/eval.toml (read)\n"
        "workflow         eval_flows:Echo (loaded)\n"
        "workflow config  eval_flows:two_at_once, description from [workflow_config] (loaded)\n"
        "grader           none: rollouts are not graded\n"
        "conf/data.jsonl:2: a row must be a JSON object (got array)\n"
        "conf/data.jsonl: 2 rows, 1 invalid\n"
    )


def test_config_file_errors_are_one_line(cli: Cli, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "data.jsonl", [{"prompt": "p"}])
    (tmp_path / "eval.toml").write_text(
        'dataset = "data.jsonl"\nworkflow = "eval_flows:Echo"\nworkflows = 3\n'
    )
    result = cli("validate", "--config", "eval.toml")
    assert result.exit_code == 2
    assert result.stderr == (
        'error: eval.toml: unknown key "workflows"; see `osmosis-run eval --help` for the options\n'
    )


def test_config_overrides_are_checked_against_the_config_model(cli: Cli, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "data.jsonl", [{"prompt": "p"}])
    (tmp_path / "eval.toml").write_text(
        'dataset = "data.jsonl"\nworkflow = "eval_flows:Echo"\n'
        '[workflow_config]\nfrom = "eval_flows:two_at_once"\ntemprature = 0.5\n'
    )
    result = cli("validate", "--config", "eval.toml")
    assert result.exit_code == 2
    assert result.stderr == (
        'error: [workflow_config] has no field "temprature" (fields of AgentWorkflowConfig: '
        "concurrency, description, name)\n"
    )


def test_the_library_report(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", ["[]", {"prompt": "p"}, "{", {"prompt": 1}])
    settings = EvalSettings(
        dataset=str(data), workflow="osmosis_run.examples.calculator:CalculatorAgent", samples=2
    )
    report = validate(settings, max_problems=2)
    assert report == ValidationReport(
        dataset=str(data),
        rows=4,
        invalid=3,
        problems=[
            f"{data}:1: a row must be a JSON object (got array)",
            f"{data}:3: invalid JSON: Expecting property name enclosed in double quotes (column 2)",
        ],
        problem_count=3,
        selected=4,
        samples=2,
        workflow="osmosis_run.examples.calculator:CalculatorAgent",
        grader=None,
    )
    assert (report.ok, report.rollouts) == (False, 8)


def test_the_library_raises_loading_errors(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", [{"prompt": "p"}])
    settings = EvalSettings(dataset=str(data), workflow="osmosis_run.examples.calculator:Nope")
    with pytest.raises(AttributeNotFoundError) as caught:
        validate(settings)
    assert str(caught.value) == (
        'cannot import "osmosis_run.examples.calculator:Nope": '
        '"osmosis_run.examples.calculator" has no attribute "Nope"'
    )


def test_a_byte_order_mark_is_not_a_problem(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_text('{"prompt": "p"}\n', encoding="utf-8-sig")
    result = cli("validate", "data.jsonl", *FLOWS)
    assert (result.exit_code, result.stdout) == (0, LOADED + "data.jsonl: 1 row, 0 invalid\n")


def test_an_empty_prompt_is_a_problem(cli: Cli, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "data.jsonl", [{"prompt": ""}, {"prompt": None}])
    result = cli("validate", "data.jsonl", *FLOWS)
    assert result.exit_code == 2
    assert result.stdout == LOADED + (
        'data.jsonl:1: "prompt" must not be empty\n'
        'data.jsonl:2: "prompt" must be a string or a list of chat messages (got null)\n'
        "data.jsonl: 2 rows, 2 invalid\n"
    )


def test_a_null_ground_truth_leaves_the_label() -> None:
    row = parse_row(
        '{"prompt": "p", "ground_truth": null, "label": 7}', index=0, line=1, name="d.jsonl"
    )
    assert (row.error, row.label) == (None, "7")
