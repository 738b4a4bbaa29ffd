"""The HTML report in a real headless Chromium: charts, table, filters, transcripts, no XSS.

Needs Debian's chromium at /usr/bin/chromium (the one command: ``apt-get install chromium``)
and Playwright for Python; the tests skip when either is missing, and the skip reason says
which and how to install it. Playwright never downloads a browser here: it drives the
system one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pytest
from test_html_report import (
    ID_PAYLOAD,
    PAYLOAD,
    Runs,
    clustered_runs,
    make_runs,
    shown_as_compare_prints,
)

from osmosis_run.reports.html_report import write_compare_html, write_run_html
from osmosis_run.store.rundata import load_run

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, Request

pytestmark = pytest.mark.browser
DASH = "\u2013"  # the pager writes ranges with an en dash

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
NO_CHROMIUM = (
    f"no Chromium at {CHROMIUM}: the browser tests need Debian's chromium package; "
    "install it with: apt-get install chromium"
)
NO_PLAYWRIGHT = "playwright is not installed (pip install playwright)"


PASSING = ["flip.s0", "easy.s0", "easy.s1", "long.s0", "long.s1"]
PAYLOAD_ID = "_img_src_x_onerror_window.__pwned_5_~b5799d6d7fd0"
FIVE_QUARTERS = ["flip.s1", "xss.s0", "xss.s1", f"{PAYLOAD_ID}.s0", f"{PAYLOAD_ID}.s1"]
ONERROR = ["xss.s0", "xss.s1", f"{PAYLOAD_ID}.s0", f"{PAYLOAD_ID}.s1", "boom.s0", "boom.s1"]


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's headless Chromium driven by Playwright, closed on the way out; the test skips,
    saying what to install, when either is missing. Every browser test launches it so."""
    if not CHROMIUM.exists():
        pytest.skip(NO_CHROMIUM)
    if importlib.util.find_spec("playwright") is None:
        pytest.skip(NO_PLAYWRIGHT)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def browser(runs: Runs) -> Iterator[Browser]:
    # Depends on `runs` so that the runs are made first: the Playwright sync API keeps an event
    # loop running in this thread, and the eval command's asyncio.run cannot start inside one.
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield make_runs(tmp_path_factory.mktemp("html-browser"), monkeypatch)


@dataclass
class Opened:
    """A report open in a page, and what the page did that it should not have."""

    page: Page
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def count(self, selector: str) -> int:
        return len(self.page.query_selector_all(selector))

    def text(self, selector: str) -> str:
        return self.page.inner_text(selector)


@pytest.fixture
def opened(browser: Browser) -> Iterator[Any]:
    pages: list[Opened] = []

    def open_file(path: Path, fragment: str = "", *, bypass_csp: bool = False) -> Opened:
        # bypass_csp: check that the page's own code keeps payloads inert, with no help
        # from its Content Security Policy.
        page = browser.new_page(viewport={"width": 1280, "height": 900}, bypass_csp=bypass_csp)
        page.set_default_timeout(5_000)
        view = Opened(page)
        url = path.resolve().as_uri()
        watch(page, view, url)
        page.goto(url + fragment)
        page.wait_for_selector("html[data-ready]")
        pages.append(view)
        return view

    yield open_file
    for view in pages:
        assert view.errors == []
        assert view.dialogs == []
        assert view.requests == []
        view.page.close()


def watch(page: Page, view: Opened, url: str) -> None:
    """Record page errors, console errors, dialogs and requests for anything but ``url``."""

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            view.errors.append(message.text)

    def on_dialog(dialog: Dialog) -> None:
        view.dialogs.append(dialog.message)
        dialog.dismiss()

    def on_request(request: Request) -> None:
        if request.url != url:
            view.requests.append(request.url)

    page.on("pageerror", lambda error: view.errors.append(str(error)))
    page.on("console", on_console)
    page.on("dialog", on_dialog)
    page.on("request", on_request)


def rows(view: Opened) -> list[str]:
    """The rollout ids the main table shows."""
    ids: list[str] = view.page.eval_on_selector_all(
        "table.rollouts tbody tr[data-id]", "rows => rows.map(r => r.dataset.id)"
    )
    return ids


