"""The HTML report of a run through the gateway: model usage, and what the model saw per rollout."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import write_jsonl
from fake_upstream import Reply, serve_upstream
from test_html_browser import chromium
from typer.testing import Result

KEY = "sk-upstream-SECRET-html-01234"


@pytest.fixture
def report(cli: Callable[..., Result], tmp_path: Path) -> Path:
    data = write_jsonl(
        tmp_path / "d.jsonl", [{"id": "a", "prompt": "first question"}, {"id": "b", "prompt": "x"}]
    )
    with serve_upstream(api_key=KEY) as up:
        up.script([Reply(status=429, retry_after=0)])
        result = cli(
            "eval", str(data), "-w", "gateway_flows:OpenAIWorkflow", "--chat-completions-url",
            up.url, "--api-key", KEY, "--out", "run", "--html", "report.html",
            "--token-price", "1,2", "--concurrency", "1",
        )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return tmp_path / "report.html"


def payload(page: Path) -> dict[str, Any]:
    found = re.search(
        r'<script type="application/json" id="osmosis-data">(.*?)</script>', page.read_text(), re.S
    )
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def test_the_page_embeds_usage_and_each_rollouts_model_calls(report: Path) -> None:
    data = payload(report)
    model = data["summary"]["model"]
    assert (model["requests"], model["retries"], model["rate_limited"]) == (4, 1, 1)
    by_id = {row["i"]: row for row in data["rows"]}
    first = by_id["a.s0"]
    assert first["u"]["rq"] == 2  # the page's short form of the rollout's usage
    assert "c" in first["f"]
    calls = first["mc"]
    assert [call["n"] for call in calls] == [1, 2]
    assert (calls[0]["st"], calls[0]["a"]) == (200, 2)  # the 429 then the answer
    assert calls[0]["q"] == [{"r": "user", "c": "first question"}]
    assert calls[0]["o"]["c"] == "echo: first question"
    assert calls[0]["pa"] == ["attempt 1: 429 Rate limit reached"]
    assert KEY not in report.read_text()


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.mark.browser
@pytest.mark.slow
def test_the_rollout_view_shows_what_the_model_saw(report: Path, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_default_timeout(5_000)
    page.goto(report.resolve().as_uri())
    page.wait_for_selector("html[data-ready]")
    assert "4 (1 retries, 1 rate-limited, 0 failed)" in page.inner_text(".model-usage")
    page.click('table.rollouts tbody tr[data-id="a.s0"]')
    page.wait_for_selector(".drawer.open .model-calls")
    block = page.inner_text(".drawer.open .model-calls")
    assert block.lower().startswith("what the model saw · 2 calls")
    assert "14 (7 prompt + 7 completion) · 2 requests · 1 retry · 1 rate-limited" in block
    summaries = page.eval_on_selector_all(
        ".drawer.open details.model-call summary", "nodes => nodes.map(n => n.textContent)"
    )
    assert summaries[0].startswith("call 1 · 200 · ")
    assert "2 attempts" in summaries[0]
    page.click(".drawer.open details.model-call summary")
    assert "echo: first question" in page.inner_text(".drawer.open details.model-call")
    links = page.eval_on_selector_all(".drawer.open ul.files a", "as => as.map(a => a.textContent)")
    assert "model_calls.jsonl" in links
    assert errors == []
    page.close()
