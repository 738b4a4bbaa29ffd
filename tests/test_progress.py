"""osmosis_run.cli.progress: a run's progress, plain lines off a terminal (time based).

The live bar on a terminal is tested through a pseudo-terminal in tests/test_cli_conventions.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from osmosis_run.cli import progress
from osmosis_run.results.records import ResultLine, RolloutState


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def finished(
    rollout_id: str, reward: float | None, status: RolloutState = "success"
) -> tuple[ResultLine, bytes]:
    line = ResultLine(
        rollout_id=rollout_id, row_index=0, line=1, sample_index=0, status=status, reward=reward
    )
    return line, b"{}"


def test_plain_progress_is_time_based_with_rate_eta_and_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Three 12 s rollouts, one at a time: a line every 5 s, not one per finished rollout."""
    clock = Clock()
    reporter = progress.Reporter(jsonl=False, live=False, clock=clock, ticking=False)
    reporter.started(run_dir=tmp_path / "run", planned=3, done=0)
    assert capsys.readouterr().err == f"osmosis-run: 3 rollouts -> {tmp_path / 'run'}\n"
    ends: dict[int, tuple[str, float | None, RolloutState]] = {
        12: ("a.s0", 1.0, "success"),
        24: ("b.s0", 1.0, "success"),
        36: ("c.s0", None, "failure"),
    }
    lines = []
    for second in range(1, 41):
        clock.now += 1
        if second in ends:
            reporter.rollout_finished(*finished(*ends[second]))
            assert capsys.readouterr().err == ""  # a finished rollout alone prints nothing
        reporter.tick()
        lines += [(second, text) for text in capsys.readouterr().err.splitlines()]
    reporter.close()
    assert lines == [
        (5, "osmosis-run: 0/3 rollouts (0%), 0.00/s, ETA -, errors 0, mean reward -, elapsed 5s"),
        (10, "osmosis-run: 0/3 rollouts (0%), 0.00/s, ETA -, errors 0, mean reward -, elapsed 10s"),
        (15, "osmosis-run: 1/3 rollouts (33%), 0.07/s, ETA 30s, errors 0, mean reward 1.000, "
             "elapsed 15s"),
        (20, "osmosis-run: 1/3 rollouts (33%), 0.05/s, ETA 40s, errors 0, mean reward 1.000, "
             "elapsed 20s"),
        (25, "osmosis-run: 2/3 rollouts (67%), 0.08/s, ETA 12s, errors 0, mean reward 1.000, "
             "elapsed 25s"),
        (30, "osmosis-run: 2/3 rollouts (67%), 0.07/s, ETA 15s, errors 0, mean reward 1.000, "
             "elapsed 30s"),
        (35, "osmosis-run: 2/3 rollouts (67%), 0.06/s, ETA 18s, errors 0, mean reward 1.000, "
             "elapsed 35s"),
        (40, "osmosis-run: 3/3 rollouts (100%), 0.07/s, ETA 0s, errors 1, mean reward 1.000, "
             "elapsed 40s"),
    ]  # fmt: skip


def test_plain_progress_of_a_resumed_run_and_of_stdin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    clock = Clock()
    resumed = progress.Reporter(jsonl=False, live=False, clock=clock, ticking=False)
    resumed.started(run_dir=tmp_path / "run", planned=1000, done=400)
    for i in range(120):
        resumed.rollout_finished(*finished(f"r{i}.s0", 0.5))
    clock.now += 60
    resumed.tick()
    resumed.tick()  # not again before another 5 s
    streamed = progress.Reporter(jsonl=False, live=False, clock=clock, ticking=False)
    streamed.started(run_dir=tmp_path / "run2", planned=None, done=0)
    streamed.rollout_finished(*finished("s.s0", None, "failure"))
    clock.now += 4000
    streamed.tick()
    assert capsys.readouterr().err.splitlines() == [
        "osmosis-run: 1000 rollouts, 400 already done -> " + str(tmp_path / "run"),
        "osmosis-run: 520/1000 rollouts (52%), 2.0/s, ETA 4m00s, errors 0, mean reward 0.500, "
        "elapsed 1m00s",
        "osmosis-run: rollouts from stdin -> " + str(tmp_path / "run2"),
        "osmosis-run: 1 rollout, 0.00/s, errors 1, mean reward -, elapsed 1h06m",
    ]


def test_quiet_reporter_prints_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    clock = Clock()
    reporter = progress.Reporter(jsonl=False, live=False, quiet=True, clock=clock, ticking=False)
    reporter.started(run_dir=tmp_path, planned=2, done=0)
    reporter.rollout_finished(*finished("a.s0", 1.0))
    clock.now += 60
    reporter.tick()
    reporter.close()
    assert capsys.readouterr().err == ""


def test_the_ticker_thread_prints_on_time_and_stops_at_close(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import time

    reporter = progress.Reporter(jsonl=False, live=False, every_s=0.05)
    reporter.started(run_dir=tmp_path, planned=2, done=0)
    seen: list[str] = []
    deadline = time.monotonic() + 10
    while len(seen) < 3 and time.monotonic() < deadline:  # no rollout finishes: time alone
        time.sleep(0.02)
        seen += capsys.readouterr().err.splitlines()
    reporter.close()
    seen += capsys.readouterr().err.splitlines()
    assert seen[0] == f"osmosis-run: 2 rollouts -> {tmp_path}"
    assert len(seen) >= 3
    assert all(
        line.startswith("osmosis-run: 0/2 rollouts (0%), 0.00/s, ETA -, ") for line in seen[1:]
    )
    time.sleep(0.2)
    assert capsys.readouterr().err == ""  # the thread has stopped
