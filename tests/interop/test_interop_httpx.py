"""A raw-httpx osmosis_ai workflow under ``osmosis-run eval``, against a loopback server, and
under osmosis-ai's own LocalBackend with the same endpoint: the same rewards row for row."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from conftest import results, write_jsonl
from fake_openai import serve_fake_openai
from osmosis_ai.rollout import ExecutionRequest, LocalBackend, RolloutContext

KEY = "sk-httpx-interop-0123456789"
FLOWS = "interop.httpx_flows"


def multiply(body: dict[str, Any]) -> str:
    a, b = str(body["messages"][-1]["content"]).split("*")
    return f"#### {int(a) * int(b)}"


def test_a_raw_httpx_workflow_agrees_with_osmosis_ais_local_backend(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("_OSMOSIS_ROLLOUT_ARTIFACT_ROOT", str(tmp_path / "theirs"))
    rows = [{"id": "a", "prompt": "6*7", "label": "42"}, {"id": "b", "prompt": "2*2", "label": "5"}]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    with serve_fake_openai(multiply, api_key=KEY) as server:
        result = cli(
            "eval", "rows.jsonl", "--workflow", f"{FLOWS}:HttpxWorkflow",
            "--grader", f"{FLOWS}:ContainsLabel", "--chat-completions-url", server.url,
            "--api-key", KEY, "--out", "run",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        ours = {x.row_id: (x.status, x.reward) for x in results(tmp_path / "run")}

        backend = LocalBackend(workflow=f"{FLOWS}:HttpxWorkflow", grader=f"{FLOWS}:ContainsLabel")

        async def theirs() -> dict[str, Any]:
            rewards = {}
            for row in rows:
                request = ExecutionRequest(
                    id=row["id"], prompt=[{"role": "user", "content": row["prompt"]}],
                    label=row["label"],
                )  # fmt: skip
                with RolloutContext(chat_completions_url=server.url, api_key=KEY):
                    outcome = await backend.execute(request)
                assert outcome.grader is not None
                assert outcome.grader.sample is not None
                rewards[row["id"]] = (str(outcome.grader.status), outcome.grader.sample.reward)
            return rewards

        assert ours == asyncio.run(theirs()) == {"a": ("success", 1.0), "b": ("success", 0.0)}
    assert {r.authorization for r in server.requests} == {f"Bearer {KEY}"}
