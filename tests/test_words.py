"""Words and numbers in what a run prints: counts said right, cut lists said cut."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import write_jsonl
from typer.testing import Result

from osmosis_run.results.words import plural

Cli = Callable[..., Result]
ANSWER = ["-w", "grade_flows:Answer", "-g", "grade_flows:Strict", "--out", "run"]


def stderr_lines(result: Result) -> list[str]:
    return [text.rstrip() for text in result.stderr.splitlines()]


@pytest.mark.parametrize(
    ("count", "noun", "said"),
    [(0, "rollout", "0 rollouts"), (1, "rollout", "1 rollout"), (2, "row", "2 rows"),
     (1, "paired rollout", "1 paired rollout")],
)  # fmt: skip
def test_plural(count: int, noun: str, said: str) -> None:
    assert plural(count, noun) == said


def test_one_rollout_is_one_rollout(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "prompt": "hi", "ground_truth": "hi!"}])

    result = cli("eval", str(data), *ANSWER)

    assert result.exit_code == 0
    lines = stderr_lines(result)
    assert lines[0] == "osmosis-run: 1 rollout -> run"
    assert lines[-1] == "ok: error budget: held (0 of 1 rollout failed, 0.00%; 0 allowed)"


def test_the_failure_list_says_how_many_it_left_out(cli: Cli, tmp_path: Path) -> None:
    rows = [
        {"id": f"f{i}", "prompt": "x", "label": "x", "metadata": {"fail": True}} for i in range(7)
    ]
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "ok", "prompt": "y", "label": "y!"}, *rows])

    result = cli("eval", str(data), *ANSWER, "-c", "1")

    assert result.exit_code == 3
    lines = stderr_lines(result)
    assert "reward (all)     mean 0.125  std 0.331  (n=8, failed rollouts count as 0)" in lines
    start = lines.index("  failure f0.s0: validation_error: the tool is down")
    assert lines[start : start + 7] == [
        *(f"  failure f{i}.s0: validation_error: the tool is down" for i in range(5)),
        "  ... and 2 more (osmosis-run report run lists them by category)",
        "FAILED: error budget: exceeded (7 of 8 rollouts failed, 87.50%; 0 allowed)",
    ]
