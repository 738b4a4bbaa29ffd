"""``osmosis-run eval`` with the model gateway: usage in every output, keys kept, cache, preflight."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gateway_flows
import pytest
from conftest import results, subprocess_env, write_jsonl
from fake_upstream import Reply, Upstream, serve_upstream
from serving import serve_app
from typer.testing import Result

from osmosis_run import (
    AgentWorkflow,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    LocalBackend,
    get_rollout_context,
)
from osmosis_run.results.records import Summary
from osmosis_run.server import create_rollout_server
from osmosis_run.store.layout import MODEL_CALLS

Cli = Callable[..., Result]
KEY = "sk-upstream-SECRET-abcdef0123"
ROWS = [
    {"id": "a", "user_prompt": "What is two plus two?", "ground_truth": "4"},
    {"id": "b", "user_prompt": "How many legs has a spider?", "ground_truth": "8"},
    {"id": "c", "user_prompt": "Name a colour", "ground_truth": "red"},
]
TIMINGS = ("workflow_ms", "grader_ms", "finished_at")


@pytest.fixture
def up() -> Iterator[Upstream]:
    with serve_upstream(api_key=KEY) as upstream:
        yield upstream


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "d.jsonl", ROWS)


class KeyReporter(gateway_flows.KeyReporter):
    """Also says, as a metric, whether the key it was handed is the run's own (``osr-...``)."""

    async def run(self, ctx: AgentWorkflowContext[Any]) -> AgentWorkflowOutput:
        output = await super().run(ctx)
        rollout = get_rollout_context()
        assert rollout is not None
        key = rollout.api_key or ""
        output.metrics["run_key"] = float(key.startswith("osr-") and key != KEY)
        return output


class KeyInError(AgentWorkflow[Any]):
    """Fails with an error that quotes the key its rollout was handed (the gateway's)."""

    async def run(self, ctx: AgentWorkflowContext[Any]) -> None:
        rollout = get_rollout_context()
        assert rollout is not None
        raise RuntimeError(f"the model refused key {rollout.api_key} (sent to {rollout.api_key!r})")


def run(cli: Cli, data: Path, url: str, *extra: str, workflow: str = "OpenAIWorkflow") -> Result:
    return cli(
        "eval", str(data), "-w", f"gateway_flows:{workflow}", "--chat-completions-url", url,
        "--api-key", KEY, "--out", "run", *extra,
    )  # fmt: skip


def summary(tmp_path: Path, name: str = "run") -> Summary:
    return Summary.model_validate_json((tmp_path / name / "summary.json").read_text())


def test_token_totals_equal_the_upstreams_own_count(
    cli: Cli, up: Upstream, data: Path, tmp_path: Path
) -> None:
    result = run(cli, data, up.url, "-n", "2", "--token-price", "1,3")
    assert result.exit_code == 0, result.stderr
    model = summary(tmp_path).model
    assert model is not None
    assert (model.rollouts, model.requests) == (6, 12)
    assert model.total_tokens == up.total_tokens
    assert (model.prompt_tokens, model.completion_tokens) == (
        up.prompt_tokens,
        up.completion_tokens,
    )
    assert model.cost == pytest.approx((up.prompt_tokens + 3 * up.completion_tokens) / 1e6)
    assert model.tokens_per_rollout.count == 6
    lines = results(tmp_path / "run")
    assert sum(line.usage.total_tokens for line in lines if line.usage) == up.total_tokens
    assert {line.usage.requests for line in lines if line.usage} == {2}
    doc = json.loads((tmp_path / "run/rollouts/a.s0/result.json").read_text())
    [line_a] = [line for line in lines if line.rollout_id == "a.s0"]
    assert line_a.usage is not None
    assert doc["usage"] == line_a.usage.model_dump()
    assert "model calls      12 (0 retries, 0 rate-limited, 0 failed)  cost $" in result.stderr
    assert f"tokens           {up.total_tokens} (" in result.stderr
    calls = (tmp_path / "run/rollouts/a.s0" / MODEL_CALLS).read_text().splitlines()
    assert [json.loads(line)["call"] for line in calls] == [1, 2]


def test_a_plain_httpx_workflow_is_counted_too(
    cli: Cli, up: Upstream, data: Path, tmp_path: Path
) -> None:
    result = run(cli, data, up.url, workflow="HttpxWorkflow")
    assert result.exit_code == 0, result.stderr
    model = summary(tmp_path).model
    assert model is not None
    assert (model.requests, model.total_tokens) == (3, up.total_tokens)


