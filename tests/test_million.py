"""Reading a run of a million rollouts back: reports stream results.jsonl (issue 26, W16).

``open_run`` keeps a run's results in its file (``reports.results_file``) and every report
reads them again in one pass; these tests hold the streamed reports to what the in-memory ones
(``load_run``, xml.etree, the per-row bootstrap) give, and check the limits a large run meets:
the HTML report lists at most ``MAX_ROWS`` rollouts and says so, its charts count them all.
"""

from __future__ import annotations

import random
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from run_dirs import finished, line, write_run
from test_html_browser import chromium
from test_html_report import page_data

from osmosis_run.reports import html_report
from osmosis_run.reports.html_report import render_compare_html, render_run_html
from osmosis_run.reports.junit import write_junit
from osmosis_run.reports.report import build_report, open_run, read_report
from osmosis_run.reports.results_file import ResultsFile, _Ids, scan_results
from osmosis_run.reports.show import find_rollouts, worst_rollouts
from osmosis_run.results import compare
from osmosis_run.results.compare import compare_runs
from osmosis_run.results.metrics import summarize
from osmosis_run.results.records import ResultLine
from osmosis_run.results.rundata import RunData
from osmosis_run.store.rundata import load_run

if TYPE_CHECKING:
    from playwright.sync_api import Browser


def mixed_lines() -> list[ResultLine]:
    return [
        line("a.s0", row_index=0, workflow_ms=30.0),
        line("a.s1", reward=0.25, row_index=0, sample_index=1),
        line("b.s0", status="failure", row_index=1, error_message="broke\ntraceback"),
        line("b.s1", reward=0.0, row_index=1, sample_index=1, workflow_ms=12.0),
        line("c.s0", status="ungraded", row_index=2),
        line("c.s1", status="timeout", row_index=2, sample_index=1, error_category="timeout"),
    ]


def dump(lines: Any) -> list[dict[str, Any]]:
    return [item.model_dump() for item in lines]


# -- the results file ----------------------------------------------------------------------------


def test_open_run_streams_what_load_run_holds(tmp_path: Path) -> None:
    run_dir = write_run(
        tmp_path / "run", mixed_lines(), summary=finished(6), torn_tail='{"rollout_id": "x'
    )
    with (run_dir / "results.jsonl").open("a", encoding="utf-8") as f:
        f.write("not json\n")

    streamed, held = open_run(run_dir), load_run(run_dir)

    assert isinstance(streamed.lines, ResultsFile)
    assert dump(streamed.lines) == dump(held.lines) == dump(mixed_lines())
    assert dump(streamed.lines) == dump(streamed.lines)  # read again at each pass
    assert len(streamed.lines) == 6
    assert streamed.lines[2].rollout_id == "b.s0"
    assert dump(streamed.lines[-2:]) == dump(held.lines[-2:])
    assert streamed.summary == held.summary
    assert (streamed.config, streamed.fingerprint) == (held.config, held.fingerprint)


def test_a_repeated_id_keeps_its_last_line_at_the_first_place(tmp_path: Path) -> None:
    lines = [*mixed_lines(), line("b.s0", reward=1.0, row_index=1, workflow_ms=99.0)]
    run_dir = write_run(tmp_path / "run", lines, summary=finished(6))

    streamed, held = open_run(run_dir), load_run(run_dir)

    assert [item.rollout_id for item in streamed.lines] == [i.rollout_id for i in mixed_lines()]
    assert streamed.lines[2].status == "success"
    assert dump(streamed.lines) == dump(held.lines)
    assert streamed.summary == held.summary  # folded again, without the line that lost
    assert streamed.summary.counts == {"success": 4, "timeout": 1, "ungraded": 1}


def written_run(tmp_path: Path, lines: list[ResultLine]) -> Path:
    """A run directory whose summary.json is what eval writes: its results' own summary."""
    summary = summarize(lines).model_copy(update={"planned": len(lines), "complete": True})
    return write_run(tmp_path / "run", lines, summary=summary)