def shows(view: Opened, expected: list[str]) -> list[str]:
    """Wait (filters are debounced) until the main table shows ``expected``; return what it shows."""
    for _ in range(60):
        if rows(view) == expected:
            break
        view.page.wait_for_timeout(50)
    return rows(view)


def pwned(page: Page) -> Any:
    return page.evaluate("[window.__pwned, document.title]")


def file_of(href: str, page_path: Path) -> Path:
    """The local file a relative link in a page at ``page_path`` points to."""
    url = urlparse(page_path.resolve().as_uri())._replace(fragment="")
    target = urlparse(url.geturl().rsplit("/", 1)[0] + "/" + href)
    return Path(unquote(target.path)).resolve()


@pytest.fixture(scope="module")
def report(runs: Runs) -> Path:
    return write_run_html(runs.a, runs.a / "report.html")


def open_rollout(view: Opened, rollout_id: str) -> None:
    view.page.fill("input[name=q]", "")
    view.page.select_option("select[name=status]", "")
    view.page.click(f'table.rollouts tbody tr[data-id="{rollout_id}"]')
    view.page.wait_for_selector(".drawer.open")


# -- the run page --------------------------------------------------------------------------------


def test_charts_render_one_shape_per_bin_and_point(opened: Any, report: Path) -> None:
    view = opened(report)
    summary = load_run(report.parent).summary

    assert view.count("svg.reward-hist rect.bar") == 10
    heights = view.page.eval_on_selector_all(
        "svg.reward-hist rect.bar", "bars => bars.map(b => Number(b.getAttribute('data-count')))"
    )
    assert heights == [0, 0, 5, 0, 0, 0, 0, 0, 0, 5]
    assert view.count("circle.pt.pass-at-k") == len(summary.pass_at_k) == 2
    assert view.count("circle.pt.pass-hat-k") == 2
    assert view.count("svg[aria-label='counts by status'] rect.bar") == 3
    assert view.count("svg[aria-label='counts by error category'] rect.bar") == 2
    bins = view.count("svg[aria-label='latency distribution'] rect.bar.lat-workflow")
    assert bins == view.count("svg[aria-label='latency distribution'] rect.bar.lat-grader") > 0


def test_the_summary_numbers_are_shown(opened: Any, report: Path) -> None:
    view = opened(report)
    summary = load_run(report.parent).summary

    kpis = view.text(".kpis").upper()

    assert "ROLLOUTS\n14\n" in kpis
    assert summary.pass_rate == 5 / 14  # errors count as failures
    assert "PASS RATE\n35.7%\n" in kpis
    assert "ERRORS\n4\n" in kpis


def test_the_table_pages_and_counts(opened: Any, report: Path) -> None:
    view = opened(report)

    assert view.count("table.rollouts tbody tr[data-id]") == 14
    assert view.text(".pager .info") == f"1{DASH}14 of 14"
    view.page.select_option(".pager select", "25")
    assert view.count("table.rollouts tbody tr[data-id]") == 14


def test_filter_by_status_category_outcome_and_reward(opened: Any, report: Path) -> None:
    view = opened(report)
    page = view.page

    page.select_option("select[name=status]", "failure")
    assert view.count("table.rollouts tbody tr[data-id]") == 2
    assert view.text(".pager .info") == f"1{DASH}2 of 2 (filtered from 14)"
    page.select_option("select[name=status]", "")
    page.select_option("select[name=category]", "invalid_row")
    assert rows(view) == ["bad.s0", "bad.s1"]
    page.select_option("select[name=category]", "")
    page.select_option("select[name=outcome]", "pass")
    assert view.count("table.rollouts tbody tr[data-id]") == 5
    page.select_option("select[name=outcome]", "")
    page.fill("input[name=rmin]", "0.2")
    page.fill("input[name=rmax]", "0.3")
    assert shows(view, FIVE_QUARTERS) == FIVE_QUARTERS


def test_clicking_charts_filters_the_table(opened: Any, report: Path) -> None:
    view = opened(report)

    view.page.click("svg[aria-label='counts by status'] g[data-name=invalid]")
    assert view.count("table.rollouts tbody tr[data-id]") == 2
    view.page.click("svg.reward-hist rect.bar[data-bin='9']")
    assert shows(view, PASSING) == PASSING