def test_streaming_workflows_are_counted_from_the_last_chunk(
    cli: Cli, up: Upstream, data: Path, tmp_path: Path
) -> None:
    result = run(cli, data, up.url, workflow="StreamingWorkflow")
    assert result.exit_code == 0, result.stderr
    model = summary(tmp_path).model
    assert model is not None
    assert (model.requests, model.total_tokens) == (3, up.total_tokens)
    assert results(tmp_path / "run")[0].messages[-1]["content"].startswith("echo: ")  # type: ignore[index]


def test_the_upstream_key_is_in_no_file_and_not_visible_to_the_workflow(
    cli: Cli, up: Upstream, data: Path, tmp_path: Path
) -> None:
    result = cli(
        "eval", str(data), "-w", "test_gateway_cli:KeyReporter", "--chat-completions-url",
        up.url, "--api-key", KEY, "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    for line in results(tmp_path / "run"):
        url, key = line.messages[-1]["content"].split()  # type: ignore[index]
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith(f"/v1/rollouts/{line.rollout_id}")
        assert key == "[REDACTED]"  # the run's own key is a secret too
    assert all(line.metrics == {"run_key": 1.0} for line in results(tmp_path / "run"))
    assert run(cli, data, up.url, "--fresh").exit_code == 0
    files = [path for path in (tmp_path / "run").rglob("*") if path.is_file()]
    assert any(path.name == MODEL_CALLS for path in files)
    for path in files:
        assert KEY not in path.read_text(errors="replace"), path
    assert KEY not in result.stderr + result.stdout


@pytest.fixture(params=["in-process", "--server"])
def where(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[str]]:
    """Where the rollouts run: in eval's process, or on a rollout server (eval --server)."""
    if request.param == "in-process":
        yield ["-w", "test_gateway_cli:KeyInError"]
        return
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    backend = LocalBackend(workflow="test_gateway_cli:KeyInError", artifact_root=tmp_path / "srv")
    app = create_rollout_server(backend=backend, configure_logging=False, out=tmp_path / "srv")
    with serve_app(app) as served:
        yield ["--server", served.url]


def test_the_gateways_own_key_is_redacted_from_every_output(
    cli: Cli, up: Upstream, data: Path, tmp_path: Path, where: list[str]
) -> None:
    result = cli(
        "eval", str(data), *where, "--chat-completions-url", up.url, "--api-key", KEY,
        "--out", "run", "--max-error-rate", "5", "--html", "run/report.html",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    lines = results(tmp_path / "run")
    assert [line.status for line in lines] == ["failure"] * 3
    assert lines[0].error_message == "the model refused key [REDACTED] (sent to '[REDACTED]')"
    files = [path for path in (tmp_path / "run").rglob("*") if path.is_file()]
    assert {"results.jsonl", "summary.json", "result.json", "report.html"} <= {
        path.name for path in files
    }
    for path in files:
        assert "osr-" not in path.read_text(errors="replace"), path
    assert "osr-" not in result.stderr + result.stdout
    assert "[REDACTED]" in result.stderr  # the first errors, as the terminal shows them


def test_a_cached_run_replays_offline_with_identical_results(
    cli: Cli, data: Path, tmp_path: Path
) -> None:
    with serve_upstream(api_key=KEY) as up:
        first = run(cli, data, up.url, "-n", "2", "--model-cache", "cache.sqlite")
        url = up.url
    assert first.exit_code == 0, first.stderr
    again = cli(
        "eval", str(data), "-w", "gateway_flows:OpenAIWorkflow", "--chat-completions-url", url,
        "--api-key", KEY, "--out", "replay", "-n", "2", "--model-cache", "cache.sqlite",
        "--model-cache-mode", "read-only",
    )  # fmt: skip
    assert again.exit_code == 0, again.stderr

    def comparable(name: str) -> list[dict[str, Any]]:
        lines = []
        for line in results(tmp_path / name):
            fields = {k: v for k, v in line.model_dump().items() if k not in TIMINGS}
            fields["usage"].pop("model_wait_ms")
            lines.append(fields)
        return sorted(lines, key=lambda fields: fields["rollout_id"])

    assert comparable("replay") == comparable("run")
    model = summary(tmp_path, "replay").model
    assert model is not None
    assert model.gateway is not None
    assert (model.gateway["cache_hits"], model.gateway["calls"]) == (12, 12)
    assert "model cache      12 of 12 calls replayed" in again.stderr


def test_a_read_only_cache_miss_fails_that_rollout_naming_the_cache(
    cli: Cli, up: Upstream, data: Path, tmp_path: Path
) -> None:
    assert run(cli, data, up.url, "--limit", "1", "--model-cache", "c.sqlite").exit_code == 0
    result = cli(
        "eval", str(data), "-w", "gateway_flows:OpenAIWorkflow", "--chat-completions-url", up.url,
        "--api-key", KEY, "--out", "second", "--model-cache", "c.sqlite",
        "--model-cache-mode", "read-only", "--max-error-rate", "5",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    by_id = {line.rollout_id: line for line in results(tmp_path / "second")}
    assert by_id["a.s0"].status == "ungraded"
    for rid in ("b.s0", "c.s0"):
        assert by_id[rid].status == "failure"
        assert "model cache c.sqlite has no response for this request (read-only mode)" in (
            by_id[rid].error_message or ""
        )


def test_429_bursts_are_absorbed_and_counted(
    cli: Cli, up: Upstream, data: Path, tmp_path: Path
) -> None:
    up.script([Reply(status=429, retry_after=0)] * 4 + [Reply(status=500)])
    result = run(cli, data, up.url, "--retries", "0")
    assert result.exit_code == 0, result.stderr
    assert {line.status for line in results(tmp_path / "run")} == {"ungraded"}
    model = summary(tmp_path).model
    assert model is not None
    assert (model.requests, model.retries, model.rate_limited, model.errors) == (6, 5, 4, 0)
    assert model.gateway is not None
    assert model.gateway["limit_decreases"] >= 1


def test_a_stream_cut_mid_way_counts_as_a_failed_call(
    cli: Cli, up: Upstream, data: Path, tmp_path: Path
) -> None:
    up.script([Reply(content="a b c d e f", drop_mid_stream=True)])
    result = run(
        cli, data, up.url, "--limit", "1", "--max-error-rate", "5", workflow="StreamingWorkflow"
    )
    assert result.exit_code == 0, result.stderr
    [line] = results(tmp_path / "run")
    assert line.status == "failure"
    assert line.usage is not None
    assert (line.usage.requests, line.usage.errors) == (1, 1)
    model = summary(tmp_path).model
    assert model is not None
    assert (model.requests, model.errors) == (1, 1)
    assert "model calls      1 (0 retries, 0 rate-limited, 1 failed)" in result.stderr


def test_model_replaces_the_model_and_is_recorded(
    cli: Cli, up: Upstream, data: Path, tmp_path: Path
) -> None:
    assert run(cli, data, up.url, "--model", "served-7b").exit_code == 0
    assert {r.body["model"] for r in up.chat_requests()} == {"served-7b"}
    saved = (tmp_path / "run/run.toml").read_text()
    assert 'model = "served-7b"' in saved


def test_no_gateway_hands_the_endpoint_over_directly(
    cli: Cli, up: Upstream, data: Path, tmp_path: Path
) -> None:
    result = run(cli, data, up.url, "--no-gateway", workflow="KeyReporter")
    assert result.exit_code == 0, result.stderr
    line = results(tmp_path / "run")[0]
    assert line.messages is not None
    assert line.messages[-1]["content"] == f"{up.url} [REDACTED]"  # the key itself, redacted
    assert line.usage is None
    assert summary(tmp_path).model is None


# Preflight and usage errors: one line, exit 2, nothing run --------------------------------


def test_a_refused_connection_exits_2_before_anything_runs(
    cli: Cli, data: Path, tmp_path: Path
) -> None:
    result = run(cli, data, "http://127.0.0.1:9/v1")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: model endpoint http://127.0.0.1:9/v1: cannot connect (connection "
        "refused); is the server running? Check --chat-completions-url, or pass --no-preflight "
        "to skip this check\n"
    )
    assert not (tmp_path / "run").exists()


def test_a_refused_key_exits_2(cli: Cli, up: Upstream, data: Path, tmp_path: Path) -> None:
    result = cli(
        "eval", str(data), "-w", "gateway_flows:OpenAIWorkflow", "--chat-completions-url", up.url,
        "--api-key", "sk-not-the-right-one-42", "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: model endpoint {up.url}: the API key was refused (HTTP 401); check "
        "--api-key or OSMOSIS_API_KEY, or pass --no-preflight to skip this check\n"
    )
    assert not (tmp_path / "run").exists()


def test_a_wrong_url_exits_2(cli: Cli, up: Upstream, data: Path) -> None:
    wrong = up.url.removesuffix("/v1") + "/api"
    result = run(cli, data, wrong)
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: model endpoint {wrong}: no OpenAI-compatible API there (HTTP 404"
    )


def test_no_preflight_lets_the_rollouts_fail_instead(cli: Cli, data: Path, tmp_path: Path) -> None:
    result = run(cli, data, "http://127.0.0.1:9/v1", "--no-preflight", "--model-retries", "0")
    assert result.exit_code == 3
    lines = results(tmp_path / "run")
    assert [line.status for line in lines] == ["failure"] * 3
    assert lines[0].usage is not None
    assert (lines[0].usage.requests, lines[0].usage.errors) == (1, 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--model", "x", "--no-gateway"],
            "--model needs the model gateway, but --no-gateway passes the endpoint straight through",
        ),
        (
            ["--token-price", "2.5"],
            "--token-price (command line): expected PROMPT,COMPLETION: two prices in USD "
            "per million tokens, such as 2.5,10 (got '2.5')",
        ),
        (
            ["--model-cache-mode", "sometimes"],
            "--model-cache-mode (command line): Input should be 'read-write', 'read-only' or "
            "'refresh' (got 'sometimes')",
        ),
        (
            ["--max-model-connections", "0"],
            "--max-model-connections (command line): Input should be greater than or equal to 1 "
            "(got 0)",
        ),
    ],
)
def test_bad_gateway_options_exit_2(
    cli: Cli, up: Upstream, data: Path, args: list[str], message: str
) -> None:
    result = run(cli, data, up.url, *args)
    assert result.exit_code == 2
    assert result.stderr == f"error: {message}\n"


