"""Run budgets: ``--time-limit``, ``--max-cost`` and ``--max-tokens`` stop a run cleanly.

Each is reached mid-run: exit 124, the one line that says which budget ran out and how far the
run got, summary.json's ``budget``, what finished kept; then the same command with a larger
budget resumes and every rollout ends with exactly one results line, none run twice. Budgets the
run cannot count are refused before anything runs.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import (
    TESTS_DIR,
    fake_run_settings,
    open_scheduler,
    results,
    subprocess_env,
    write_jsonl,
)
from fake_upstream import Reply, Upstream, serve_upstream
from typer.testing import Result

from osmosis_run.backends.fake import FakeExecutor
from osmosis_run.cli import exit_codes
from osmosis_run.results.records import Summary
from osmosis_run.run.loop import run_to_completion
from osmosis_run.run.settings import EvalSettings
from osmosis_run.run.settings.models import format_duration, parse_duration

Cli = Callable[..., Result]
ROWS = 40
KEY = "sk-upstream-SECRET-abcdef0123"
SLOW = ("-w", "budget_flows:Slow", "-g", "budget_flows:SlowGrader")
REACHED = re.compile(
    r"osmosis-run: (?P<what>.+ reached(?: \(.+\))?) after (?P<done>\d+) of (?P<planned>\d+) "
    r"rollouts; the same command resumes\n"
)


def rows(n: int = ROWS) -> list[dict[str, str]]:
    return [{"id": f"r{i:02d}", "user_prompt": f"q{i}", "ground_truth": f"q{i}"} for i in range(n)]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "d.jsonl", rows())


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ran.log"
    monkeypatch.setenv("BUDGET_FLOWS_LOG", str(path))
    return path


def summary(run_dir: Path) -> Summary:
    return Summary.model_validate_json((run_dir / "summary.json").read_text())


def stopped(stderr: str, run_dir: Path, budget: str) -> int:
    """Check how a run a budget stopped ended; return how many rollouts it had finished."""
    match = REACHED.search(stderr)
    assert match is not None, stderr
    s = summary(run_dir)
    assert s.budget is not None
    assert s.budget.budget == budget
    assert s.interrupted
    assert not s.complete
    done = int(match["done"])
    assert (done, int(match["planned"])) == (s.rollouts, s.planned)
    assert s.budget.message == match.group(0).removeprefix("osmosis-run: ").rstrip("\n")
    assert s.budget.reached == match["what"]
    assert len(results(run_dir)) == done < (s.planned or 0)
    assert f"budget           {s.budget.message}" in stderr  # the summary table says it too
    assert f"osmosis-run: finished rollouts are kept in {run_dir.name}" in stderr
    return done


def prompts(run_dir: Path) -> frozenset[str]:
    """The prompts of the rollouts a run has finished (row r07's is q7)."""
    return frozenset(f"q{int(str(line.row_id)[1:])}" for line in results(run_dir))


def exactly_once(
    run_dir: Path, planned: int, log: Path | None = None, kept: frozenset[str] = frozenset()
) -> None:
    """Every rollout has one results line; those ``kept`` from before the stop ran once."""
    ids = [line.rollout_id for line in results(run_dir)]
    assert len(ids) == len(set(ids)) == planned
    s = summary(run_dir)
    assert s.complete
    assert not s.interrupted
    assert s.budget is None
    if log is not None:  # a rollout cancelled by the stop runs again; a finished one never
        lines = log.read_text().splitlines()
        runs = Counter(line.removeprefix("run ") for line in lines if line.startswith("run "))
        assert len(runs) == planned
        assert kept
        assert {runs[prompt] for prompt in kept} == {1}


# -- the time limit ----------------------------------------------------------------------


@pytest.mark.slow
def test_the_time_limit_stops_a_real_process_with_124_and_the_same_command_resumes(
    tmp_path: Path, data: Path
) -> None:
    log = tmp_path / "ran.log"
    env = subprocess_env(BUDGET_FLOWS_LOG=str(log))
    command = [sys.executable, "-m", "osmosis_run", "eval", str(data), *SLOW]
    command += ["-c", "2", "--out", "run", "--time-limit", "1s"]
    first = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert first.returncode == exit_codes.BUDGET_REACHED == 124, first.stderr
    assert first.stdout == ""
    done = stopped(first.stderr, tmp_path / "run", "time_limit")
    kept = prompts(tmp_path / "run")
    assert "time limit 1s reached: stopping; cancelling rollouts in flight" in first.stderr
    assert "osmosis-run: stopped run" in first.stderr
    s = summary(tmp_path / "run")
    assert s.budget is not None
    assert s.budget.limit == 1
    assert s.budget.spent >= 1
    assert "--time-limit 1s" in first.stderr  # the resume hint is the same command
    # The same command resumes (another second), and a larger budget finishes the run.
    again = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert again.returncode == 124, again.stderr
    assert summary(tmp_path / "run").rollouts > done
    command[-1] = "1h"
    last = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert last.returncode == 0, last.stderr
    exactly_once(tmp_path / "run", ROWS, log, kept)


@pytest.mark.parametrize("source", ["config", "environment"])
@pytest.mark.slow
def test_the_time_limit_from_a_config_file_or_the_environment(
    cli: Cli,
    data: Path,
    tmp_path: Path,
    log: Path,
    monkeypatch: pytest.MonkeyPatch,
    source: str,
) -> None:
    extra: list[str] = []
    if source == "config":
        (tmp_path / "eval.toml").write_text('time_limit = "0.6s"\nconcurrency = 2\n')
        extra = ["--config", "eval.toml"]
    else:
        monkeypatch.setenv("OSMOSIS_RUN_TIME_LIMIT", "0.6s")
        monkeypatch.setenv("OSMOSIS_RUN_CONCURRENCY", "2")
    result = cli("eval", str(data), *SLOW, "--out", "run", *extra)
    assert result.exit_code == 124, result.stderr
    stopped(result.stderr, tmp_path / "run", "time_limit")
    assert "time limit 0.6s reached after" in result.stderr
    kept = prompts(tmp_path / "run")
    # The command line beats both: a larger budget resumes the run to its end.
    result = cli("eval", str(data), *SLOW, "--out", "run", *extra, "--time-limit", "10m")
    assert result.exit_code == 0, result.stderr
    exactly_once(tmp_path / "run", ROWS, log, kept)


@pytest.mark.slow
def test_the_time_limit_with_worker_processes(data: Path, tmp_path: Path) -> None:
    # As the worker-process tests run it: a real osmosis-run process, its workers its children.
    command = [sys.executable, "-m", "osmosis_run", "eval", str(data), *SLOW, "-c", "2"]
    command += ["--out", "run", "--backend", "processes", "--workers", "1"]

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *extra], cwd=tmp_path, env=subprocess_env(), capture_output=True,
            text=True, timeout=240, check=False,
        )  # fmt: skip

    # Long enough for the worker to start first under load (a limit reached while the executor
    # starts is the engine test at the end of this module).
    first = run("--time-limit", "2.5s")
    assert first.returncode == 124, first.stderr
    stopped(first.stderr, tmp_path / "run", "time_limit")
    last = run()
    assert last.returncode == 0, last.stderr
    exactly_once(tmp_path / "run", ROWS)