def test_search_covers_ids_errors_and_transcripts(opened: Any, report: Path) -> None:
    view = opened(report)

    view.page.fill("input[name=q]", "be verbose")
    assert shows(view, ["long.s0", "long.s1"]) == ["long.s0", "long.s1"]
    view.page.fill("input[name=q]", "cannot answer")
    assert shows(view, ["boom.s0", "boom.s1"]) == ["boom.s0", "boom.s1"]


def test_sorting_by_reward(opened: Any, report: Path) -> None:
    view = opened(report)

    view.page.click("table.rollouts th:has-text('Reward')")  # highest first
    first = rows(view)
    view.page.click("table.rollouts th:has-text('Reward')")
    second = rows(view)

    assert first[:3] == ["flip.s0", "easy.s0", "easy.s1"]
    assert second[:3] == ["flip.s1", "xss.s0", "xss.s1"]
    assert first[-1] == second[-1] == "bad.s1"  # no reward: last either way


def test_clicking_a_row_shows_its_transcript(opened: Any, report: Path) -> None:
    view = opened(report)

    open_rollout(view, "easy.s0")

    drawer = ".drawer.open"
    roles = view.page.eval_on_selector_all(f"{drawer} .msg", "ms => ms.map(m => m.dataset.role)")
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert view.text(f"{drawer} .toolcall .tc-name") == "echo"
    assert '"text": "Say hi"' in view.text(f"{drawer} .toolcall pre")
    assert "tool result · echo · call_1" in view.text(f"{drawer} .msg.tool .role")
    assert view.text(f"{drawer} .drawer-head .title") == "easy.s0"
    assert "1.000" in view.text(f"{drawer} .facts")
    assert view.page.evaluate("location.hash") == "#rollout=easy.s0"
    view.page.keyboard.press("Escape")
    assert view.count(".drawer.open") == 0


def test_a_failure_shows_its_error_and_traceback(opened: Any, report: Path) -> None:
    view = opened(report)

    open_rollout(view, "boom.s0")

    error = view.text(".drawer.open .error-box")
    assert "validation_error" in error
    assert f"ValueError: cannot answer: {PAYLOAD}" in error
    assert "Traceback (most recent call last)" in error
    assert "this is the prompt it was given" in view.text(".drawer.open .note")


def test_artifact_links_point_at_the_files(opened: Any, report: Path, runs: Runs) -> None:
    beside = write_run_html(runs.a, runs.root / "beside.html")
    for path in (report, beside):
        view = opened(path)
        open_rollout(view, "xss.s0")
        hrefs = view.page.eval_on_selector_all(
            ".drawer.open .files a", "links => links.map(a => a.getAttribute('href'))"
        )
        assert len(hrefs) == 5  # result.json, trajectory.json and three artifacts
        for href in hrefs:
            assert file_of(href, path).is_file(), href


def test_the_hash_opens_a_rollout(opened: Any, report: Path) -> None:
    view = opened(report, "#rollout=long.s1")

    assert view.text(".drawer.open .drawer-head .title") == "long.s1"
    assert "characters not shown" in view.text(".drawer.open .transcript")


@pytest.mark.parametrize("bypass_csp", [True, False], ids=["page-code-alone", "with-csp"])
@pytest.mark.slow
def test_payloads_from_the_dataset_stay_text(opened: Any, report: Path, bypass_csp: bool) -> None:
    view = opened(report, bypass_csp=bypass_csp)
    page = view.page
    title = page.title()

    for rollout in ("xss.s0", "boom.s0"):
        open_rollout(view, rollout)
        page.wait_for_timeout(200)
        assert PAYLOAD in page.inner_text(".drawer.open")
        page.keyboard.press("Escape")
    page.fill("input[name=q]", "onerror")
    assert len(shows(view, ONERROR)) == len(ONERROR)
    assert ID_PAYLOAD in page.inner_text("table.rollouts")

    assert pwned(page) == [None, title]
    assert title == "run-a · osmosis-run report"
    assert page.evaluate("document.querySelectorAll('img, iframe, object, embed').length") == 0
    assert page.evaluate("document.scripts.length") == 2


