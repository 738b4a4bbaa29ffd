"""Shared fixtures: run the CLI in-process, write datasets, read run directories back."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from osmosis_run.backends import executor_for
from osmosis_run.cli import app
from osmosis_run.results.records import ResultLine
from osmosis_run.run.plan import prepare
from osmosis_run.run.scheduler import Scheduler
from osmosis_run.run.settings import EvalSettings
from osmosis_run.store.store import read_results

TESTS_DIR = Path(__file__).parent
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")

# tests/interop/ drives osmosis-ai's own code (Python >= 3.12): collected only where it imports.
if importlib.util.find_spec("osmosis_ai") is None:
    collect_ignore = ["interop"]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Result]:
    """Run ``osmosis-run ARGS`` in-process from ``tmp_path``; returns the click Result."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    for name in list(os.environ):
        if name.startswith(("OSMOSIS_RUN_", "OSMOSIS_API_KEY", "OSMOSIS_CHAT")):
            monkeypatch.delenv(name)
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Result:  # noqa: A002
        return runner.invoke(app, list(args), input=input, catch_exceptions=False)

    return invoke


def stable_id(value: object) -> str:
    """``repr(value)`` without memory addresses, for ``parametrize(ids=...)``: pytest-xdist's
    workers each collect the suite and must agree on every test id."""
    return _ADDRESS.sub("", repr(value))


def write_jsonl(path: Path, rows: Sequence[Any]) -> Path:
    """Write rows (objects, or raw strings taken as lines) as a JSONL file."""
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def fake_run_settings(tmp_path: Path, rows: int = 4, **kw: Any) -> Any:
    """Settings of a run of ``rows`` rows for the engine's tests (FakeExecutor runs them)."""
    from osmosis_run.run.settings import EvalSettings

    data = write_jsonl(
        tmp_path / "d.jsonl", [{"id": f"q{i}", "prompt": f"p{i}"} for i in range(rows)]
    )
    return EvalSettings.model_validate(
        {
            "dataset": str(data),
            "workflow": "eval_flows:Echo",  # the plan loads it; the fake executor never runs it
            "out": str(tmp_path / "run"),
            "max_error_rate": 1,
            **kw,
        }
    )


def results(run_dir: Path) -> list[ResultLine]:
    """The results of a run directory, in file order."""
    return list(read_results(run_dir))


def qa_rows(n: int, **extra: Any) -> list[dict[str, Any]]:
    """n rows whose echo answer is right for even rows and wrong for odd ones."""
    return [
        {"id": f"q{i}", "prompt": f"p{i}", "ground_truth": f"p{i}" if i % 2 == 0 else "x", **extra}
        for i in range(n)
    ]


def write_workspace(root: Path, rollout: str, main: str, config: str) -> Path:
    """An Osmosis workspace: ``rollouts/<rollout>/main.py`` and ``configs/eval/<rollout>.toml``
    (both dedented); returns the config's path."""
    (root / "rollouts" / rollout).mkdir(parents=True)
    (root / "configs" / "eval").mkdir(parents=True)
    (root / "rollouts" / rollout / "main.py").write_text(textwrap.dedent(main))
    path = root / "configs" / "eval" / f"{rollout}.toml"
    path.write_text(textwrap.dedent(config))
    return path


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for an ``osmosis-run`` child process that can import the test flows."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSMOSIS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), *sys.path])
    env.update(extra)
    return env


def open_scheduler(settings: EvalSettings, executor: Any = None, **options: Any) -> Scheduler:
    """``prepare`` the settings and open their run, with the in-process executor by default."""
    plan = prepare(settings)
    return Scheduler.open(plan, executor or executor_for(plan), **options)


class Recorder:
    """A reporter that keeps every event it is given, for the engine's tests."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def started(self, *, run_dir: Path, planned: int | None, done: int, kept_failures: int) -> None:
        self.events.append(("started", (planned, done, kept_failures)))

    def already_done(self, raw: bytes) -> None:
        self.events.append(("already_done", json.loads(raw)["rollout_id"]))

    def rollout_finished(self, line: ResultLine, raw: bytes) -> None:
        self.events.append(("finished", line.rollout_id))

    def stalled(self, rollout_id: str, seconds: float) -> None:
        self.events.append(("stalled", rollout_id))

    def blocked(self, rollout_id: str | None, seconds: float) -> None:
        self.events.append(("blocked", rollout_id))


def pytest_report_header(config: pytest.Config) -> str:
    """Which marked tests this invocation leaves out (pytest_collection_modifyitems)."""
    asked = config.option.markexpr or ""
    if "ray" in asked:
        return "every selected test runs, slow or not"
    left_out = ["ray"]
    if "slow" not in asked and config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        left_out.insert(0, "slow")
    asking = ", ".join(f"-m {mark}" for mark in left_out)
    return f"{' and '.join(left_out)} tests run when asked for: {asking} (README, Tests)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Test ids must not hold memory addresses (each pytest-xdist worker would collect different
    tests: use ``ids=stable_id``). Tests marked ``slow`` run first, so that on several workers
    (``-n 4``) the longest start at once and the short ones fill in around them. Tests marked
    ``ray`` run only when asked for (``-m ray``): they start Ray clusters, which must run inside a
    private network namespace (see tests/test_ray.py); the main suite never starts Ray. Tests
    marked ``slow`` are left out of the everyday command (``pytest`` with no path: the whole
    suite) unless asked for (``-m slow``, or any ``-m`` naming them); a path given
    (``pytest tests/interop``, ``pytest tests/test_x.py::test_y``) runs every test it holds."""
    unstable = [item.nodeid for item in items if _ADDRESS.search(item.nodeid)]
    if unstable:
        raise pytest.UsageError(
            f"test id holds a memory address (use ids=stable_id): {unstable[0]}"
        )
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    asked = config.option.markexpr or ""
    if "ray" in asked:
        return
    chosen = [item for item in items if item.get_closest_marker("ray") is None]
    if "slow" not in asked and config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        chosen = [item for item in chosen if item.get_closest_marker("slow") is None]
    if len(chosen) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in chosen])
        items[:] = chosen