@pytest.mark.slow
def test_grade_takes_a_time_limit_too(cli: Cli, data: Path, tmp_path: Path, log: Path) -> None:
    result = cli("eval", str(data), "-w", "budget_flows:Slow", "-c", "8", "--out", "source")
    assert result.exit_code == 0, result.stderr
    graded = tmp_path / "graded"
    args = ("grade", "source", "-g", "budget_flows:SlowGrader", "-c", "2", "--out", "graded")
    result = cli(*args, "--time-limit", "0.6s")
    assert result.exit_code == 124, result.stderr
    stopped(result.stderr, graded, "time_limit")
    kept = prompts(graded)
    result = cli(*args, "--time-limit", "1h")
    assert result.exit_code == 0, result.stderr
    exactly_once(graded, ROWS)
    lines = log.read_text().splitlines()
    grades = Counter(line.removeprefix("grade ") for line in lines if line.startswith("grade "))
    assert len(grades) == ROWS
    assert kept
    assert {grades[prompt] for prompt in kept} == {1}


# -- tokens and cost, counted by the gateway ------------------------------------------------


@pytest.fixture
def up() -> Iterator[Upstream]:
    with serve_upstream(api_key=KEY) as upstream:
        upstream.default = Reply(delay=0.05)
        yield upstream


