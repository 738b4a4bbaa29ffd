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
from osmosis_run.cli import app

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