# -- the comparison page -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def comparison(runs: Runs) -> Path:
    return write_compare_html(runs.a, runs.b, runs.root / "compare.html")


def test_compare_shows_the_flips_side_by_side(opened: Any, comparison: Path) -> None:
    view = opened(comparison)

    assert view.text("[data-flip=pf] .flip-title .n") == "(1)"
    assert view.text("[data-flip=fp] .flip-title .n") == "(1)"
    assert view.count("[data-flip=pf] tbody tr") == 1
    assert view.count("table[data-table=pairs] tbody tr") == 14
    view.page.click("[data-flip=pf] tbody tr")
    view.page.wait_for_selector(".drawer.open")

    sides = view.page.query_selector_all(".drawer.open .side")
    assert [s.get_attribute("data-side") for s in sides] == ["A", "B"]
    assert "Answer: 42" in sides[0].inner_text()
    assert "Answer: 41" in sides[1].inner_text()
    assert view.count(".drawer.open .side .transcript") == 2


def test_compare_matrix_and_filters(opened: Any, comparison: Path) -> None:
    view = opened(comparison)

    cells = view.page.eval_on_selector_all(
        "svg[aria-label='outcome transitions'] rect.cell",
        "cells => cells.map(c => Number(c.dataset.count))",
    )
    assert sum(cells) == 14
    view.page.select_option("select[name=change]", "fp")
    shown = view.page.eval_on_selector_all(
        "table[data-table=pairs] tbody tr", "rows => rows.map(r => r.dataset.id)"
    )
    assert shown == ["flip.s1"]
    assert pwned(view.page)[0] is None


@pytest.mark.slow
def test_a_big_run_opens(opened: Any, runs: Runs, tmp_path: Path) -> None:
    big = runs.root / "big"
    if not big.exists():
        shutil.copytree(runs.a, big)
        lines = (big / "results.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
        flip = next(line for line in lines if '"flip.s1"' in line)
        with (big / "results.jsonl").open("a", encoding="utf-8") as f:
            for i in range(3_000):
                f.write(flip.replace('"flip.s1"', f'"extra-{i}.s1"'))
    view = opened(write_run_html(big, tmp_path / "big.html"))

    assert view.text(".pager .info") == f"1{DASH}50 of 3,014"
    assert view.count("table.rollouts tbody tr[data-id]") == 50
    view.page.click("button[aria-label='next page']")
    assert view.text(".pager .info") == f"51{DASH}100 of 3,014"


def test_compare_shows_what_compare_json_reports(opened: Any, cli: Any, tmp_path: Path) -> None:
    clustered_runs(tmp_path)
    result = cli("compare", "a", "b", "--json", "--html", "diff.html")
    assert result.exit_code == 0
    document = json.loads(result.stdout)

    view = opened(tmp_path / "diff.html")

    for metric, spec in (("mean", ".3f"), ("pass_rate", ".1%")):
        card = f"[data-section=comparison] [data-metric={metric}]"
        expected = shown_as_compare_prints(document[metric], spec)
        assert view.text(f"{card} .from") == expected["a"]
        assert view.text(f"{card} .to") == expected["b"]
        assert view.text(f"{card} .detail") == (
            f"B - A {expected['delta']} · 95% CI {expected['ci']}"
        )
    paired = "[data-section=comparison] [data-metric=paired]"
    assert view.text(f"{paired} .value") == str(document["paired"])
    assert view.text(f"{paired} .detail") == (
        f"over {document['paired_rows']} rows · {document['only_in_a']} only in A · "
        f"{document['only_in_b']} only in B · {document['unscored']} unscored"
    )
    kpis = view.page.eval_on_selector_all(
        "[data-section=comparison] .kpi:not([data-metric]) .value",
        "cards => cards.map(c => c.innerText)",
    )
    flips_and_errors = [
        len(document[key]) for key in ("pass_to_fail", "fail_to_pass", "new_errors")
    ]
    assert kpis[:3] == [str(n) for n in flips_and_errors]
