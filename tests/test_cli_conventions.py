"""The conventions of a first-class CLI: --version, -h on every command, shell completion,
-v/--verbose and -q/--quiet, and progress that suits where stderr goes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import qa_rows, subprocess_env, write_jsonl
from test_cli_help import commands
from typer.testing import CliRunner, Result

from osmosis_run import __version__
from osmosis_run.cli import app, render
from osmosis_run.results.records import ResultLine, RolloutState

Cli = Callable[..., Result]
EXE = [sys.executable, "-c", "from osmosis_run.cli import main; main()"]
SCRIPT = Path(sys.executable).with_name("osmosis-run")
ROOT_USAGE = "Usage: osmosis-run [OPTIONS] COMMAND [ARGS]...\n"
TIME = r"\d\d:\d\d:\d\d"


def test_version_prints_the_name_and_version(cli: Cli) -> None:
    result = cli("--version")
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        f"osmosis-run {__version__}\n",
        "",
    )


def test_version_wins_over_a_command(cli: Cli) -> None:
    result = cli("--version", "eval", "missing.jsonl")
    assert (result.exit_code, result.stdout) == (0, f"osmosis-run {__version__}\n")


def test_dash_h_is_help_on_the_app_and_on_every_command(cli: Cli) -> None:
    root = cli("-h")
    assert root.exit_code == 0
    assert root.stdout.startswith(ROOT_USAGE)
    assert "-h, --help" in root.stdout
    assert "--version" in root.stdout
    paths = [path.split()[1:] for path, _ in commands()]
    assert ["eval"] in paths
    assert ["init"] in paths
    for path in paths:
        short, long = cli(*path, "-h"), cli(*path, "--help")
        assert (short.exit_code, short.stderr) == (0, ""), path
        assert short.stdout == long.stdout, path
        assert short.stdout.startswith(f"Usage: osmosis-run {' '.join(path)}".rstrip()), path
        assert "-h, --help" in short.stdout, path


def test_a_command_added_later_answers_dash_h_too() -> None:
    """-h lives in the app's context settings, so a command registered later inherits it."""

    def later() -> None:
        """A command another module adds."""

    app.command("later")(later)
    try:
        result = CliRunner().invoke(app, ["later", "-h"])
    finally:
        app.registered_commands.pop()
    assert result.exit_code == 0
    assert result.stdout.startswith("Usage: osmosis-run later [OPTIONS]\n")
    assert "-h, --help" in result.stdout


def test_shell_completion_is_typers_own(cli: Cli) -> None:
    shown = cli("--show-completion", "bash")
    assert shown.exit_code == 0
    assert "_OSMOSIS_RUN_COMPLETE=complete_bash" in shown.stdout
    assert "--install-completion" in cli("-h").stdout


