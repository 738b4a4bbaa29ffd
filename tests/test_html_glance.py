"""What the HTML report embeds for its rollout table: each rollout's prompt and final answer,
its outcome, the groups of -n samples, model usage and, on the comparison page, the first
message where a pair's transcripts differ."""

from __future__ import annotations

from pathlib import Path

from glance_runs import write_a, write_b
from test_html_report import page_data, rows_by_id

from osmosis_run.reports.html_report import render_compare_html, render_run_html
from osmosis_run.store.rundata import load_run


def test_each_rollout_carries_its_prompt_and_final_answer(tmp_path: Path) -> None:
    rows = rows_by_id(page_data(render_run_html(load_run(write_a(tmp_path)))))

    assert (rows["q1.s0"]["pr"], rows["q1.s0"]["fa"]) == ("What is 2+2?", "4")
    # The prompt is the last user message before the first answer; whitespace runs are one
    # space; the final answer is the last assistant message with text (not the tool call).
    assert (rows["q2.s1"]["pr"], rows["q2.s1"]["fa"]) == (
        "Add 3 and 4, then say the sum.",
        "The sum is 7.",
    )
    assert rows["q3.s0"]["fa"] == "x" * 99 + "…"
    assert "pr" not in rows["q2.s0"]
    assert "fa" not in rows["q2.s0"]  # a failure without a transcript: nothing to show


def test_outcomes_say_a_success_below_the_threshold_failed(tmp_path: Path) -> None:
    rows = rows_by_id(page_data(render_run_html(load_run(write_a(tmp_path)))))

    assert {i: (r["st"], r["o"]) for i, r in rows.items()} == {
        "q1.s0": ("success", "pass"),
        "q1.s1": ("success", "fail"),
        "q2.s0": ("failure", "error"),
        "q2.s1": ("success", "pass"),
        "q3.s0": ("ungraded", "none"),
        "q3.s1": ("ungraded", "none"),
    }


def test_samples_are_grouped_by_row(tmp_path: Path) -> None:
    data = page_data(render_run_html(load_run(write_a(tmp_path))))

    assert data["groups"] == {
        "0": {"n": 2, "p": 1, "f": 1, "e": 0, "m": 0.5},
        "1": {"n": 2, "p": 1, "f": 0, "e": 1, "m": 0.5},
        "2": {"n": 2, "p": 0, "f": 0, "e": 0, "m": None},
    }


def test_model_usage_per_rollout_and_in_total(tmp_path: Path) -> None:
    data = page_data(render_run_html(load_run(write_a(tmp_path))))
    rows = rows_by_id(data)

    assert rows["q1.s0"]["u"] == {
        "rq": 2,
        "pt": 100,
        "ct": 20,
        "tt": 120,
        "rt": 1,
        "w": 30.0,
        "$": 0.002,
    }
    assert "u" not in rows["q2.s0"]
    assert data["usage"] == {
        "rollouts": 2, "rq": 4, "pt": 160, "ct": 40, "tt": 200, "rt": 2, "w": 60.0, "$": 0.005,
    }  # fmt: skip


def test_a_run_without_the_gateway_has_no_usage(tmp_path: Path) -> None:
    data = page_data(render_run_html(load_run(write_a(tmp_path, usage=False))))

    assert data["usage"] is None
    assert all("u" not in row for row in data["rows"])


def test_a_pair_knows_its_first_differing_message(tmp_path: Path) -> None:
    a, b = load_run(write_a(tmp_path)), load_run(write_b(tmp_path))
    pairs = {pair["i"]: pair for pair in page_data(render_compare_html(a, b))["pairs"]}

    assert pairs["q1.s1"]["k"] == "fp"
    assert pairs["q1.s1"]["fd"] == 2  # system, user, then the answers differ
    assert "fd" not in pairs["q1.s0"]  # the same transcript
    assert "fd" not in pairs["q2.s0"]  # no transcripts
