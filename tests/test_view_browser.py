"""``osmosis-run view`` in a real headless Chromium: the runs list, a run growing while a real
eval writes it, filters, sort, search and deep links reloaded in a new page, the compare view
against ``compare --json``, payloads in transcripts inert, traversal refused.

Needs Debian's chromium and Playwright, as the HTML report's browser tests do (they skip,
saying why, when either is missing).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import subprocess_env
from test_html_browser import PAYLOAD_ID, Opened, chromium
from test_html_report import ID_PAYLOAD, PAYLOAD, Runs, make_runs, shown_as_compare_prints
from test_view import GatedEval
from viewing import Viewing, start_view

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, Request

pytestmark = pytest.mark.browser

Open = Callable[..., Opened]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield make_runs(tmp_path_factory.mktemp("view-browser"), monkeypatch)


@pytest.fixture(scope="module")
def view(runs: Runs) -> Iterator[Viewing]:
    with start_view([str(runs.root)]) as running:
        yield running
    assert "Traceback" not in running.stderr, running.stderr


@pytest.fixture(scope="module")
def browser(view: Viewing) -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def opened(browser: Browser) -> Iterator[Open]:
    pages: list[Opened] = []

    def open_url(url: str, *, bypass_csp: bool = False) -> Opened:
        page = browser.new_page(viewport={"width": 1280, "height": 1000}, bypass_csp=bypass_csp)
        page.set_default_timeout(10_000)
        seen = Opened(page)
        origin = url.split("/", 3)[:3]

        def console(message: ConsoleMessage) -> None:
            if message.type == "error":
                seen.errors.append(message.text)

        def dialog(shown: Dialog) -> None:
            seen.dialogs.append(shown.message)
            shown.dismiss()

        def request(sent: Request) -> None:
            if sent.url.split("/", 3)[:3] != origin:
                seen.requests.append(sent.url)

        page.on("pageerror", lambda error: seen.errors.append(str(error)))
        page.on("console", console)
        page.on("dialog", dialog)
        page.on("request", request)
        page.goto(url)
        page.wait_for_selector("html[data-ready]")
        pages.append(seen)
        return seen

    yield open_url
    for seen in pages:
        assert seen.errors == []
        assert seen.dialogs == []
        assert seen.requests == []  # nothing but the view itself
        assert seen.page.evaluate("window.__pwned") is None
        seen.page.close()


def wait_until(page: Page, expression: str, timeout: float = 10.0) -> None:
    """Poll ``expression`` in the page until it is true (``wait_for_function`` evaluates a
    string, which the view's Content Security Policy forbids)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(f"() => Boolean({expression})"):
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout} s: {expression}")
        time.sleep(0.05)


def ids_shown(page: Page) -> list[str]:
    return page.eval_on_selector_all(  # type: ignore[no-any-return]
        "table[data-table=rollouts] tbody tr[data-id]", "rows => rows.map(r => r.dataset.id)"
    )


def test_the_runs_list(view: Viewing, opened: Open, runs: Runs) -> None:
    seen = opened(view.url)
    rows = seen.page.query_selector_all("table[data-table=runs] tbody tr[data-run]")
    assert [row.get_attribute("data-run") for row in rows] == ["run-a", "run-b"]
    assert seen.text("tr[data-run=run-a] [data-state]") == "finished"
    lines = len((runs.a / "results.jsonl").read_bytes().splitlines())
    assert seen.text("tr[data-run=run-a] [data-field=rollouts]") == f"{lines} of {lines}"
    seen.page.click("tr[data-run=run-b] a")
    seen.page.wait_for_url("**/runs/run-b")
    seen.page.wait_for_selector("table[data-table=rollouts] tbody tr[data-id]")
    assert seen.page.title() == "run-b · osmosis-run view"