def test_a_finished_runs_summary_stands_for_its_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = written_run(tmp_path, mixed_lines())
    expected = load_run(run_dir).summary
    monkeypatch.setattr("osmosis_run.reports.report.MetricsAccumulator", None)  # not recomputed

    run, document = read_report(run_dir)

    assert run.summary == document.summary == expected
    assert dump(run.lines) == dump(mixed_lines())


@pytest.mark.parametrize("change", ["appended", "counts", "threshold"])
def test_a_summary_that_may_not_hold_is_recomputed(tmp_path: Path, change: str) -> None:
    lines = mixed_lines()
    run_dir = written_run(tmp_path, lines)
    results = run_dir / "results.jsonl"
    if change == "appended":  # after summary.json was written: the run went on
        with results.open("a", encoding="utf-8") as f:
            f.write(line("d.s0", reward=0.5).model_dump_json() + "\n")
    elif change == "counts":  # same number of results, another status
        summary = summarize(lines).model_copy(update={"planned": 6, "complete": True})
        summary.counts = {"success": 6}
        (run_dir / "summary.json").write_text(summary.model_dump_json(), encoding="utf-8")

    threshold = 0.2 if change == "threshold" else None
    streamed = open_run(run_dir, pass_threshold=threshold)

    held = load_run(run_dir, pass_threshold=threshold)
    assert streamed.summary == held.summary
    assert streamed.summary.rollouts == (7 if change == "appended" else 6)