def test_the_shipped_chat_config_offline_exits_2_with_one_line(tmp_path: Path) -> None:
    config = Path(__file__).resolve().parent.parent / "configs" / "chat.toml"
    done = subprocess.run(
        [sys.executable, "-m", "osmosis_run", "eval", "--config", str(config), "--out", "run",
         "--chat-completions-url", "http://127.0.0.1:9/v1"],
        cwd=tmp_path, env=subprocess_env(OSMOSIS_API_KEY=KEY), capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert "cannot connect (connection refused)" in done.stderr
    assert not (tmp_path / "run").exists()


def test_report_shows_the_usage(cli: Cli, up: Upstream, data: Path, tmp_path: Path) -> None:
    assert run(cli, data, up.url).exit_code == 0
    result = cli("report", "run")
    assert result.exit_code == 0, result.stderr
    shown = result.stderr + result.stdout
    assert "model calls      6 (0 retries, 0 rate-limited, 0 failed)" in shown
    assert f"tokens           {up.total_tokens} (" in shown


def test_a_resume_with_another_model_is_refused(
    cli: Cli, up: Upstream, data: Path, tmp_path: Path
) -> None:
    assert run(cli, data, up.url, "--model", "one").exit_code == 0
    again = run(cli, data, up.url, "--model", "two")
    assert again.exit_code == 2
    assert again.stderr == (
        "error: run holds a run made with other inputs (changed: model); add --fresh to start "
        "it over, or choose another --out\n"
    )


@pytest.mark.slow
def test_rpm_paces_the_calls(cli: Cli, up: Upstream, data: Path, tmp_path: Path) -> None:
    # 12 a minute: a burst of one (5 seconds' worth), then one every 5 s; 2 calls take ~5 s.
    result = run(cli, data, up.url, "--rpm", "12", "--limit", "1")
    assert result.exit_code == 0, result.stderr
    first, second = up.chat_requests()
    assert second.at - first.at >= 4.5


def test_help_and_import_load_no_http_client() -> None:
    code = (
        "import sys, osmosis_run\n"
        "from osmosis_run.cli import app\n"
        "from typer.testing import CliRunner\n"
        "assert CliRunner().invoke(app, ['eval', '--help']).exit_code == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'openai')"
        " or m.startswith('osmosis_run.gateway.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_step_summary_shows_the_usage(
    cli: Cli, up: Upstream, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary_file = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    assert run(cli, data, up.url).exit_code == 0
    text = summary_file.read_text()
    assert "| model calls | 6 (0 retries, 0 rate-limited, 0 failed) |" in text