@pytest.mark.slow
def test_filters_sort_and_a_rollout_have_urls_that_reload_the_same(
    view: Viewing, opened: Open
) -> None:
    seen = opened(view.base + "/runs/run-a")
    page = seen.page
    page.wait_for_selector("table[data-table=rollouts] tbody tr[data-id]")
    everything = ids_shown(page)
    assert len(everything) == 14
    page.select_option("select[name=status]", "failure")
    wait_until(
        page,
        "document.querySelectorAll('table[data-table=rollouts] tbody tr[data-id]').length === 2",
    )
    assert sorted(ids_shown(page)) == ["boom.s0", "boom.s1"]
    assert "status=failure" in page.url
    page.select_option("select[name=status]", "")
    page.click("th[data-col=reward]")  # the reward column, highest first
    wait_until(page, "location.search.includes('sort=reward')")
    wait_until(
        page,
        "document.querySelector('th[data-col=reward]').getAttribute('aria-sort') === 'descending'",
    )
    by_reward = ids_shown(page)
    page.fill("input[name=rmin]", "1")
    wait_until(page, "location.search.includes('rmin=1')")
    wait_until(
        page,
        "document.querySelectorAll('table[data-table=rollouts] tbody tr[data-id]').length < 14",
    )
    page.click("table[data-table=rollouts] tbody tr[data-id='flip.s0']")
    page.wait_for_selector(".drawer.open .drawer-body[data-loaded='flip.s0']")
    url = page.url
    assert "#rollout=flip.s0" in url
    shown = ids_shown(page)
    # The same URL in a new page: the same filters, order and rollout.
    again = opened(url).page
    again.wait_for_selector(".drawer.open .drawer-body[data-loaded='flip.s0']")
    assert again.input_value("input[name=rmin]") == "1"
    assert ids_shown(again) == shown
    assert again.get_attribute("th[data-col=reward]", "aria-sort") == "descending"
    assert again.inner_text(".drawer.open .title") == "flip.s0"
    assert "What is 6 * 7?" in again.inner_text(".drawer.open .transcript")
    assert by_reward[0] in {"flip.s0", "easy.s0", "easy.s1", "long.s0", "long.s1", "flip.s1"}


@pytest.mark.slow
def test_search_streams_hits_and_highlights_them(view: Viewing, opened: Open) -> None:
    seen = opened(view.base + "/runs/run-a")
    page = seen.page
    page.fill("input[name=q]", "6 * 7")
    page.press("input[name=q]", "Enter")
    page.wait_for_selector(".hits-info[data-state=done]")
    hits = page.eval_on_selector_all(".hits li", "items => items.map(i => i.dataset.id)")
    assert sorted(hits) == ["flip.s0", "flip.s1"]
    assert page.inner_text(".hits li mark") == "6 * 7"
    assert "q=6+*+7" in page.url or "q=6%20*%207" in page.url
    page.click(".hits li[data-id='flip.s1']")
    page.wait_for_selector(".drawer.open .drawer-body[data-loaded='flip.s1'] mark")
    assert page.inner_text(".drawer.open .transcript mark") == "6 * 7"
    # The search's URL, in a new page, searches again.
    again = opened(page.url.split("#")[0]).page
    again.wait_for_selector(".hits-info[data-state=done]")
    assert (
        sorted(again.eval_on_selector_all(".hits li", "items => items.map(i => i.dataset.id)"))
        == hits
    )


@pytest.mark.slow
def test_the_compare_view_shows_compare_json_s_numbers(
    view: Viewing, opened: Open, runs: Runs
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "osmosis_run", "compare", str(runs.a), str(runs.b), "--json"],
        env=subprocess_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    document = json.loads(done.stdout)
    # Picked on the run page: the run shown is B, the one picked the baseline A.
    seen = opened(view.base + "/runs/run-b")
    seen.page.select_option("select[name=baseline]", "run-a")
    seen.page.wait_for_url("**/compare?a=run-a&b=run-b")
    seen.page.wait_for_selector("[data-section=comparison]")
    for metric, spec in (("mean", ".3f"), ("pass_rate", ".1%")):
        card = f"[data-section=comparison] [data-metric={metric}]"
        expected = shown_as_compare_prints(document[metric], spec)
        assert seen.text(f"{card} .from") == expected["a"]
        assert seen.text(f"{card} .to") == expected["b"]
        assert (
            seen.text(f"{card} .detail") == f"B - A {expected['delta']} · 95% CI {expected['ci']}"
        )
    # Regressions only: the pairs that went from pass to fail, in the URL too.
    seen.page.select_option("select[name=change]", "pf")
    wait_until(seen.page, "location.search.includes('change=pf')")
    again = opened(seen.page.url)
    again.page.wait_for_selector("[data-section=comparison]")
    assert again.page.input_value("select[name=change]") == "pf"
    flipped = set(document["pass_to_fail"])
    shown = again.page.eval_on_selector_all(
        "section#rollouts tbody tr[data-id]", "rows => rows.map(r => r.dataset.id)"
    )
    assert set(shown) == flipped


