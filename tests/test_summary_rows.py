"""osmosis_run.reports.summary_rows: one set of rows, said in the same words everywhere."""

from __future__ import annotations

import html
from pathlib import Path

from run_dirs import line

from osmosis_run.cli.tables import summary_table
from osmosis_run.reports.step_summary import markdown_summary
from osmosis_run.reports.summary_rows import summary_rows
from osmosis_run.results.metrics import summarize
from osmosis_run.results.records import Summary


def _summary() -> Summary:
    lines = [
        line("a.s0", metadata={"op": "add"}, reward=1.0),
        line("a.s1", metadata={"op": "add"}, reward=0.0),
        line("b.s0", status="failure", error_message="boom"),
    ]
    summary = summarize(lines, group_by="metadata.op", samples=2)
    return summary.model_copy(update={"wall_s": 2.0, "throughput_per_s": 1.5, "planned": 3})


def test_the_rows_of_a_summary() -> None:
    assert summary_rows(_summary()) == [
        ("rollouts", "3 of 3: 1 failure, 2 success"),
        ("errors", "1 agent_error"),
        (
            "reward (graded)",
            "mean 0.500  std 0.500  min 0.000  median 0.500  max 1.000  (n=2)",
        ),
        ("reward (all)", "mean 0.333  std 0.471  (n=3, failed rollouts count as 0)"),
        ("pass rate", "33.3% (1/3 at reward >= 1)"),
        ("pass@k", "k=1 0.250  k=2 1.000"),
        ("pass^k", "k=1 0.250  k=2 0.000"),
        ("workflow ms", "p50 1.0  p90 1.0  p99 1.0"),
        ("grader ms", "p50 0.5  p90 0.5  p99 0.5"),
        ("wall", "2.00s  (1.5/s)"),
        ("metadata.op=(none)", "1 rollout  mean 0.000  pass 0.0%  errors 1"),
        ("metadata.op=add", "2 rollouts  mean 0.500  pass 50.0%  errors 0"),
    ]


def test_the_terminal_and_the_step_summary_say_the_same_rows() -> None:
    summary = _summary()
    terminal = summary_table(summary, title="t").plain.splitlines()[1:]
    markdown = markdown_summary(summary, [], run_dir=Path("r"), title="t").splitlines()
    table = markdown[markdown.index("| --- | --- |") + 1 :]
    rows = summary_rows(summary)
    width = max(len(label) for label, _ in rows) + 2
    assert terminal == [label.ljust(width) + value for label, value in rows]
    assert table[: len(rows)] == [
        f"| {label} | {html.escape(value).replace('  ', ' &nbsp;')} |" for label, value in rows
    ]


def test_the_worker_processes_row_says_what_was_lost() -> None:
    backend = {
        "kind": "processes",
        "workers": 2,
        "started": 5,
        "workers_lost": 3,
        "rollouts_rerun": 4,
        "lost": [
            {
                "pid": 1,
                "kind": "SIGSEGV",
                "reason": "worker process 1 died (SIGSEGV)",
                "rollouts": 3,
            },
            {
                "pid": 2,
                "kind": "SIGSEGV",
                "reason": "worker process 2 died (SIGSEGV)",
                "rollouts": 1,
            },
            {"pid": 3, "kind": "past a deadline", "reason": "...", "rollouts": 0},
        ],
    }
    summary = _summary().model_copy(update={"backend": backend})
    assert dict(summary_rows(summary))["workers"] == (
        "2 processes (5 started); 3 lost (2 SIGSEGV, 1 past a deadline; 4 rollouts ran again)"
    )
    quiet = _summary().model_copy(
        update={"backend": {"kind": "processes", "workers": 1, "started": 1}}
    )
    assert dict(summary_rows(quiet))["workers"] == "1 process (1 started)"