@pytest.mark.skipif(not SCRIPT.exists(), reason="no osmosis-run console script beside python")
def test_completion_completes_commands_and_options(tmp_path: Path) -> None:
    def complete(words: str) -> list[str]:
        env = subprocess_env(
            COMP_WORDS=words,
            COMP_CWORD=str(len(words.split()) - 1),
            _OSMOSIS_RUN_COMPLETE="complete_bash",
        )
        done = subprocess.run(
            [str(SCRIPT)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30,
            check=True,
        )  # fmt: skip
        return done.stdout.split()

    assert complete("osmosis-run ev") == ["eval"]
    assert complete("osmosis-run eval --concu") == ["--concurrency"]


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["eval", "-h"], ["--version"]])
def test_help_and_version_start_without_rich(args: list[str]) -> None:
    """They load neither rich nor the library behind the commands: they start fast."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from osmosis_run.cli import main; main()",
         *args],
        capture_output=True, text=True, timeout=30, check=False, env=subprocess_env(),
    )  # fmt: skip
    assert done.returncode == 0
    assert done.stdout.startswith(("Usage: ", "osmosis-run "))
    loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert not {name for name in loaded if name.split(".")[0] == "rich"}
    assert "osmosis_run.run.scheduler" not in loaded


# -- -v / -q ---------------------------------------------------------------------------------


def logged_run(cli: Cli, tmp_path: Path, *flags: str) -> Result:
    rows = [{"id": "a", "prompt": "p0"}, {"id": "b", "prompt": "p1", "metadata": {"fail": True}}]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    out = f"run{len(list(tmp_path.iterdir()))}"
    return cli("eval", str(data), "-w", "eval_flows:Logging", "-c", "1", "--out", out,
               "--max-error-rate", "1", *flags)  # fmt: skip


def test_verbose_shows_the_workflows_and_the_engines_log_records(cli: Cli, tmp_path: Path) -> None:
    result = logged_run(cli, tmp_path, "-v")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert [line for line in lines if "user.flow" in line] == [
        line
        for line in lines
        if re.fullmatch(rf"{TIME} INFO user\.flow: thinking about p[01]", line)
    ]
    assert len([line for line in lines if "user.flow" in line]) == 2
    engine = [line for line in lines if " ERROR osmosis_run." in line]
    assert len(engine) == 1
    assert re.fullmatch(
        rf"{TIME} ERROR osmosis_run\.sdk\.backend: workflow of rollout b\.s0 raised RuntimeError",
        engine[0],
    )
    assert "RuntimeError: this row fails by design" in result.stderr  # with its traceback
    assert "details of" not in result.stderr


def test_vv_shows_debug_records_too(cli: Cli, tmp_path: Path) -> None:
    result = logged_run(cli, tmp_path, "-vv")
    assert re.search(rf"^{TIME} DEBUG user\.flow: details of p0$", result.stderr, re.M)


def test_without_verbose_info_records_stay_out(cli: Cli, tmp_path: Path) -> None:
    result = logged_run(cli, tmp_path)
    assert "thinking about" not in result.stderr
    assert " ERROR osmosis_run." not in result.stderr


def test_quiet_prints_only_the_summary_and_errors(cli: Cli, tmp_path: Path) -> None:
    loud = logged_run(cli, tmp_path)
    quiet = logged_run(cli, tmp_path, "--quiet")
    assert quiet.exit_code == loud.exit_code == 0
    assert loud.stderr.startswith("osmosis-run: 2 rollouts -> run1\n")
    assert quiet.stderr.startswith("osmosis-run: finished run2\n")
    short = logged_run(cli, tmp_path, "-q")
    assert short.stderr.startswith("osmosis-run: finished run3\n")
    assert "  failure b.s0: agent_error: this row fails by design" in quiet.stderr.splitlines()


def test_grade_takes_verbose_and_quiet(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(2))
    made = cli("eval", str(data), "-w", "eval_flows:Echo", "-g", "eval_flows:ExactMatch",
               "--out", "run", "--max-error-rate", "1")  # fmt: skip
    assert made.exit_code == 0, made.stderr
    loud = cli("grade", "run", "--grader", "eval_flows:LoggingGrader", "--out", "g1", "-v")
    assert loud.exit_code == 0, loud.stderr
    logged = [line for line in loud.stderr.splitlines() if "user.grader" in line]
    assert sorted(re.sub(TIME, "T", line) for line in logged) == [
        "T INFO user.grader: grading against p0",
        "T INFO user.grader: grading against x",
    ]
    quiet = cli("grade", "run", "--grader", "eval_flows:LoggingGrader", "--out", "g2", "-q")
    assert quiet.exit_code == 0, quiet.stderr
    assert quiet.stderr.startswith("osmosis-run: finished g2\n")
    assert "user.grader" not in quiet.stderr


# -- progress --------------------------------------------------------------------------------


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
    reporter = render.Reporter(jsonl=False, live=False, clock=clock, ticking=False)
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
    resumed = render.Reporter(jsonl=False, live=False, clock=clock, ticking=False)
    resumed.started(run_dir=tmp_path / "run", planned=1000, done=400)
    for i in range(120):
        resumed.rollout_finished(*finished(f"r{i}.s0", 0.5))
    clock.now += 60
    resumed.tick()
    resumed.tick()  # not again before another 5 s
    streamed = render.Reporter(jsonl=False, live=False, clock=clock, ticking=False)
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
    reporter = render.Reporter(jsonl=False, live=False, quiet=True, clock=clock, ticking=False)
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

    reporter = render.Reporter(jsonl=False, live=False, every_s=0.05)
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


# -- where stderr goes -----------------------------------------------------------------------

SGR = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.slow
def test_force_color_off_a_terminal_colours_plain_lines_and_never_redraws(
    tmp_path: Path,
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(3, metadata={"sleep": 2.2}))
    done = subprocess.run(
        [*EXE, "eval", str(data), "-w", "eval_flows:Sleepy", "-c", "1", "--max-error-rate", "1",
         "--out", "run"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        env=subprocess_env(FORCE_COLOR="1", COLUMNS="100"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert "\x1b[" in err  # coloured
    assert "\r" not in err  # no redraws
    assert SGR.sub("", err).count("\x1b") == 0  # colour codes only: no cursor movement
    plain = SGR.sub("", err).splitlines()
    # About 7 s of rollouts: a line at 5 s (two done, unless the machine is slow to start).
    progress = [line for line in plain if re.match(r"osmosis-run: \d/3 rollouts \(", line)]
    assert len(progress) >= 1, plain
    assert re.fullmatch(
        r"osmosis-run: [0-3]/3 rollouts \(\d+%\), [\d.]+/s, ETA (\d+s|-), errors 0, "
        r"mean reward -, elapsed [5-9]s",
        progress[0],
    ), progress
    assert plain[-1] == "ok: error budget: held (0 of 3 rollouts failed, 0.00%; 1 allowed)"


def on_a_terminal(args: list[str], cwd: Path) -> str:
    """Run ``osmosis-run ARGS`` with stderr on a pseudo-terminal; what it drew, colours removed."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*EXE, *args], cwd=cwd, env=subprocess_env(COLUMNS="160"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    screen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        screen += chunk
    assert proc.wait(timeout=30) == 0
    os.close(master)
    return SGR.sub("", screen.decode(errors="replace"))


def test_a_terminal_gets_a_live_bar_with_labelled_columns(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(10, metadata={"sleep": 0.1}))
    text = on_a_terminal(
        ["eval", str(data), "-w", "eval_flows:Sleepy", "-c", "1", "--max-error-rate", "1",
         "--out", "tty"],
        tmp_path,
    )  # fmt: skip
    assert re.search(
        r"eval .* done \d+/10 mean reward - +errors 0 rate [\d.]+/s elapsed \d+s ETA", text
    ), text


def test_verbose_records_print_above_the_live_bar(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(3))
    raw = on_a_terminal(
        ["eval", str(data), "-w", "eval_flows:Logging", "-v", "--out", "tty"], tmp_path
    )
    for i in range(3):
        # Each record is a whole line of its own, after the bar's line is erased (ESC [2K).
        assert re.search(rf"\x1b\[2K{TIME} INFO user\.flow: thinking about p{i}\r?$", raw, re.M)
