"""Make the README's pictures from the bundled calculator example.

    python docs/make_screenshots.py

Runs ``osmosis-run eval --config configs/calculator.toml --samples 4`` into a temporary
directory, writes its HTML report, and photographs it in headless Chromium (/usr/bin/chromium,
driven by Playwright; no browser is downloaded): the top of the report (docs/report.png), and
the report with the transcript of a rollout the agent got wrong open
(docs/report-transcript.png). Then runs the example again with the agent rounding to whole
numbers, serves both runs with ``osmosis-run view``, and photographs the live view of the
first with a search (docs/view.png) and the comparison of the two (docs/view-compare.png).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from osmosis_run.reports.html_report import write_run_html

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--hide-scrollbars",
]


def make_run(folder: Path) -> Path:
    """Run the calculator example with four samples per row into ``folder/calculator``."""
    run_dir = folder / "calculator"
    config = ROOT / "configs" / "calculator.toml"
    command = [sys.executable, "-m", "osmosis_run", "eval", "--config", str(config)]
    command += ["--samples", "4", "--out", str(run_dir), "--fresh"]
    subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
    return run_dir


def wrong_answer(run_dir: Path) -> str:
    """A rollout that used its tool and still got reward 0 (a "then" prompt, if there is one)."""
    with (run_dir / "results.jsonl").open(encoding="utf-8") as f:
        wrong = [line for line in map(json.loads, f) if line["reward"] == 0.0 and line["messages"]]
    if not wrong:
        raise SystemExit("no wrong answer in the run")
    then = [line for line in wrong if " then " in line["messages"][-4]["content"]]
    return str(min(then or wrong, key=lambda line: line["rollout_id"])["rollout_id"])


def photograph(report: Path, rollout: str) -> None:
    """Save the top of the report, then the report with ``rollout``'s transcript open."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1380}, device_scale_factor=1)
        page.goto(report.as_uri())
        page.wait_for_selector("html[data-ready]")
        page.screenshot(path=str(DOCS / "report.png"))
        page.set_viewport_size({"width": 1440, "height": 900})
        page.goto(f"{report.as_uri()}#rollout={rollout}")
        page.wait_for_selector(".drawer.open")
        page.evaluate("document.querySelector('tr.current').scrollIntoView({block: 'center'})")
        page.wait_for_timeout(400)  # the drawer slides in
        page.screenshot(path=str(DOCS / "report-transcript.png"))
        browser.close()


def make_rounding_run(folder: Path) -> Path:
    """The calculator example again, its agent rounding to whole numbers: some answers flip."""
    run_dir = folder / "calculator-rounded"
    config = folder / "rounded.toml"
    source = (ROOT / "configs" / "calculator.toml").read_text(encoding="utf-8")
    dataset = (ROOT / "datasets" / "calculator.jsonl").as_posix()
    source = source.replace('"../datasets/calculator.jsonl"', f'"{dataset}"')
    config.write_text(source.replace("precision = 6", "precision = 0"), encoding="utf-8")
    command = [sys.executable, "-m", "osmosis_run", "eval", "--config", str(config)]
    command += ["--samples", "4", "--out", str(run_dir), "--fresh"]
    subprocess.run(command, check=False, stderr=subprocess.DEVNULL)  # its gates fail: expected
    return run_dir


def photograph_view(folder: Path) -> None:
    """The live view of the first run (a search open) and the comparison of the two."""
    command = [sys.executable, "-m", "osmosis_run", "view", str(folder), "--port", "0"]
    view = subprocess.Popen(
        [*command, "--no-open"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert view.stdout is not None
        url = view.stdout.readline().decode().strip().rstrip("/")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 1500}, device_scale_factor=1)
            page.goto(f"{url}/runs/calculator?q=then&status=success")
            page.wait_for_selector(".hits-info[data-state=done]")
            page.wait_for_timeout(300)
            page.screenshot(path=str(DOCS / "view.png"))
            page.goto(f"{url}/compare?a=calculator&b=calculator-rounded&change=pf")
            page.wait_for_selector("[data-section=comparison]")
            page.wait_for_timeout(300)
            page.screenshot(path=str(DOCS / "view-compare.png"))
            browser.close()
    finally:
        view.send_signal(signal.SIGINT)
        view.wait(timeout=30)


def main() -> None:
    """Make the screenshots."""
    with tempfile.TemporaryDirectory() as folder:
        run_dir = make_run(Path(folder))
        report = write_run_html(run_dir, run_dir / "report.html")
        photograph(report, wrong_answer(run_dir))
        make_rounding_run(Path(folder))
        photograph_view(Path(folder))
    pictures = ("report.png", "report-transcript.png", "view.png", "view-compare.png")
    sys.stderr.write(f"wrote {', '.join(str(DOCS / name) for name in pictures)}\n")


if __name__ == "__main__":
    main()
