"""The HTML report's rollout table in a real headless Chromium: prompt and final-answer
columns, failed badges, -n samples grouped under their row, model tokens and cost, the first
difference of a flipped pair, chart labels that do not overlap, and the note on file links.

Needs Debian's chromium (``apt-get install chromium``) and Playwright, as tests/test_html_browser.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from glance_runs import write_a, write_b, write_crowded
from test_html_browser import Opened, chromium, watch

from osmosis_run.reports.html_report import write_compare_html, write_run_html

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def opened(browser: Browser) -> Iterator[Any]:
    pages: list[Opened] = []

    def open_file(path: Path, *, width: int = 1280) -> Opened:
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.set_default_timeout(5_000)
        view = Opened(page)
        url = path.resolve().as_uri()
        watch(page, view, url)
        page.goto(url)
        page.wait_for_selector("html[data-ready]")
        pages.append(view)
        return view

    yield open_file
    for view in pages:
        assert view.errors == []
        assert view.dialogs == []
        assert view.requests == []
        view.page.close()


def cells(view: Opened, column: int) -> dict[str, str]:
    """Rollout id -> the text of its cell in ``column`` (0-based), for the rows shown."""
    found: dict[str, str] = view.page.eval_on_selector_all(
        "table.rollouts tbody tr[data-id]",
        f"rows => Object.fromEntries(rows.map(r => [r.dataset.id, r.cells[{column}].innerText]))",
    )
    return found


def headers(view: Opened) -> list[str]:
    names: list[str] = view.page.eval_on_selector_all(
        "table.rollouts thead th", "ths => ths.map(th => th.innerText.trim())"
    )
    return names


def body_rows(view: Opened) -> list[str]:
    """The main table's rows in order: ``group:KEY`` for a group's head, else the rollout id."""
    found: list[str] = view.page.eval_on_selector_all(
        "table.rollouts tbody tr",
        "rows => rows.map(r => r.dataset.group !== undefined ? 'group:' + r.dataset.group : r.dataset.id)",
    )
    return found


def test_the_table_shows_each_prompt_and_final_answer(opened: Any, tmp_path: Path) -> None:
    view = opened(write_run_html(write_a(tmp_path), tmp_path / "a.html"))

    names = headers(view)
    assert names == [
        "ROLLOUT", "ROW", "SAMPLE", "RESULT", "REWARD", "PROMPT", "FINAL ANSWER", "ERROR",
        "TOKENS", "TRIES", "WORKFLOW", "GRADER",
    ]  # fmt: skip
    prompts, answers = cells(view, names.index("PROMPT")), cells(view, names.index("FINAL ANSWER"))
    assert prompts["q2.s1"] == "Add 3 and 4, then say the sum."
    assert answers["q2.s1"] == "The sum is 7."
    assert (prompts["q1.s1"], answers["q1.s1"]) == ("What is 2+2?", "5")
    assert (prompts["q2.s0"], answers["q2.s0"]) == ("—", "—")
    assert view.page.get_attribute('tr[data-id="q3.s0"] td.glance >> nth=1 >> div', "title") == (
        "x" * 99 + "…"
    )
    assert cells(view, names.index("TOKENS"))["q1.s0"] == "120"


def test_a_success_that_did_not_pass_is_shown_failed(opened: Any, tmp_path: Path) -> None:
    view = opened(write_run_html(write_a(tmp_path), tmp_path / "a.html"))

    result = cells(view, headers(view).index("RESULT"))
    assert result == {
        "q1.s0": "passed",
        "q1.s1": "failed",
        "q2.s0": "failure",
        "q2.s1": "passed",
        "q3.s0": "ungraded",
        "q3.s1": "ungraded",
    }
    assert view.count("table.rollouts .pill.success") == 0  # no green "success" for a reward 0
    assert view.count('tr[data-id="q1.s1"] .pill.failed') == 1
    colour = view.page.eval_on_selector(
        'tr[data-id="q1.s1"] .pill.failed', "e => getComputedStyle(e).color"
    )
    assert colour == "rgb(185, 28, 28)"  # the failure red
    view.page.click('tr[data-id="q1.s1"]')
    view.page.wait_for_selector(".drawer.open")
    assert view.text(".drawer-head .badges").startswith("failed")
    facts = view.text(".drawer .facts")
    assert "result\nfailed\n" in facts
    assert "status\nsuccess\n" in facts


def test_samples_are_grouped_under_their_row(opened: Any, tmp_path: Path) -> None:
    view = opened(write_run_html(write_a(tmp_path), tmp_path / "a.html"))

    assert body_rows(view) == [
        "group:0", "q1.s0", "q1.s1", "group:1", "q2.s0", "q2.s1", "group:2", "q3.s0", "q3.s1",
    ]  # fmt: skip
    heads = view.page.eval_on_selector_all("tr.group-row", "rows => rows.map(r => r.innerText)")
    assert heads[0].split("\n") == ["Row q1 · line 1", "2 samples · 1 passed · 1 failed · mean 0.500", "What is 2+2?"]  # fmt: skip
    assert heads[1].split("\n")[1] == "2 samples · 1 passed · 0 failed · 1 error · mean 0.500"
    # Sorting by reward orders rollouts across rows: no group heads then.
    view.page.click("table.rollouts th:has-text('Reward')")
    assert [row for row in body_rows(view) if row.startswith("group:")] == []
    view.page.click("table.rollouts th:text-is('Row')")
    assert body_rows(view)[0] == "group:0"
    # The toggle turns grouping off.
    view.page.uncheck("input[name=group]")
    assert [row for row in body_rows(view) if row.startswith("group:")] == []
    view.page.check("input[name=group]")
    assert body_rows(view).count("group:1") == 1


def test_a_filter_keeps_the_heads_of_the_rows_it_shows(opened: Any, tmp_path: Path) -> None:
    view = opened(write_run_html(write_a(tmp_path), tmp_path / "a.html"))

    view.page.select_option("select[name=outcome]", "fail")
    assert body_rows(view) == ["group:0", "q1.s1", "group:1", "q2.s0"]


def test_tokens_and_cost_when_the_run_has_them(opened: Any, tmp_path: Path) -> None:
    view = opened(write_run_html(write_a(tmp_path), tmp_path / "a.html"))

    assert view.text("[data-kpi=tokens]").split("\n") == [
        "MODEL TOKENS", "200", "160 prompt · 40 completion · 4 requests by 2 rollouts · 2 retries",
    ]  # fmt: skip
    assert view.text("[data-kpi=cost]").split("\n") == [
        "MODEL COST",
        "$0.0050",
        "$0.0025 per rollout",
    ]
    view.page.click('tr[data-id="q1.s0"]')
    view.page.wait_for_selector(".drawer.open")
    facts = view.text(".drawer .facts")
    assert (
        "model tokens\n120 (100 prompt + 20 completion) · 2 requests · 1 retry · waited 30.0 ms\n"
        in facts
    )
    assert "model cost\n$0.0020" in facts


def test_no_token_figures_without_the_gateway(opened: Any, tmp_path: Path) -> None:
    view = opened(write_run_html(write_a(tmp_path, usage=False), tmp_path / "a.html"))

    assert view.count("[data-kpi=tokens]") == 0
    assert view.count("[data-kpi=cost]") == 0
    assert "TOKENS" not in headers(view)


def test_file_links_say_what_they_are_relative_to(opened: Any, tmp_path: Path) -> None:
    run = write_a(tmp_path)
    inside = opened(write_run_html(run, run / "report.html"))
    assert inside.text("footer .links-note") == (
        "File links are relative to this page: they open while it stays in the run directory."
    )
    beside = opened(write_run_html(run, tmp_path / "reports" / "a.html"))
    assert beside.text("footer .links-note") == (
        "File links are relative to this page (the run directory is ../run-a from here): they "
        "open while the page and the run directory stay where they are."
    )
    beside.page.click('tr[data-id="q1.s0"]')
    beside.page.wait_for_selector(".drawer.open")
    assert beside.text(".drawer .links-note") == beside.text("footer .links-note")
    assert (
        beside.page.get_attribute(".drawer .files a", "href")
        == "../run-a/rollouts/q1.s0/result.json"
    )


def test_a_flipped_pair_highlights_its_first_difference(opened: Any, tmp_path: Path) -> None:
    a, b = write_a(tmp_path), write_b(tmp_path)
    view = opened(write_compare_html(a, b, tmp_path / "cmp.html"))

    view.page.click("[data-flip=fp] tbody tr")
    view.page.wait_for_selector(".drawer.open")
    marked = view.page.eval_on_selector_all(
        ".drawer .side .msg.first-diff",
        "nodes => nodes.map(n => [n.closest('.side').dataset.side, n.dataset.role, n.innerText])",
    )
    assert [(side, role) for side, role, _ in marked] == [("A", "assistant"), ("B", "assistant")]
    assert marked[0][2].split("\n")[:3] == ["FIRST DIFFERENCE · MESSAGE 3", "ASSISTANT", "5"]
    assert marked[1][2].split("\n")[2] == "4"
    assert view.count(".drawer .msg.first-diff") == 2
    # The outcome pills of the pair: failed in A, passed in B.
    assert view.text("[data-flip=fp] tbody tr").split("\t")[1:4:2] == ["failed", "passed"]


def overlaps(view: Opened, selector: str) -> list[tuple[str, str]]:
    """Pairs of text elements in the SVG at ``selector`` whose boxes intersect."""
    found: list[tuple[str, str]] = view.page.eval_on_selector(
        selector,
        """svg => {
          const boxes = [...svg.querySelectorAll("text")].map(t => [t.textContent, t.getBoundingClientRect()]);
          const out = [];
          for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
            const [s, a] = boxes[i], [u, b] = boxes[j];
            if (a.width && b.width && a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5) out.push([s, u]);
          }
          return out;
        }""",
    )
    return found


@pytest.mark.parametrize("width", [1280, 420])
def test_chart_labels_do_not_overlap(opened: Any, tmp_path: Path, width: int) -> None:
    view = opened(write_run_html(write_crowded(tmp_path), tmp_path / "c.html"), width=width)

    for chart in ("svg[aria-label='latency distribution']", "svg[aria-label='pass@k curve']"):
        assert view.count(chart) == 1
        assert overlaps(view, chart) == [], chart
    labels = view.page.eval_on_selector_all(
        "svg[aria-label='latency distribution'] text.marker-label",
        "ts => ts.map(t => t.textContent)",
    )
    assert labels == ["p50", "p90", "p99"] * 2  # all three markers still labelled, per stage
    ks = view.page.eval_on_selector_all(
        "svg[aria-label='pass@k curve'] text", "ts => ts.map(t => t.textContent)"
    )
    assert "k=1" in ks
    assert "k=256" in ks
