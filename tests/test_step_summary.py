"""osmosis_run.reports.step_summary: the Markdown job summary and $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_dirs import line

from osmosis_run.errors import ConfigError
from osmosis_run.reports.step_summary import append_step_summary, markdown_summary
from osmosis_run.results.gates import Verdict
from osmosis_run.results.metrics import summarize
from osmosis_run.results.records import Summary

HELD = Verdict(name="mean >= 0.5", held=True, message="mean >= 0.5: held (0.5000)")
BUDGET = Verdict(
    name="max_error_rate",
    held=False,
    message="error budget: exceeded (1 of 3 rollouts failed, 33.33%; 0 allowed)",
)


def smoke_summary() -> Summary:
    lines = [
        line("a.s0", metadata={"op": "add"}),
        line("b.s0", reward=0.5),
        line("c.s0", status="failure", error_message="bad <b>|pipe</b>\nTraceback (...)"),
    ]
    summary = summarize(lines, group_by="metadata.op")
    return summary.model_copy(update={"wall_s": 1.25, "planned": 3})


def test_markdown_summary_of_a_run_with_gates() -> None:
    text = markdown_summary(
        smoke_summary(), [HELD, BUDGET], run_dir=Path("runs/smoke"), title="osmosis-run: smoke"
    )

    assert text == (
        "### osmosis-run: smoke\n"
        "\n"
        "Run `runs/smoke`: finished; gates **failed**.\n"
        "\n"
        "| metric | value |\n"
        "| --- | --- |\n"
        "| rollouts | 3 of 3: 1 failure, 2 success |\n"
        "| errors | 1 agent_error |\n"
        "| reward (graded) | mean 0.750 &nbsp;std 0.250 &nbsp;min 0.500 &nbsp;median 0.750 &nbsp;"
        "max 1.000 &nbsp;(n=2) |\n"
        "| reward (all) | mean 0.500 &nbsp;std 0.408 &nbsp;(n=3, failed rollouts count as 0) |\n"
        "| pass rate | 33.3% (1/3 at reward &gt;= 1) |\n"
        "| workflow ms | p50 1.0 &nbsp;p90 1.0 &nbsp;p99 1.0 |\n"
        "| grader ms | p50 0.5 &nbsp;p90 0.5 &nbsp;p99 0.5 |\n"
        "| wall | 1.25s &nbsp;(-) |\n"
        "| metadata.op=(none) | 2 rollouts &nbsp;mean 0.250 &nbsp;pass 0.0% &nbsp;errors 1 |\n"
        "| metadata.op=add | 1 rollout &nbsp;mean 1.000 &nbsp;pass 100.0% &nbsp;errors 0 |\n"
        "\n"
        "- :white_check_mark: mean &gt;= 0.5: held (0.5000)\n"
        "- :x: error budget: exceeded (1 of 3 rollouts failed, 33.33%; 0 allowed)\n"
        "\n"
        "<details><summary>First errors</summary>\n"
        "\n"
        "- `c.s0` agent_error: bad &lt;b&gt;|pipe&lt;/b&gt;\n"
        "\n"
        "</details>\n"
    )


def test_markdown_summary_without_gates_or_errors() -> None:
    lines = [line(f"r{i}.s{k}", reward=float(k % 2)) for i in range(2) for k in range(2)]
    summary = summarize(lines, samples=2).model_copy(update={"planned": 8, "interrupted": True})

    text = markdown_summary(summary, [], run_dir=Path("r"), title="t")

    assert text.splitlines()[:4] == ["### t", "", "Run `r`: interrupted.", ""]
    assert "| pass@k | k=1 0.500 &nbsp;k=2 1.000 |" in text.splitlines()
    assert "| pass^k | k=1 0.500 &nbsp;k=2 0.000 |" in text.splitlines()
    assert "First errors" not in text
    assert ":x:" not in text


def test_an_unfinished_run_without_interrupt_is_incomplete() -> None:
    summary = summarize([line("a.s0")]).model_copy(update={"planned": 5})

    text = markdown_summary(summary, [HELD], run_dir=Path("r"), title="t")

    assert text.splitlines()[2] == "Run `r`: incomplete; gates **passed**."


def test_user_text_cannot_break_the_table() -> None:
    lines = [line("a.s0", metadata={"team": "a|b\n<img src=x>"})]
    summary = summarize(lines, group_by="metadata.team")

    text = markdown_summary(summary, [], run_dir=Path("runs/`x`"), title="t")

    assert "| metadata.team=a\\|b &lt;img src=x&gt; | 1 rollout &nbsp;mean 1.000 " in text
    assert "Run `runs/'x'`: finished." in text


def test_append_writes_to_the_file_github_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    target = tmp_path / "step_summary.md"
    target.write_text("earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))

    first = append_step_summary("### one\n")
    second = append_step_summary("### two")

    assert (first, second) == (True, True)
    assert target.read_text(encoding="utf-8") == "earlier step\n### one\n### two\n"


def test_append_writes_a_real_summary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    text = markdown_summary(smoke_summary(), [BUDGET], run_dir=tmp_path, title="osmosis-run")

    assert append_step_summary(text)
    assert target.read_text(encoding="utf-8") == text


def test_append_does_nothing_off_github(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)

    assert append_step_summary("### x") is False
    assert append_step_summary("### x", environ={"GITHUB_STEP_SUMMARY": ""}) is False
    assert list(tmp_path.iterdir()) == []


def test_append_takes_an_explicit_environment(tmp_path: Path) -> None:
    target = tmp_path / "s.md"

    assert append_step_summary("hi", environ={"GITHUB_STEP_SUMMARY": str(target)})
    assert target.read_text(encoding="utf-8") == "hi\n"


def test_an_unwritable_summary_file_is_a_config_error(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "s.md"

    with pytest.raises(ConfigError) as caught:
        append_step_summary("hi", environ={"GITHUB_STEP_SUMMARY": str(target)})

    assert str(caught.value) == (
        f"GITHUB_STEP_SUMMARY={target}: cannot append the step summary: No such file or directory"
    )