def model_run(cli: Cli, data: Path, up: Upstream, *extra: str) -> Result:
    return cli(
        "eval", str(data), "-w", "gateway_flows:OpenAIWorkflow", "-c", "2", "--out", "run",
        "--chat-completions-url", up.url, "--api-key", KEY, *extra,
    )  # fmt: skip


@pytest.mark.slow
def test_max_tokens_stops_the_run_once_the_gateway_counted_them(
    cli: Cli, data: Path, tmp_path: Path, up: Upstream
) -> None:
    result = model_run(cli, data, up, "--max-tokens", "150")
    assert result.exit_code == 124, result.stderr
    stopped(result.stderr, tmp_path / "run", "max_tokens")
    s = summary(tmp_path / "run")
    assert s.budget is not None
    assert s.budget.limit == 150
    assert s.budget.spent >= 150
    assert re.search(r"token limit 150 reached \(\d+ used\) after \d+ of 40", result.stderr)
    # What the gateway counted is what the upstream billed, up to the stop.
    assert s.budget.spent <= up.total_tokens
    result = model_run(cli, data, up, "--max-tokens", "1M")
    assert result.exit_code == 0, result.stderr
    exactly_once(tmp_path / "run", ROWS)


@pytest.mark.slow
def test_max_cost_stops_the_run_at_the_price_given(
    cli: Cli, data: Path, tmp_path: Path, up: Upstream
) -> None:
    # 1,000 USD per million tokens, both ways: a tenth of a dollar is 100 tokens.
    result = model_run(cli, data, up, "--token-price", "1000,1000", "--max-cost", "$0.1")
    assert result.exit_code == 124, result.stderr
    stopped(result.stderr, tmp_path / "run", "max_cost")
    s = summary(tmp_path / "run")
    assert s.budget is not None
    assert s.budget.limit == 0.1
    assert s.budget.spent >= 0.1
    assert re.search(r"cost limit \$0\.1 reached \(\$\d+\.\d{4} spent\) after", result.stderr)
    result = model_run(cli, data, up, "--token-price", "1000,1000", "--max-cost", "100")
    assert result.exit_code == 0, result.stderr
    exactly_once(tmp_path / "run", ROWS)


