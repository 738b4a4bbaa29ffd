"""Make docs/report.png and docs/report-transcript.png from the bundled calculator example.

    python docs/make_screenshots.py

Runs ``osmosis-run eval --config configs/calculator.toml --samples 4`` into a temporary
directory, writes its HTML report, and photographs it in headless Chromium (/usr/bin/chromium,
driven by Playwright; no browser is downloaded): the top of the report, and the report with the
transcript of a rollout the agent got wrong open.
"""

from __future__ import annotations

import json
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


def main() -> None:
    """Make both screenshots."""
    with tempfile.TemporaryDirectory() as folder:
        run_dir = make_run(Path(folder))
        report = write_run_html(run_dir, run_dir / "report.html")
        photograph(report, wrong_answer(run_dir))
    sys.stderr.write(f"wrote {DOCS / 'report.png'} and {DOCS / 'report-transcript.png'}\n")


if __name__ == "__main__":
    main()
