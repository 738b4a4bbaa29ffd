"""The self-contained HTML report: what the page embeds, how it escapes, and its limits.

The run directories come from the real CLI (``osmosis-run eval``, in-process) over a small
dataset whose rows carry XSS payloads; the browser tests (test_html_browser.py) reuse them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from run_dirs import finished, write_run
from run_dirs import line as run_line
from typer.testing import CliRunner

from osmosis_run.cli import app
from osmosis_run.reports import html_report
from osmosis_run.reports.html_report import (
    render_compare_html,
    render_run_html,
    write_compare_html,
    write_run_html,
)
from osmosis_run.results.compare import compare_runs
from osmosis_run.results.metrics import summarize
from osmosis_run.results.records import ResultLine, RolloutState
from osmosis_run.results.rundata import RunData
from osmosis_run.store.rundata import load_run

PAYLOAD = (
    '</script><script>window.__pwned=1;document.title="pwned"</script>'
    "<img src=x onerror=\"window.__pwned=2;document.title='pwned'\"><!--<script>"
)
ID_PAYLOAD = "<img src=x onerror=window.__pwned=5>"
FILE_PAYLOAD = "<img src=x onerror=window.__pwned=3>.txt"
FLOW_MODULE = "html_report_flow"
FLOW_SOURCE = textwrap.dedent(
    '''
    """Workflows for the HTML report tests: answers come from the row's metadata."""

    import json

    from osmosis_run import AgentWorkflow, AgentWorkflowOutput, Grader, get_rollout_context


    def _sample_index() -> int:
        context = get_rollout_context()
        assert context is not None
        return int(context.rollout_id.rpartition(".s")[2])


    class Flow(AgentWorkflow):
        answers_key = "answers"

        async def run(self, ctx):
            meta = ctx.metadata or {}
            text = ctx.prompt[-1]["content"]
            if meta.get("fail"):
                raise ValueError(f"cannot answer: {text}")
            answers = meta.get(self.answers_key) or meta.get("answers") or [""]
            answer = answers[_sample_index() % len(answers)]
            if ctx.artifacts_dir is not None:
                (ctx.artifacts_dir / "notes #1.txt").write_text(text, encoding="utf-8")
                (ctx.artifacts_dir / "sub dir").mkdir(exist_ok=True)
                (ctx.artifacts_dir / "sub dir" / "out.json").write_text("{}", encoding="utf-8")
                if meta.get("xss_file"):
                    (ctx.artifacts_dir / meta["xss_file"]).write_text("x", encoding="utf-8")
            call = {"id": "call_1", "type": "function",
                    "function": {"name": "echo", "arguments": json.dumps({"text": text})}}
            messages = [
                *ctx.prompt,
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": text},
                {"role": "assistant", "content": "x" * meta.get("long", 0) + f"Answer: {answer}"},
            ]
            return AgentWorkflowOutput(messages=messages, metrics={"chars": len(text)})


    class FlowB(Flow):
        answers_key = "answers_b"


    class Judge(Grader):
        async def grade(self, ctx):
            final = ctx.sample.messages[-1]["content"]
            ctx.set_reward(1.0 if final.endswith(f"Answer: {ctx.label}") else 0.25)
    '''
)


def dataset_rows() -> list[Any]:
    """Rows for the report: passes, fails, flips between Flow and FlowB, errors, payloads."""
    return [
        {
            "id": "flip",
            "prompt": "What is 6 * 7?",
            "label": "42",
            "metadata": {"answers": ["42", "41"], "answers_b": ["41", "42"]},
        },
        {"id": "easy", "prompt": "Say hi", "label": "hi", "metadata": {"answers": ["hi"]}},
        {
            "id": "xss",
            "prompt": PAYLOAD,
            "label": PAYLOAD,
            "metadata": {"answers": ["nope"], "note": PAYLOAD, "xss_file": FILE_PAYLOAD},
        },
        {"id": ID_PAYLOAD, "prompt": "an id with a payload", "label": "y", "metadata": {}},
        {"id": "boom", "prompt": PAYLOAD, "label": "z", "metadata": {"fail": True}},
        {"id": "bad"},
        {
            "id": "long",
            "prompt": "Be verbose",
            "label": "v",
            "metadata": {"answers": ["v"], "long": 10_000},
        },
    ]


@dataclass(frozen=True)
class Runs:
    """Two runs of ``dataset_rows()`` (workflows Flow and FlowB), two samples per row."""

    root: Path
    a: Path
    b: Path


def run_eval(root: Path, workflow: str, out: Path, *extra: str) -> Path:
    """Run ``osmosis-run eval`` in-process over the test dataset; the flow module is in ``root``."""
    (root / f"{FLOW_MODULE}.py").write_text(FLOW_SOURCE, encoding="utf-8")
    dataset = root / "rows.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in dataset_rows()), encoding="utf-8")
    args = ["eval", str(dataset), "--workflow", f"{FLOW_MODULE}:{workflow}"]
    args += ["--grader", f"{FLOW_MODULE}:Judge", "--out", str(out), "--max-error-rate", "1.0"]
    result = CliRunner().invoke(app, [*args, "--samples", "2", *extra], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return out


def make_runs(root: Path, monkeypatch: pytest.MonkeyPatch) -> Runs:
    """Write the flow module and dataset in ``root`` and run both workflows over it."""
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.chdir(root)
    for name in list(os.environ):
        if name.startswith("OSMOSIS_"):
            monkeypatch.delenv(name)
    a = run_eval(root, "Flow", root / "run-a")
    b = run_eval(root, "FlowB", root / "run-b")
    return Runs(root, a, b)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    with pytest.MonkeyPatch.context() as monkeypatch:
        return make_runs(tmp_path_factory.mktemp("html"), monkeypatch)


def page_data(page: str) -> dict[str, Any]:
    """The JSON the page embeds, decoded."""
    match = re.search(
        r'<script type="application/json" id="osmosis-data">(.*?)</script>', page, re.S
    )
    assert match is not None
    data: dict[str, Any] = json.loads(match.group(1))
    return data


def rows_by_id(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["i"]: row for row in data["rows"]}


# -- self-contained and escaped ----------------------------------------------------------------


def test_the_page_loads_nothing_from_anywhere(runs: Runs) -> None:
    page = render_run_html(load_run(runs.a))

    assert re.findall(r"""(?:src|href|action)\s*=\s*["']?\s*(?:[a-z]+:)?//""", page, re.I) == []
    assert re.findall(r"url\(|@import|<link|<iframe|<object|<embed", page, re.I) == []
    assert re.findall(r"\bfetch\(|XMLHttpRequest|WebSocket|EventSource|sendBeacon", page) == []
    assert "default-src 'none'" in page


def test_only_the_pages_own_script_may_run(runs: Runs) -> None:
    page = render_run_html(load_run(runs.a))

    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    policy = re.search(r"script-src '(sha256-[^']+)'", page)
    assert len(scripts) == 1
    assert policy is not None
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert policy.group(1) == f"sha256-{digest}"


def test_dataset_text_cannot_end_the_data_block(runs: Runs) -> None:
    page = render_run_html(load_run(runs.a))

    assert page.count("</script") == 2  # the data block's and the script's own
    assert page.count("<!--") == 0
    assert page.count("<script") == 2
    assert "<img" not in page
    transcript = rows_by_id(page_data(page))["xss.s0"]["t"]
    assert transcript[0] == {"r": "user", "c": PAYLOAD}


def test_script_json_escapes_markup_and_round_trips() -> None:
    value = {"a": "</script><!-- & > \u2028", "b": [1.5, None, True]}

    text = html_report._script_json(value)

    assert not set(text) & set("<>&")
    assert json.loads(text) == value


def test_script_json_replaces_lone_surrogates() -> None:
    text = html_report._script_json({"a": "x\ud800y"})

    assert json.loads(text) == {"a": "x\ufffdy"}
    text.encode("utf-8")


def test_the_title_is_escaped(runs: Runs, tmp_path: Path) -> None:
    run = load_run(runs.a)
    run.run_dir = tmp_path / "run <b>&"

    page = render_run_html(run)

    assert "<title>run &lt;b&gt;&amp; · osmosis-run report</title>" in page


def test_the_script_builds_dom_from_text_only() -> None:
    script = (Path(html_report.__file__).parent / "html" / "report.js").read_text(encoding="utf-8")

    for sink in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        'setTimeout("',
        "javascript:",
    ):
        assert sink not in script
    assert "</script" not in script
    assert "</style" not in (Path(html_report.__file__).parent / "html" / "report.css").read_text()


# -- what the run page holds -------------------------------------------------------------------


def test_one_row_per_rollout_in_order(runs: Runs) -> None:
    data = page_data(render_run_html(load_run(runs.a)))

    ids = [row["i"] for row in data["rows"]]
    assert len(ids) == 14
    assert ids[:4] == ["flip.s0", "flip.s1", "easy.s0", "easy.s1"]
    statuses = {row["i"]: row["st"] for row in data["rows"]}
    assert statuses["boom.s0"] == "failure"
    assert statuses["bad.s0"] == "invalid"
    assert data["summary"]["counts"] == {"failure": 2, "invalid": 2, "success": 10}
    assert data["summary"]["samples_per_row"] == 2


def test_rows_carry_reward_pass_and_timings(runs: Runs) -> None:
    rows = rows_by_id(page_data(render_run_html(load_run(runs.a))))

    assert (rows["flip.s0"]["rw"], rows["flip.s0"]["p"]) == (1.0, True)
    assert (rows["flip.s1"]["rw"], rows["flip.s1"]["p"]) == (0.25, False)
    assert rows["boom.s0"]["p"] is False
    assert "rw" not in rows["boom.s0"]
    assert rows["flip.s0"]["wm"] > 0
    assert rows["flip.s0"]["m"] == {"chars": 14.0}
    assert rows["xss.s0"]["md"]["note"] == PAYLOAD


def test_a_failure_has_its_message_traceback_and_prompt(runs: Runs) -> None:
    row = rows_by_id(page_data(render_run_html(load_run(runs.a))))["boom.s0"]

    assert row["ec"] == "validation_error"
    assert row["em"] == f"cannot answer: {PAYLOAD}"
    assert row["tb"].startswith("Traceback (most recent call last):")
    assert row["tb"].rstrip().endswith(f"ValueError: cannot answer: {PAYLOAD}")
    assert row["es"] == "workflow"
    assert row["tp"] is True
    assert row["t"] == [{"r": "user", "c": PAYLOAD}]


def test_an_invalid_row_says_why(runs: Runs) -> None:
    row = rows_by_id(page_data(render_run_html(load_run(runs.a))))["bad.s0"]

    assert row["st"] == "invalid"
    assert row["ec"] == "invalid_row"
    assert "prompt" in row["em"]
    assert "t" not in row


def test_tool_calls_and_results_are_kept_as_such(runs: Runs) -> None:
    row = rows_by_id(page_data(render_run_html(load_run(runs.a))))["easy.s0"]

    assert row["t"] == [
        {"r": "user", "c": "Say hi"},
        {"r": "assistant", "tc": [{"id": "call_1", "n": "echo", "a": '{"text": "Say hi"}'}]},
        {"r": "tool", "tid": "call_1", "c": "Say hi"},
        {"r": "assistant", "c": "Answer: hi"},
    ]


def test_long_content_keeps_head_and_tail_with_a_count(runs: Runs) -> None:
    row = rows_by_id(page_data(render_run_html(load_run(runs.a))))["long.s0"]

    final = row["t"][-1]
    assert len(final["c"]) == 3_000
    assert final["ct"] == "x" * 991 + "Answer: v"
    assert final["cx"] == 10_009 - 4_000


def test_files_and_artifacts_are_listed(runs: Runs) -> None:
    rows = rows_by_id(page_data(render_run_html(load_run(runs.a))))

    assert rows["easy.s0"]["f"] == "rt"
    assert rows["easy.s0"]["af"] == [["notes #1.txt", 6], ["sub dir/out.json", 2]]
    assert [FILE_PAYLOAD, 1] in rows["xss.s0"]["af"]
    assert rows["boom.s0"]["f"] == "r"


def test_links_are_relative_to_where_the_page_is_written(runs: Runs, tmp_path: Path) -> None:
    inside = write_run_html(runs.a, runs.a / "report.html")
    beside = write_run_html(runs.a, runs.root / "report-a.html")
    elsewhere = write_run_html(runs.a, tmp_path / "deep" / "r.html")

    assert page_data(inside.read_text())["run"]["base"] == ""
    assert page_data(beside.read_text())["run"]["base"] == "run-a/"
    base = page_data(elsewhere.read_text())["run"]["base"]
    assert not base.startswith("/")
    target = elsewhere.parent / unquote(base) / "rollouts/easy.s0/artifacts/notes #1.txt"
    assert target.resolve().is_file()
    (runs.a / "report.html").unlink()


def test_charts_count_what_the_summary_counts(runs: Runs) -> None:
    data = page_data(render_run_html(load_run(runs.a)))
    charts, summary = data["charts"], data["summary"]

    assert charts["reward"]["edges"][0] == 0.0
    assert charts["reward"]["edges"][-1] == 1.0
    assert charts["reward"]["counts"] == [0, 0, 5, 0, 0, 0, 0, 0, 0, 5]
    assert sum(charts["latency"]["workflow"]) == summary["workflow_ms"]["count"]
    assert sum(charts["latency"]["grader"]) == summary["grader_ms"]["count"]
    assert charts["status"] == [["success", 10], ["failure", 2], ["invalid", 2]]
    assert charts["categories"] == [["invalid_row", 2], ["validation_error", 2]]
    assert [p["k"] for p in summary["pass_at_k"]] == [1, 2]
    assert data["metrics"] == [["chars", pytest.approx(summary_chars(runs.a)), 10]]


def summary_chars(run_dir: Path) -> float:
    values = [float(line.metrics["chars"]) for line in load_run(run_dir).lines if line.metrics]
    return sum(values) / len(values)


def test_metadata_that_is_not_strict_json_is_shown_as_text(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path, 2)
    run.lines[0].metadata = {"score": float("nan")}
    run.lines[1].metadata = {"when": Path("/x")}

    rows = page_data(render_run_html(run))["rows"]

    assert rows[0]["md"] == '{"score": NaN}'
    assert rows[1]["md"] == {"when": "/x"}


def test_an_empty_run_renders(tmp_path: Path) -> None:
    run = RunData(run_dir=tmp_path, config={}, lines=[], summary=summarize([]), stored_summary=None)

    data = page_data(render_run_html(run))

    assert data["rows"] == []
    assert data["charts"]["reward"] is None
    assert data["charts"]["latency"] is None


# -- limits --------------------------------------------------------------------------------------


def synthetic_run(
    tmp_path: Path, count: int, *, content: str = "hello", messages: int = 4
) -> RunData:
    """A run of ``count`` rollouts built in memory: every third one fails its grade."""
    transcript = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": content} for i in range(messages)
    ]
    lines = [
        ResultLine(
            rollout_id=f"r{i}.s0",
            row_index=i,
            line=i + 1,
            sample_index=0,
            status="success",
            reward=0.0 if i % 3 == 0 else 1.0,
            passed=i % 3 != 0,
            workflow_ms=1.0 + i % 50,
            grader_ms=0.1,
            messages=transcript,
            label="1",
            metadata={"i": i},
        )
        for i in range(count)
    ]
    return RunData(
        run_dir=tmp_path, config={}, lines=lines, summary=summarize(lines), stored_summary=None
    )


def test_a_long_transcript_keeps_its_first_and_last_messages(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path, 1, messages=300)

    transcript = page_data(render_run_html(run))["rows"][0]["t"]

    assert len(transcript) == 121
    assert transcript[20] == {"r": "gap", "om": 180}
    assert transcript[19]["r"] == "assistant"
    assert transcript[21]["r"] == "user"


def test_over_the_budget_only_failing_transcripts_are_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(html_report, "TRANSCRIPT_BUDGET_CHARS", 2_000)
    run = synthetic_run(tmp_path, 30)

    data = page_data(render_run_html(run))

    embedded = [row["i"] for row in data["rows"] if "t" in row]
    omitted = [row["i"] for row in data["rows"] if row.get("tz")]
    assert embedded == [f"r{i}.s0" for i in range(0, 30, 3)]
    assert len(omitted) == 20
    assert data["limits"]["over_budget"] is True
    assert data["limits"]["embedded"] == 10


@pytest.mark.slow
def test_20000_rollouts_stay_within_the_size_budget(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path, 20_000, content="y" * 3_000)

    started = time.perf_counter()
    page = render_run_html(run)
    elapsed = time.perf_counter() - started

    data = page_data(page)
    assert len(data["rows"]) == 20_000
    assert data["limits"]["over_budget"] is True
    embedded = [row for row in data["rows"] if "t" in row]
    assert 600 < data["limits"]["embedded"] == len(embedded) < 6_667
    assert all(row["p"] is False for row in embedded)  # only failing rows, up to the budget
    # 12 MB of transcripts and rows, plus every rollout's prompt and final answer (100 chars each)
    assert len(page.encode()) < 16_500_000
    assert elapsed < 60  # a sanity bound, not a benchmark


# -- the comparison page -----------------------------------------------------------------------


def test_compare_pairs_rollouts_and_finds_the_flips(runs: Runs) -> None:
    data = page_data(render_compare_html(load_run(runs.a), load_run(runs.b)))

    kinds = {pair["i"]: pair["k"] for pair in data["pairs"]}
    assert kinds["flip.s0"] == "pf"
    assert kinds["flip.s1"] == "fp"
    assert kinds["easy.s0"] == "pp"
    assert kinds["boom.s0"] == "ff"
    paired = data["paired"]
    assert paired["kinds"] == {"pf": 1, "fp": 1, "pp": 4, "ff": 8}
    assert paired["both"] == 14
    assert paired["improved"] == 1
    assert paired["worsened"] == 1
    assert data["comparison"]["mean"]["delta"] == 0.0
    assert sum(paired["delta_hist"]["counts"]) == paired["scored"] == 14
    assert data["comparison"]["paired"] == 14
    flip = next(pair for pair in data["pairs"] if pair["i"] == "flip.s0")
    assert (flip["A"]["rw"], flip["B"]["rw"], flip["d"]) == (1.0, 0.25, -0.75)
    assert flip["A"]["t"][-1]["c"] == "Answer: 42"
    assert flip["B"]["t"][-1]["c"] == "Answer: 41"


def test_compare_counts_rollouts_in_one_run_only(runs: Runs, tmp_path: Path) -> None:
    a, b = load_run(runs.a), load_run(runs.b)
    b.lines = [line for line in b.lines if not line.rollout_id.startswith("easy.")]

    data = page_data(render_compare_html(a, b))

    assert data["paired"]["kinds"]["oa"] == 2
    only = next(pair for pair in data["pairs"] if pair["i"] == "easy.s0")
    assert only["B"] is None


def test_compare_statistics_on_known_numbers(tmp_path: Path) -> None:
    a = synthetic_run(tmp_path / "a", 6)
    b = synthetic_run(tmp_path / "b", 6)
    for line in b.lines:
        line.reward = 1.0

    data = page_data(render_compare_html(a, b))
    paired, shown = data["paired"], data["comparison"]

    assert shown["mean"]["a"] == pytest.approx(4 / 6)
    assert shown["mean"]["b"] == 1.0
    assert shown["mean"]["delta"] == pytest.approx(2 / 6)
    assert (shown["pass_rate"]["a"], shown["pass_rate"]["b"]) == (pytest.approx(4 / 6), 1.0)
    ci = compare_runs(a, b).mean.ci
    assert ci is not None
    assert shown["mean"]["ci"] == {"low": ci.low, "high": ci.high}
    assert shown["text"]["mean"] == {
        "a": "0.667",
        "b": "1.000",
        "delta": "+0.333",
        "ci": f"[{ci.low:+.3f}, {ci.high:+.3f}]",
    }
    assert paired["matrix"][0][0] == 4  # pass -> pass
    assert paired["matrix"][1][0] == 2  # fail -> pass


def test_compare_over_budget_keeps_flipped_rows_first(
    runs: Runs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(html_report, "TRANSCRIPT_BUDGET_CHARS", 1_100)

    data = page_data(render_compare_html(load_run(runs.a), load_run(runs.b)))

    kinds = {pair["i"]: pair["k"] for pair in data["pairs"]}
    with_transcripts = {
        pair["i"] for pair in data["pairs"] for side in ("A", "B") if pair[side].get("t")
    }
    assert {"flip.s0", "flip.s1"} <= with_transcripts
    assert {kinds[i] for i in with_transcripts} == {"pf", "fp", "ff"}
    assert len(with_transcripts) < len(kinds)


def test_the_pass_threshold_can_be_overridden(runs: Runs, tmp_path: Path) -> None:
    run_page = write_run_html(runs.a, tmp_path / "r.html", pass_threshold=0.2)
    compare_page = write_compare_html(runs.a, runs.b, tmp_path / "c.html", pass_threshold=0.2)

    rows = rows_by_id(page_data(run_page.read_text(encoding="utf-8")))
    paired = page_data(compare_page.read_text(encoding="utf-8"))["paired"]

    assert rows["flip.s1"]["p"] is True
    assert paired["kinds"] == {"pp": 10, "ff": 4}


def test_write_compare_html_links_both_runs(runs: Runs) -> None:
    out = write_compare_html(runs.a, runs.b, runs.root / "diff.html")

    data = page_data(out.read_text(encoding="utf-8"))

    assert (data["a"]["base"], data["b"]["base"]) == ("run-a/", "run-b/")
    assert data["kind"] == "compare"
    out.unlink()


# -- the comparison page shows what `osmosis-run compare` computes ------------------------------

CLUSTERED_ROWS, CLUSTERED_SAMPLES = 12, 8


def clustered_runs(root: Path) -> tuple[Path, Path]:
    """Two runs of 12 rows x 8 samples whose samples agree within a row (the issue's shape).

    A passes rows 0-5; B passes rows 0-2 and 6, has a failure in row 3 and an ungraded rollout
    in row 0. The row bootstrap's interval is much wider than a standard error over rollouts.
    """
    passing = {"a": {0, 1, 2, 3, 4, 5}, "b": {0, 1, 2, 6}}
    for name in ("a", "b"):
        lines = []
        for r in range(CLUSTERED_ROWS):
            for k in range(CLUSTERED_SAMPLES):
                status: RolloutState = "success"
                if name == "b" and (r, k) in ((3, 0), (0, 7)):
                    status = "failure" if r == 3 else "ungraded"
                reward = 1.0 if r in passing[name] else 0.25
                lines.append(
                    run_line(f"q{r}.s{k}", status=status, reward=reward, row_index=r, line=r + 1)
                )
        write_run(
            root / name,
            lines,
            summary=finished(len(lines)),
            samples=CLUSTERED_SAMPLES,
        )
    return root / "a", root / "b"


def shown_as_compare_prints(delta: dict[str, Any], spec: str) -> dict[str, str]:
    """A delta of ``compare --json``, formatted as the ``compare`` table prints it."""
    return {
        "a": format(delta["a"], spec),
        "b": format(delta["b"], spec),
        "delta": format(delta["delta"], "+" + spec),
        "ci": f"[{format(delta['ci']['low'], '+' + spec)}, {format(delta['ci']['high'], '+' + spec)}]",
    }


PAIRING = ("paired", "paired_rows", "only_in_a", "only_in_b", "unscored", "resamples", "seed")


def test_the_compare_page_shows_what_compare_json_reports(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    clustered_runs(tmp_path)

    result = cli("compare", "a", "b", "--json", "--html", "diff.html")

    assert result.exit_code == 0
    document = json.loads(result.stdout)
    shown = page_data((tmp_path / "diff.html").read_text(encoding="utf-8"))["comparison"]
    for metric in ("mean", "pass_rate"):
        assert shown[metric] == document[metric]
    assert {key: shown[key] for key in PAIRING} == {key: document[key] for key in PAIRING}
    assert (document["paired"], document["paired_rows"], document["unscored"]) == (95, 12, 1)
    assert shown["text"] == {
        "mean": shown_as_compare_prints(document["mean"], ".3f"),
        "pass_rate": shown_as_compare_prints(document["pass_rate"], ".1%"),
    }
    flips = {"pass_to_fail": "pf", "fail_to_pass": "fp"}
    for key, kind in flips.items():
        assert [p["i"] for p in page_data_pairs(tmp_path / "diff.html") if p["k"] == kind] == (
            document[key]
        )
    errors = {key: len(document[key]) for key in ("new_errors", "fixed_errors")}
    assert (
        {key: shown["counts"][key] for key in errors}
        == errors
        == {
            "new_errors": 1,
            "fixed_errors": 0,
        }
    )


def page_data_pairs(page: Path) -> list[dict[str, Any]]:
    pairs: list[dict[str, Any]] = page_data(page.read_text(encoding="utf-8"))["pairs"]
    return pairs


def test_the_compare_page_shows_the_digits_the_compare_table_prints(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    clustered_runs(tmp_path)

    written = cli("compare", "a", "b", "--html", "diff.html", "--seed", "3", "--resamples", "500")
    result = cli("compare", "a", "b", "--seed", "3", "--resamples", "500")

    assert (written.exit_code, written.stdout) == (0, "")  # the page is the report
    assert result.exit_code == 0
    table = [text.split() for text in result.stdout.splitlines()[2:4]]
    shown = page_data((tmp_path / "diff.html").read_text(encoding="utf-8"))["comparison"]
    for row, metric in zip(table, ("mean", "pass_rate"), strict=True):
        text = shown["text"][metric]
        assert row[2:] == [text["a"], text["b"], text["delta"], *text["ci"].split()]
    assert (shown["seed"], shown["resamples"]) == (3, 500)


def test_the_compare_page_judges_both_runs_at_the_comparisons_threshold(tmp_path: Path) -> None:
    a = load_run(write_run(tmp_path / "a", [run_line("q.s0", reward=0.5)], pass_threshold=1.0))
    b = load_run(write_run(tmp_path / "b", [run_line("q.s0", reward=0.75)], pass_threshold=0.5))

    data = page_data(render_compare_html(a, b))

    assert data["comparison"]["pass_threshold"] == 1.0
    assert [(p["A"]["p"], p["B"]["p"], p["k"]) for p in data["pairs"]] == [(False, False, "ff")]