def test_a_scan_says_whether_its_fold_saw_a_repeated_id(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", [line("a.s0"), line("b.s0"), line("a.s0", reward=0.0)])
    seen: list[str] = []

    results, exact = scan_results(run_dir, lambda result: seen.append(result.rollout_id))

    assert (seen, exact) == (["a.s0", "b.s0", "a.s0"], False)
    assert [(r.rollout_id, r.reward) for r in results] == [("a.s0", 0.0), ("b.s0", 1.0)]
    results.close()
    with pytest.raises(ValueError, match="the results file is closed"):
        list(results)


def test_a_run_without_results_reads_as_empty(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.toml").write_text("samples = 1\n", encoding="utf-8")

    run = open_run(run_dir)

    assert (list(run.lines), len(run.lines), run.summary.rollouts) == ([], 0, 0)


class SameHash(str):
    """An id whose hash is the same as every other's: the table must tell them apart."""

    __slots__ = ()

    def __hash__(self) -> int:
        return 42


def test_ids_with_one_hash_are_told_apart_by_their_lines() -> None:
    ids = _Ids()
    written: list[str] = []

    def add(rollout_id: str) -> int | None:
        found = ids.add(SameHash(rollout_id), len(written), written.__getitem__)
        if found is None:
            written.append(rollout_id)
        return found

    assert [add(name) for name in ("a", "b", "c", "b", "a", "d")] == [None, None, None, 1, 0, None]


def test_the_table_of_ids_grows_and_keeps_every_id() -> None:
    ids = _Ids()
    names = [f"row@{i}.s0" for i in range(20_000)]
    assert all(ids.add(name, i, names.__getitem__) is None for i, name in enumerate(names))
    assert [ids.add(name, -1, names.__getitem__) for name in names[::997]] == list(
        range(0, 20_000, 997)
    )


# -- report, junit, show ------------------------------------------------------------------------


def test_read_report_is_build_report_in_one_pass(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", mixed_lines(), summary=finished(6))

    run, document = read_report(run_dir, slowest=2, lowest=1)

    expected = build_report(load_run(run_dir), slowest=2, lowest=1)
    assert document == expected.model_copy(update={"run_dir": run.run_dir})
    assert [slow.rollout_id for slow in document.slowest] == ["a.s0", "b.s1"]
    assert [low.rollout_id for low in document.lowest] == ["b.s1"]


def test_the_slowest_keep_the_earlier_of_equal_times(tmp_path: Path) -> None:
    lines = [line(f"r{i}.s0", workflow_ms=5.0 if i % 2 else 9.0, grader_ms=0.0) for i in range(9)]
    run_dir = write_run(tmp_path / "run", lines, summary=finished(9))

    _, document = read_report(run_dir, slowest=6, lowest=0)

    assert [slow.rollout_id for slow in document.slowest] == [
        "r0.s0",
        "r2.s0",
        "r4.s0",
        "r6.s0",
        "r8.s0",
        "r1.s0",
    ]


def etree_junit(lines: list[ResultLine], path: Path, threshold: float) -> bytes:
    """The JUnit file as xml.etree writes the same tree (what write_junit wrote before)."""
    summary = summarize(lines, pass_threshold=threshold)
    suite = ET.Element("testsuite", name="s\u00fcite & <co>")
    properties = ET.SubElement(suite, "properties")
    values = {
        "pass_threshold": summary.pass_threshold,
        "mean_reward": summary.reward_all.mean,
        "mean_reward_graded": summary.reward_graded.mean,
        "pass_rate": summary.pass_rate,
    }
    for name, value in values.items():
        ET.SubElement(properties, "property", name=name, value="" if value is None else repr(value))
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    total = 0.0
    for item in lines:
        seconds = ((item.workflow_ms or 0.0) + (item.grader_ms or 0.0)) / 1000
        total += seconds
        counts["tests"] += 1
        case = ET.SubElement(
            suite,
            "testcase",
            classname=str(item.row_id),
            name=item.rollout_id,
            time=f"{seconds:.3f}",
        )
        if item.status in ("failure", "timeout", "invalid"):
            message = item.error_message or item.status
            error = ET.SubElement(
                case,
                "error",
                type=item.error_category or item.status,
                message=message.splitlines()[0],
            )
            error.text = message
            counts["errors"] += 1
        elif item.reward is None:
            ET.SubElement(case, "skipped", message=item.status)
            counts["skipped"] += 1
        elif item.reward < threshold:
            message = f"reward {item.reward!r} < {threshold!r}"
            ET.SubElement(case, "failure", type="reward", message=message)
            counts["failures"] += 1
    root = ET.Element("testsuites", name=suite.get("name", ""))
    for element in (root, suite):
        for key, count in counts.items():
            element.set(key, str(count))
        element.set("time", f"{total:.3f}")
    root.append(suite)
    tree = ET.ElementTree(root)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
    return path.read_bytes()


@pytest.mark.parametrize("threshold", [1.0, 0.2])
def test_junit_is_streamed_byte_for_byte_as_xml_etree_writes_it(
    tmp_path: Path, threshold: float
) -> None:
    lines = [
        *mixed_lines(),
        line("d&<\"'>.s0", reward=0.5, row_id="r\u00e9\tx"),
        line("e.s0", status="invalid", error_message='line 3: "prompt" <missing> & \r\n\tend'),
    ]
    summary = summarize(lines, pass_threshold=threshold)

    write_junit(lines, summary, tmp_path / "new.xml", suite_name="s\u00fcite & <co>")

    expected = etree_junit(lines, tmp_path / "old.xml", threshold)
    assert (tmp_path / "new.xml").read_bytes() == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.xml", "old.xml"]


def test_show_finds_and_ranks_in_one_pass_over_the_file(tmp_path: Path) -> None:
    run = open_run(write_run(tmp_path / "run", mixed_lines(), summary=finished(6)))

    assert [found.rollout_id for found in find_rollouts(run, "b")] == ["b.s0", "b.s1"]
    assert [found.rollout_id for found in find_rollouts(run, "c.s1")] == ["c.s1"]
    assert [found.rollout_id for found in worst_rollouts(run, 3)] == ["b.s0", "b.s1", "c.s1"]


# -- compare --------------------------------------------------------------------------------------


def runs_of(tmp_path: Path, rewards_a: list[float], rewards_b: list[float]) -> tuple[RunData, ...]:
    made = []
    for name, rewards in (("a", rewards_a), ("b", rewards_b)):
        lines = [line(f"r{i}.s0", reward=r, row_index=i) for i, r in enumerate(rewards)]
        if name == "b":
            random.Random(5).shuffle(lines)  # finished in another order
        made.append(open_run(write_run(tmp_path / name, lines, summary=finished(len(lines)))))
    return tuple(made)


def test_compare_pairs_runs_written_in_different_orders(tmp_path: Path) -> None:
    rng = random.Random(3)
    rewards_a = [float(rng.random() < 0.7) for _ in range(300)]
    rewards_b = [r if rng.random() < 0.9 else 1.0 - r for r in rewards_a]
    a, b = runs_of(tmp_path, rewards_a, rewards_b)

    streamed = compare_runs(a, b)
    held = compare_runs(load_run(a.run_dir), load_run(b.run_dir))

    assert streamed == held
    assert streamed.paired == streamed.paired_rows == 300
    flipped = [
        f"r{i}.s0" for i, (x, y) in enumerate(zip(rewards_a, rewards_b, strict=True)) if x > y
    ]
    assert streamed.pass_to_fail == flipped  # in A's order, not the order pairs completed


def test_rows_with_several_samples_are_tallied_row_by_row(tmp_path: Path) -> None:
    lines_a = [line(f"r{i // 4}.s{i % 4}", reward=1.0, row_index=i // 4) for i in range(40)]
    lines_b = [
        line(item.rollout_id, reward=0.0 if i < 12 else 1.0, row_index=item.row_index)
        for i, item in enumerate(lines_a)
    ]
    a = open_run(write_run(tmp_path / "a", lines_a, summary=finished(40)))
    b = open_run(write_run(tmp_path / "b", lines_b, summary=finished(40)))

    cmp = compare_runs(a, b)

    assert (cmp.paired, cmp.paired_rows) == (40, 10)
    assert cmp.mean.delta == pytest.approx(-0.3)
    assert cmp.mean.ci is not None
    assert cmp.mean.ci.low <= -0.4  # three rows of ten drop: wide, as rows are few


BINOMIAL_CASES = [(1, 0.3), (6, 0.5), (40, 0.9), (1000, 0.02), (10**6, 0.5), (10**6, 1e-5)]
# What Python 3.12's random.Random(seed).binomialvariate(n, p) drew, four times per case.
PYTHON_3_12_DRAWS = {
    0: [[0, 0, 0, 1], [4, 3, 5, 5], [35, 34, 32, 36], [19, 20, 24, 20],
        [500575, 499888, 500016, 500442], [9, 10, 13, 10]],
    1: [[1, 0, 0, 1], [3, 4, 1, 2], [36, 36, 37, 35], [24, 20, 22, 13],
        [499367, 500404, 499994, 500219], [13, 10, 5, 14]],
    2: [[0, 0, 1, 1], [2, 3, 4, 4], [37, 33, 33, 39], [11, 22, 21, 21],
        [498947, 500553, 500247, 500151], [4, 12, 11, 11]],
    3: [[1, 0, 0, 0], [3, 2, 3, 4], [35, 40, 34, 34], [16, 18, 22, 25],
        [499599, 499813, 500180, 499637], [7, 9, 11, 14]],
    4: [[1, 1, 0, 1], [1, 2, 4, 3], [38, 39, 34, 38], [16, 19, 12, 27],
        [499596, 499852, 499043, 500848], [7, 9, 4, 13]],
}  # fmt: skip


def test_the_binomial_draws_what_python_3_12_draws() -> None:
    for seed, expected in PYTHON_3_12_DRAWS.items():
        drawn = []
        for n, p in BINOMIAL_CASES:
            rng = random.Random(seed)
            drawn.append([compare._binomial(rng, n, p) for _ in range(4)])
        assert drawn == expected
    if sys.version_info >= (3, 12):  # and against the interpreter's own, where it has one
        for seed in range(50):
            for n, p in BINOMIAL_CASES:
                ours, theirs = random.Random(seed), random.Random(seed)
                drawn = [compare._binomial(ours, n, p) for _ in range(4)]
                assert drawn == [theirs.binomialvariate(n, p) for _ in range(4)]  # type: ignore[attr-defined,unused-ignore]


def test_the_binomial_has_its_mean_and_variance() -> None:
    rng = random.Random(1)
    for n, p in [(10, 0.3), (10_000, 0.01), (10**6, 0.4)]:
        draws = [compare._binomial(rng, n, p) for _ in range(4000)]
        mean = sum(draws) / len(draws)
        variance = sum((d - mean) ** 2 for d in draws) / len(draws)
        assert abs(mean - n * p) < 4 * (n * p * (1 - p) / len(draws)) ** 0.5
        assert 0.85 < variance / (n * p * (1 - p)) < 1.15


def test_drawing_kinds_of_rows_resamples_as_drawing_rows() -> None:
    kinds: Counter[tuple[float, float, float]] = Counter(
        {(0.0, 0.0, 1.0): 900, (-1.0, -1.0, 1.0): 70, (1.0, 1.0, 1.0): 30, (-0.5, 0.0, 1.0): 20}
    )
    rows = sorted(kind for kind, count in kinds.items() for _ in range(count))
    by_kind = compare._by_kind(sorted(kinds.items()), len(rows))
    by_row = compare._by_row(rows)
    rng = random.Random(2)
    means = {
        name: [resample(rng)[0] / len(rows) for _ in range(3000)]
        for name, resample in (("kind", by_kind), ("row", by_row))
    }

    for name in means:
        means[name].sort()
    for q in (0.025, 0.5, 0.975):
        at = int(q * 3000)
        assert abs(means["kind"][at] - means["row"][at]) < 0.0035


def test_a_million_rows_of_few_kinds_resample_in_well_under_a_second() -> None:
    kinds: Counter[tuple[float, float, float]] = Counter(
        {(0.0, 0.0, 1.0): 990_000, (-1.0, -1.0, 1.0): 6_000, (1.0, 1.0, 1.0): 4_000}
    )
    started = time.perf_counter()
    rows = compare.Rows(kinds, lambda: pytest.fail("the rows are drawn by kind"))
    reward, passes = compare._bootstrap(rows, resamples=2000, seed=0)
    elapsed = time.perf_counter() - started

    assert elapsed < 5.0  # by kind: a fraction of a second (the bound is a loaded machine's)
    assert reward.low < -0.002 < reward.high < 0.0
    assert (passes.low, passes.high) == (reward.low, reward.high)


# -- the HTML report's limits ---------------------------------------------------------------------


def failing_run(tmp_path: Path, count: int, *, samples: int = 1) -> RunData:
    """``count`` rollouts, every fourth failing its grade and every seventh an error."""
    lines = []
    for i in range(count):
        rollout_id, row = f"r{i // samples}.s{i % samples}", i // samples
        if i % 7 == 3:
            lines.append(
                line(rollout_id, status="failure", row_index=row, sample_index=i % samples)
            )
        else:
            reward = 0.0 if i % 4 == 1 else 1.0
            lines.append(line(rollout_id, reward=reward, row_index=row, sample_index=i % samples))
    random.Random(1).shuffle(lines)
    return open_run(write_run(tmp_path / "run", lines, summary=finished(count)))


def test_a_large_run_lists_its_failing_rollouts_first_and_says_how_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(html_report, "MAX_ROWS", 10)
    run = failing_run(tmp_path, 40)

    data = page_data(render_run_html(run))

    failing = sorted(
        (item.row_index, item.rollout_id) for item in run.lines if item.passed is False
    )
    assert len(failing) > 10
    assert [row["i"] for row in data["rows"]] == [rollout_id for _, rollout_id in failing[:10]]
    assert {key: data["limits"][key] for key in ("rollouts", "listed", "max_rows")} == {
        "rollouts": 40,
        "listed": 10,
        "max_rows": 10,
    }
    charts = data["charts"]
    assert sum(charts["reward"]["counts"]) == 40 - 6  # every graded rollout, listed or not
    assert sum(charts["latency"]["workflow"]) == 40
    assert dict(charts["status"]) == {"success": 34, "failure": 6}


def test_a_run_under_the_limit_lists_every_rollout_in_row_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(html_report, "MAX_ROWS", 40)
    run = failing_run(tmp_path, 40)

    data = page_data(render_run_html(run))

    assert [row["i"] for row in data["rows"]] == [f"r{i}.s0" for i in range(40)]
    assert (data["limits"]["listed"], data["limits"]["rollouts"]) == (40, 40)
    assert data["groups"] == {}


def test_the_groups_of_listed_rows_count_every_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(html_report, "MAX_ROWS", 3)
    run = failing_run(tmp_path, 40, samples=4)

    data = page_data(render_run_html(run))

    listed_rows = {row["r"] for row in data["rows"]}
    assert set(data["groups"]) == {str(row) for row in listed_rows}
    for row in listed_rows:
        samples = [item for item in run.lines if item.row_index == row]
        group = data["groups"][str(row)]
        assert group["n"] == len(samples) == 4
        assert group["e"] == sum(item.status == "failure" for item in samples)
        assert group["p"] == sum(item.passed is True for item in samples)


def test_a_large_comparison_lists_the_flipped_pairs_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(html_report, "MAX_ROWS", 6)
    rewards_a = [1.0] * 30
    rewards_b = [0.0 if i in (4, 17, 25) else 1.0 for i in range(30)]
    a, b = runs_of(tmp_path, rewards_a, rewards_b)

    data = page_data(render_compare_html(a, b))

    listed = ["r0.s0", "r1.s0", "r2.s0", "r4.s0", "r17.s0", "r25.s0"]  # the flips, then by row
    assert [pair["i"] for pair in data["pairs"]] == listed
    assert data["paired"]["kinds"] == {"pp": 27, "pf": 3}
    assert data["paired"]["delta_hist"]["counts"][0] == 3
    assert (data["limits"]["rollouts"], data["limits"]["listed"]) == (30, 6)


def test_the_html_page_of_a_large_run_stays_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [
        line(f"row@{i}.s0", row_index=i, row_id=None, messages=[{"role": "user", "content": "x"}])
        for i in range(5000)
    ]
    run = open_run(write_run(tmp_path / "run", lines, summary=finished(5000)))
    monkeypatch.setattr(html_report, "MAX_ROWS", 500)

    small = len(render_run_html(run).encode())
    monkeypatch.setattr(html_report, "MAX_ROWS", 5000)
    whole = len(render_run_html(run).encode())

    assert small < whole / 4


# -- in a browser ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.mark.browser
def test_the_page_says_it_lists_some_of_the_rollouts(
    browser: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(html_report, "MAX_ROWS", 10)
    page_file = tmp_path / "report.html"
    page_file.write_text(render_run_html(failing_run(tmp_path, 40)), encoding="utf-8")
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    page.goto(page_file.as_uri())

    heading = page.locator("#rollouts h2 .count").inner_text()
    note = page.locator('#rollouts [data-note="listed"]').inner_text()
    footer = page.locator("footer").inner_text()
    page.close()
    assert errors == []
    assert heading == "10 of 40"
    assert note == (
        "This table lists 10 of the 40 rollouts: every one that did not pass first, then the "
        "others in row order (a report lists at most 10). The numbers and charts above count "
        "every rollout; osmosis-run show RUN ROLLOUT_ID shows any of them."
    )
    assert "Rollouts: 10 of 40 listed." in footer