# -- refused before anything runs -----------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ("--chat-completions-url", "http://127.0.0.1:9/v1", "--max-cost", "5"),
            "error: --max-cost needs --token-price PROMPT,COMPLETION (USD per million tokens, "
            "such as 2.5,10) to price the gateway's tokens\n",
        ),
        (
            ("--chat-completions-url", "http://127.0.0.1:9/v1", "--no-gateway"),
            "error: --max-tokens counts the model gateway's tokens, but --no-gateway passes the "
            "endpoint straight through; drop it, or use --time-limit\n",
        ),
        (
            (),
            "error: --max-tokens counts the model gateway's tokens, but there is no model "
            "endpoint (--chat-completions-url); drop it, or use --time-limit\n",
        ),
    ],
    ids=["cost-without-price", "tokens-without-gateway", "tokens-without-endpoint"],
)
def test_budgets_the_run_cannot_count_are_refused_in_one_line(
    cli: Cli, data: Path, tmp_path: Path, extra: tuple[str, ...], message: str
) -> None:
    args = ["eval", str(data), *SLOW, "--out", "run", *extra]
    if "--max-cost" not in extra:
        args += ["--max-tokens", "1000"]
    result = cli(*args)
    assert result.exit_code == 2
    assert result.stderr == message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--time-limit", "soon", "Input should be a duration such as 90s, 45m, 2h or 1h30m"),
        ("--time-limit", "0s", "Input should be a duration greater than 0"),
        ("--time-limit", "5 parsecs", "Input should be a duration such as 90s, 45m, 2h or 1h30m"),
        ("--max-cost", "-1", "Input should be greater than 0"),
        ("--max-cost", "five", "Input should be a valid number"),
        ("--max-tokens", "0", "Input should be greater than or equal to 1"),
        ("--max-tokens", "lots", "Input should be a valid integer"),
    ],
)
def test_bad_budget_values_are_one_line_and_exit_2(
    cli: Cli, data: Path, tmp_path: Path, option: str, value: str, message: str
) -> None:
    result = cli("eval", str(data), *SLOW, "--out", "run", option, value)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {option} (command line): {message}")
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_a_bad_budget_in_a_config_file_names_the_key_and_file(
    cli: Cli, data: Path, tmp_path: Path
) -> None:
    (tmp_path / "eval.toml").write_text("max_tokens = -3\n")
    result = cli("eval", str(data), *SLOW, "--config", "eval.toml")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --max-tokens (max_tokens in eval.toml): Input should be greater than or equal "
        "to 1 (got -3)\n"
    )


# -- the forms of a budget ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds", "shown"),
    [
        ("90s", 90, "90s"),
        ("45m", 2700, "45m"),
        ("2h", 7200, "2h"),
        ("1h30m", 5400, "1h30m"),
        ("1.5h", 5400, "1h30m"),
        ("90", 90, "90s"),
        ("500ms", 0.5, "0.5s"),
        ("1d", 86400, "24h"),
        (" 2 h ", 7200, "2h"),
        ("10min", 600, "10m"),
    ],
)
def test_durations(text: str, seconds: float, shown: str) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    assert format_duration(parse_duration(text)) == shown


def test_budget_forms_and_that_they_stay_out_of_the_fingerprint(tmp_path: Path) -> None:
    e = EvalSettings(time_limit="45m", max_cost="$2.50", max_tokens="2M").execution
    assert (e.time_limit, e.max_cost, e.max_tokens) == (2700, 2.5, 2_000_000)
    assert EvalSettings(max_tokens="500_000").execution.max_tokens == 500_000
    assert EvalSettings(max_tokens="1.5k").execution.max_tokens == 1500


def test_help_documents_exit_124(cli: Cli) -> None:
    result = cli("eval", "--help")
    text = " ".join(result.stdout.split())
    assert "124 a run budget ran out (--time-limit, --max-cost, --max-tokens)" in text
    for option in ("--time-limit", "--max-cost", "--max-tokens"):
        assert option in result.stdout
    assert "--time-limit" in cli("grade", "--help").stdout


# -- the engine: a budget that runs out while the executor gets ready -------------------------


class SlowToOpen(FakeExecutor):
    """An executor whose start (workers, actors) takes ``seconds``: it must not be cancelled."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.finished_opening = False

    async def open(self) -> None:
        await asyncio.sleep(self.seconds)
        await super().open()
        self.finished_opening = True


def test_a_time_limit_reached_while_the_executor_starts_lets_it_start_then_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    executor = SlowToOpen(0.5)
    scheduler = open_scheduler(fake_run_settings(tmp_path, rows=8, time_limit="0.1s"), executor)
    outcome = run_to_completion(scheduler.run())
    assert executor.finished_opening  # not cancelled half-way
    assert executor.closed
    assert executor.attempts == []
    assert outcome.interrupted
    assert outcome.budget is not None
    assert outcome.budget.message == (
        "time limit 0.1s reached after 0 of 8 rollouts; the same command resumes"
    )
    assert outcome.budget.spent >= 0.1
