"""osmosis_ai's OpenAI Agents integration under ``osmosis-run eval``, against a loopback server.

The integration reads the rollout's endpoint and key from osmosis_ai's ambient RolloutContext,
which osmosis-run enters per rollout; the key reaches the server and no file of the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import results, write_jsonl

from interop.streaming_openai import serve_streaming_openai

FLOWS = "interop.openai_agents_flows"
KEY = "sk-interop-key-0123456789"


def multiply(body: dict[str, Any]) -> str:
    """Answer the product asked for in the last user message ("6*7" -> "#### 42")."""
    users = [m for m in body["messages"] if m.get("role") == "user"]
    a, b = str(users[-1]["content"]).split("*")
    return f"#### {int(a) * int(b)}"


def every_file_text(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


@pytest.fixture(autouse=True)
def no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workflow", "grader", "config"),
    [
        ("AgentsWorkflow", "AnswerGrader", "agents_config"),  # osmosis_ai classes
        ("MixedWorkflow", "MixedGrader", "mixed_config"),  # osmosis_run classes, osmosis_ai agent
    ],
)
def test_the_openai_agents_integration_runs_against_a_loopback_server(
    cli: Any, tmp_path: Path, workflow: str, grader: str, config: str
) -> None:
    rows = [{"id": "a", "prompt": "6*7", "label": "42"}, {"id": "b", "prompt": "3*3", "label": "8"}]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    with serve_streaming_openai(multiply, api_key=KEY) as server:
        result = cli(
            "eval", "rows.jsonl", "--workflow", f"{FLOWS}:{workflow}",
            "--workflow-config", f"{FLOWS}:{config}", "--grader", f"{FLOWS}:{grader}",
            "--chat-completions-url", server.url, "--api-key", KEY, "--out", "run",
            "--concurrency", "2",
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = {line.row_id: line for line in results(tmp_path / "run")}
    assert {k: (v.status, v.reward) for k, v in lines.items()} == {
        "a": ("success", 1.0),
        "b": ("success", 0.0),
    }
    assert len(server.requests) == 2
    assert {auth for _, auth in server.requests} == {f"Bearer {KEY}"}
    assert all(body["stream"] for body, _ in server.requests)
    transcript = json.dumps(lines["a"].messages)
    assert "#### 42" in transcript
    assert KEY not in every_file_text(tmp_path / "run")
