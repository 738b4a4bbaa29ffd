"""Hand-written run directories for the HTML report's table: glance columns, failed badges,
-n groups, model usage, a flipped pair, and charts crowded with labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from run_dirs import line, write_run

from osmosis_run.results.records import ResultLine

QUESTION = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is 2+2?"},
]
TOOLS = [
    {"role": "user", "content": "Add 3 and 4,\n  then   say the sum."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "[3, 4]"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "7"},
    {"role": "assistant", "content": "The sum is 7."},
]
USAGE = {
    "requests": 2,
    "prompt_tokens": 100,
    "completion_tokens": 20,
    "total_tokens": 120,
    "retries": 1,
    "model_wait_ms": 30.0,
    "cost": 0.002,
}


def answered(text: str) -> list[dict[str, Any]]:
    return [*QUESTION, {"role": "assistant", "content": text}]


def run_a_lines(*, usage: bool = True) -> list[ResultLine]:
    extra: dict[str, Any] = {"usage": USAGE} if usage else {}
    other: dict[str, Any] = (
        {"usage": {**USAGE, "prompt_tokens": 60, "total_tokens": 80, "cost": 0.003}}
        if usage
        else {}
    )
    return [
        line("q1.s0", reward=1.0, row_index=0, line=1, messages=answered("4"), **extra),
        line("q1.s1", reward=0.0, row_index=0, line=1, messages=answered("5"), **other),
        line("q2.s0", status="failure", row_index=1, line=2),
        line("q2.s1", reward=1.0, row_index=1, line=2, messages=TOOLS),
        line("q3.s0", status="ungraded", row_index=2, line=3, messages=answered("x" * 150)),
        line("q3.s1", status="ungraded", row_index=2, line=3, messages=answered("y")),
    ]


def write_a(root: Path, *, usage: bool = True) -> Path:
    run = write_run(root / "run-a", run_a_lines(usage=usage), samples=2)
    (run / "rollouts" / "q1.s0").mkdir(parents=True)
    (run / "rollouts" / "q1.s0" / "result.json").write_text("{}", encoding="utf-8")
    return run


def write_b(root: Path) -> Path:
    lines = run_a_lines(usage=False)
    lines[1] = line("q1.s1", reward=1.0, row_index=0, line=1, messages=answered("4"))
    return write_run(root / "run-b", lines, samples=2)


def write_crowded(root: Path) -> Path:
    """Two rows sampled 256 times (nine pass@k points) and latencies bunched together."""
    lines = [
        line(
            f"r{row}.s{sample}",
            reward=1.0 if (sample + row) % 3 == 0 else 0.0,
            row_index=row,
            line=row + 1,
            workflow_ms=100.0 + (sample % 100) / 100,
            grader_ms=5.0 + (sample % 10) / 100,
        )
        for row in range(2)
        for sample in range(256)
    ]
    return write_run(root / "crowded", lines, samples=256)