@pytest.mark.slow
def test_payloads_in_a_run_do_nothing(view: Viewing, opened: Open) -> None:
    for bypass in (False, True):  # and without the page's CSP: its own code keeps them inert
        seen = opened(view.base + "/runs/run-a", bypass_csp=bypass)
        page = seen.page
        page.click("table[data-table=rollouts] tbody tr[data-id='xss.s0']")
        page.wait_for_selector(".drawer.open .drawer-body[data-loaded='xss.s0']")
        assert PAYLOAD in page.inner_text(".drawer.open .transcript")
        page.keyboard.press("Escape")
        page.fill("input[name=q]", "onerror")
        page.press("input[name=q]", "Enter")
        page.wait_for_selector(".hits-info[data-state=done]")
        hits = page.eval_on_selector_all(".hits li", "items => items.map(i => i.dataset.id)")
        assert f"{PAYLOAD_ID}.s0" in hits
        page.click(f".hits li[data-id='{PAYLOAD_ID}.s0']")
        page.wait_for_selector(f".drawer.open .drawer-body[data-loaded='{PAYLOAD_ID}.s0']")
        assert page.inner_text(".drawer.open .title") == f"{PAYLOAD_ID}.s0"
        assert ID_PAYLOAD in page.inner_text(".drawer.open .drawer-body")
        page.wait_for_timeout(300)
        assert page.evaluate("window.__pwned") is None
        assert page.title() == "run-a · osmosis-run view"


def test_traversal_and_symlinks_are_refused(view: Viewing, browser: Browser, runs: Runs) -> None:
    (runs.root / "secret.txt").write_text("not for the view")
    link = runs.a / "rollouts/easy.s0/leak.txt"
    if not link.is_symlink():
        link.symlink_to(runs.root / "secret.txt")
    page = browser.new_page()
    try:
        for path in (
            "/runs/run-a/files/..%2F..%2Fsecret.txt",
            "/runs/run-a/files/rollouts/easy.s0/leak.txt",
        ):
            answer = page.goto(view.base + path)
            assert answer is not None
            assert answer.status == 404
            assert "not for the view" not in page.content()
    finally:
        page.close()


@pytest.mark.slow
def test_a_rollout_appears_while_a_real_eval_writes_the_run(tmp_path: Path, opened: Open) -> None:
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    with start_view([str(runs_dir)]) as running:
        evaluating = GatedEval(tmp_path, runs_dir / "live")
        try:
            deadline = time.monotonic() + 30
            while not evaluating.results.exists():
                assert time.monotonic() < deadline, "the run never made its results file"
                time.sleep(0.05)
            seen = opened(running.base + "/runs/live")
            page = seen.page
            assert page.inner_text("[data-state]") == "running"
            for released in (2, 6, 13):
                evaluating.release(released)
                evaluating.wait_written(released)
                # Within 2 s of its results line, a rollout is in the table and the counts.
                count = "document.querySelector('#rollouts .count').textContent.replace(/,/g, '')"
                wait_until(page, f"{count} === '{released}'", 2)
            evaluating.finish()
            wait_until(page, "document.querySelector('#rollouts .count').textContent === '40'", 3)
            wait_until(page, "document.querySelector('[data-state]').textContent === 'finished'", 3)
        finally:
            evaluating.kill()
