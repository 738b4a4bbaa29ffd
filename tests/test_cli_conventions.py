"""The conventions of a first-class CLI: --version, -h on every command, shell completion,
-v/--verbose and -q/--quiet, and progress that suits where stderr goes."""

from __future__ import annotations

import os
import re
import shlex
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


# -- products on stdout, notices on stderr (issue #28) ---------------------------------------

REPO = Path(__file__).resolve().parent.parent
ECHO = ["-w", "eval_flows:Echo", "-g", "eval_flows:ExactMatch"]
# Rows whose labels and answers differ in length: a padded table shows it at the line ends.
UNEVEN = [
    {"id": "right", "prompt": "ok", "ground_truth": "ok"},
    {"id": "long", "prompt": "a much longer answer than the others", "ground_truth": "no"},
    {"id": "short", "prompt": "s", "ground_truth": "a longer label"},
]


def uneven_run(cli: Cli, tmp_path: Path, out: str = "run") -> None:
    data = write_jsonl(tmp_path / "uneven.jsonl", UNEVEN)
    made = cli("eval", str(data), *ECHO, "--out", out, "-q")
    assert made.exit_code == 0, made.stderr


def test_report_prints_the_report_on_stdout_and_the_hint_on_stderr(
    cli: Cli, tmp_path: Path
) -> None:
    uneven_run(cli, tmp_path)
    result = cli("report", "run")
    assert result.exit_code == 0
    assert result.stdout.startswith("osmosis-run: finished run\nrollouts ")
    assert result.stdout.endswith(
        "lowest rewards (below the pass threshold 1)\n"
        "rollout   reward  label           answer\n"
        "long.s0    0.000  no              a much longer answer than the others\n"
        "short.s0   0.000  a longer label  s\n"
    )
    assert result.stderr == "osmosis-run: one rollout in full: osmosis-run show run long.s0\n"
    quiet = cli("report", "run", "-q")
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, result.stdout, "")


@pytest.mark.parametrize(
    ("options", "written", "notice"),
    [
        (["--html", "r.html"], ["r.html"], "osmosis-run: wrote HTML report r.html\n"),
        (["--junit", "j.xml"], ["j.xml"], "osmosis-run: wrote JUnit report j.xml\n"),
        (
            ["--html", "r.html", "--junit", "j.xml"],
            ["j.xml", "r.html"],
            "osmosis-run: wrote JUnit report j.xml\nosmosis-run: wrote HTML report r.html\n",
        ),
    ],
)
def test_report_files_are_the_report_stdout_gets_nothing(
    cli: Cli, tmp_path: Path, options: list[str], written: list[str], notice: str
) -> None:
    pytest.importorskip("osmosis_run.reports.html_report")
    uneven_run(cli, tmp_path)
    result = cli("report", "run", *options)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", notice)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".html", ".xml")) == written
    for name in written:
        (tmp_path / name).unlink()
    quiet = cli("report", "run", *options, "--quiet")
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")
    assert all((tmp_path / name).stat().st_size > 0 for name in written)


def test_compare_prints_on_stdout_its_verdict_on_stderr(cli: Cli, tmp_path: Path) -> None:
    pytest.importorskip("osmosis_run.reports.html_report")
    uneven_run(cli, tmp_path, "a")
    uneven_run(cli, tmp_path, "b")
    result = cli("compare", "a", "b", "--fail-on-regression", "0.1")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[:4] == [
        "osmosis-run: compare a -> b",
        "                 A      B   B - A            95% CI",
        "mean reward  0.333  0.333  +0.000  [+0.000, +0.000]",
        "pass rate    33.3%  33.3%   +0.0%    [+0.0%, +0.0%]",
    ]
    assert result.stderr.startswith("ok: mean regression <= 0.1: held (B - A = +0.0000")
    html = cli("compare", "a", "b", "--html", "d.html")
    assert (html.exit_code, html.stdout) == (0, "")
    assert html.stderr == "osmosis-run: wrote HTML report d.html\n"
    assert (tmp_path / "d.html").stat().st_size > 0
    quiet = cli("compare", "a", "b", "--html", "d2.html", "-q")
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")
    assert (tmp_path / "d2.html").exists()


def test_report_and_compare_feed_a_file_a_pager_and_grep(tmp_path: Path) -> None:
    """As a shell user types them: `> file`, `| head -1` (the reader leaves early), `| grep`.

    The last command's text (some 400 KB) overflows the pipe: the reader's leaving is certain to
    break it, and the command still ends quietly with its own exit code.
    """
    data = write_jsonl(tmp_path / "d.jsonl", UNEVEN)
    many = write_jsonl(
        tmp_path / "many.jsonl",
        [{"id": f"m{i}", "prompt": "words " * 150, "ground_truth": "x"} for i in range(400)],
    )
    cmd = shlex.join([*EXE])
    script = (
        f"{cmd} eval {data} -w eval_flows:Echo -g eval_flows:ExactMatch --out run -q 2>/dev/null\n"
        f"{cmd} report run > r.txt\n"
        f"{cmd} report run | head -1\n"
        f"{cmd} compare run run | grep '^pass rate'\n"
        f"{cmd} eval {many} -w eval_flows:Echo -g eval_flows:ExactMatch --out many -q "
        "2>/dev/null\n"
        f"{cmd} show many --worst 400 | head -1\n"
    )
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script], cwd=tmp_path, capture_output=True,
        text=True, timeout=120, check=False, env=subprocess_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "osmosis-run: finished run",
        "pass rate    33.3%  33.3%   +0.0%    [+0.0%, +0.0%]",
        "rollout   m0.s0  (row m0, line 1, sample 0)",
    ]
    hint = "osmosis-run: one rollout in full: osmosis-run show run long.s0\n"
    assert done.stderr == hint + hint  # no traceback from the pipe `head` closed
    text = (tmp_path / "r.txt").read_text()
    assert text.startswith("osmosis-run: finished run\n")
    assert "slowest rollouts\n" in text


def test_no_line_of_text_output_ends_in_whitespace(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "uneven.jsonl", UNEVEN)
    outputs = [
        cli("eval", str(data), *ECHO, "--out", "run", "--max-error-rate", "1"),
        cli("report", "run"),
        cli("report", "run", "--group-by", "metadata.kind"),
        cli("compare", "run", "run"),
        cli("show", "run", "long.s0"),
        cli("show", "run", "--worst", "3"),
        cli("validate", str(data), *ECHO),
    ]
    for result in outputs:
        assert result.exit_code == 0, result.stderr
        padded = [
            line for line in (result.stdout + result.stderr).splitlines() if line != line.rstrip()
        ]
        assert padded == []


def test_validate_says_what_it_loaded_on_stdout(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    write_jsonl(tmp_path / "conf" / "d.jsonl", qa_rows(3))
    (tmp_path / "conf" / "eval.toml").write_text(
        'dataset = "d.jsonl"\nworkflow = "eval_flows:Echo"\ngrader = "eval_flows:ExactMatch"\n'
        "samples = 2\n"
        '[workflow_config]\nfrom = "eval_flows:two_at_once"\ndescription = "x"\n'
    )
    result = cli("validate", "--config", "conf/eval.toml")
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        "config file      conf/eval.toml (read)\n"
        "workflow         eval_flows:Echo (loaded)\n"
        "workflow config  eval_flows:two_at_once, description from [workflow_config] (loaded)\n"
        "grader           eval_flows:ExactMatch (loaded)\n"
        "conf/d.jsonl: 3 rows, 0 invalid; selected 3 rows x 2 samples = 6 rollouts\n"
    )
    dry = cli("eval", "--config", "conf/eval.toml", "--dry-run")
    assert (dry.exit_code, dry.stdout, dry.stderr) == (0, result.stdout, "")
    assert not (tmp_path / "conf" / "runs").exists()


# -- grade inherits the source run's gates ----------------------------------------------------


def test_grade_of_the_bundled_example_keeps_its_error_budget(cli: Cli, tmp_path: Path) -> None:
    """configs/calculator.toml allows 5% errors; its 6 failed rows of 300 pass the grade too."""
    made = cli("eval", "--config", str(REPO / "configs" / "calculator.toml"), "--out", "calc", "-q")
    assert made.exit_code == 0, made.stderr
    grader = "osmosis_run.examples.calculator:ExactMatchGrader"
    graded = cli("grade", "calc", "-g", grader, "--out", "calc-graded", "-q")
    assert graded.exit_code == 0, graded.stderr
    assert graded.stderr.splitlines()[-2:] == [
        "ok: error budget: held (6 of 300 rollouts failed, 2.00%; 5.00% allowed)",
        "osmosis-run: see what changed: osmosis-run compare calc calc-graded",
    ]
    run_toml = (tmp_path / "calc-graded" / "run.toml").read_text()
    assert "max_error_rate = 0.05\n" in run_toml
    strict = cli("grade", "calc", "-g", grader, "--out", "strict", "-q", "--max-error-rate", "0")
    assert strict.exit_code == 3
    assert (
        "FAILED: error budget: exceeded (6 of 300 rollouts failed, 2.00%; 0 allowed)"
        in strict.stderr.splitlines()
    )


def test_grade_inherits_fail_under_and_each_gate_is_overridable(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(4))
    made = cli("eval", str(data), *ECHO, "--out", "src", "--fail-under", "mean=0.4", "-q")
    assert made.exit_code == 0, made.stderr
    assert "ok: mean >= 0.4: held (0.5000)" in made.stderr.splitlines()

    graded = cli("grade", "src", "-g", "eval_flows:LoggingGrader", "--out", "g1", "-q")
    assert graded.exit_code == 0, graded.stderr
    assert "ok: mean >= 0.4: held (1.0000)" in graded.stderr.splitlines()
    higher = cli("grade", "src", "-g", "eval_flows:ExactMatch", "--out", "g2", "-q",
                 "--fail-under", "mean=0.9")  # fmt: skip
    assert higher.exit_code == 1
    assert "FAILED: mean >= 0.9: failed by 0.4000 (0.5000)" in higher.stderr.splitlines()


# -- usage lines and metavars as click and typer users read them ------------------------------

COMMANDS = ["eval", "validate", "report", "compare", "init", "grade", "show", "serve", "view"]
# typer >= 0.28's own metavars, which osmosis-run replaces with click's.
TYPER_METAVAR = re.compile(r"<(str|int|float|bool|path|file|list\[\w+\])>|<\w+ range>|\{\w+\}")


def help_of(*args: str, columns: int = 80) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(columns)})
    assert (result.exit_code, result.stderr) == (0, ""), args
    return result.stdout


def option_columns(text: str) -> list[str]:
    """The first column of the Arguments and Options sections: names and their metavars."""
    names = []
    for line in text.splitlines():
        match = re.match(r"  (\S.*?)(  +|$)", line)
        if match and (line.startswith("  -") or re.match(r"  [A-Z\[]", line)):
            names.append(match.group(1))
    return names


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("eval", "osmosis-run eval [OPTIONS] [DATASET]"),
        ("validate", "osmosis-run validate [OPTIONS] [DATASET]"),
        ("report", "osmosis-run report [OPTIONS] RUN"),
        ("compare", "osmosis-run compare [OPTIONS] RUN_A RUN_B"),
        ("init", "osmosis-run init [OPTIONS] NAME"),
        ("grade", "osmosis-run grade [OPTIONS] RUN"),
        ("show", "osmosis-run show [OPTIONS] RUN [ROLLOUT_ID]"),
        ("serve", "osmosis-run serve [OPTIONS]"),
        ("view", "osmosis-run view [OPTIONS] [PATH]..."),
    ],
)
def test_usage_lines_and_metavars_read_as_clicks(command: str, usage: str) -> None:
    text = help_of(command)
    assert text.splitlines()[0] == f"Usage: {usage}"
    columns = option_columns(text)
    assert [name for name in columns if TYPER_METAVAR.search(name)] == []
    assert "-h, --help" in columns


def test_the_metavars_are_clicks_names() -> None:
    columns = {name.split()[0]: name for name in option_columns(help_of("eval"))}
    columns.update({name.split()[0]: name for name in option_columns(help_of("report"))})
    columns.update({name.split()[0]: name for name in option_columns(help_of("compare"))})
    assert columns["[DATASET]"] == "[DATASET]"
    assert columns["--config"] == "--config PATH"
    assert columns["--limit"] == "--limit INTEGER"
    assert columns["--pass-threshold"] == "--pass-threshold FLOAT"
    assert columns["--fail-under"] == "--fail-under TEXT"
    assert columns["--top"] == "--top INTEGER RANGE"
    assert columns["--metric"] == "--metric [mean|pass_rate]"
    assert columns["--time-limit"] == "--time-limit DURATION"  # an explicit metavar stays
    assert columns["--shuffle"] == "--shuffle / --no-shuffle"
    assert help_of("init").splitlines()[:1] == ["Usage: osmosis-run init [OPTIONS] NAME"]


def test_one_line_help_names_every_dataset_format_and_config_points_to_the_docs() -> None:
    root, eval_help = help_of(), help_of("eval")
    assert "JSONL datasets" not in root + eval_help
    assert "over datasets (JSONL, CSV or Parquet, gzipped or not, or JSONL on stdin)" in " ".join(
        root.split()
    )
    assert " ".join(eval_help.split("\n\n")[1].split()) == (
        "Run a workflow (and grader) over a JSONL, CSV or Parquet dataset and keep the results."
    )
    lines = eval_help.splitlines()
    at = next(n for n, line in enumerate(lines) if line.startswith("  --config PATH"))
    end = next(n for n in range(at + 1, len(lines)) if lines[n].startswith("  -"))
    config = " ".join(" ".join(lines[at:end]).split())
    assert "configs/" not in config
    assert config == (
        "--config PATH TOML file whose keys are these options' names (samples = 4, "
        "max_error_rate = 0.05); the command line wins over it. Every key: the docs site's "
        "reference/configuration/ page."
    )


# -- every --help ends with its page in the docs ----------------------------------------------


@pytest.mark.parametrize("columns", [80, 60])
@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_ends_with_its_docs_link(command: str | None, columns: int) -> None:
    text = help_of(*([command] if command else []), columns=columns)
    page = "reference/cli/" + (f"{command}/" if command else "")
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[-1] == f"  Docs: https://osmosis-run.readthedocs.io/en/latest/{page}"
    if command in (None, "eval", "grade"):  # the exit codes come first, then the link
        assert lines[-2].endswith("same command to resume).")


def test_the_docs_url_is_the_packages_documentation_url() -> None:
    import tomllib

    from osmosis_run.cli.links import DOCS_URL, PAGES

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["urls"]["Documentation"] == DOCS_URL
    assert sorted(name for name in PAGES if name is not None) == sorted(COMMANDS)
    assert sorted(path for path, _ in commands()[1:]) == sorted(
        f"osmosis-run {name}" for name in COMMANDS
    )


def test_every_linked_page_has_its_source_in_docs() -> None:
    from osmosis_run.cli.links import CONFIGURATION_PAGE, PAGES

    missing = []
    for page in [*PAGES.values(), CONFIGURATION_PAGE]:
        page_dir = REPO / "docs" / page
        if not (page_dir.with_suffix(".md").is_file() or (page_dir / "index.md").is_file()):
            missing.append(page)
    assert missing == []


# -- the live bar's rate ---------------------------------------------------------------------


def test_the_live_bar_shows_no_rate_until_a_second_has_passed() -> None:
    from rich.progress import Progress

    from osmosis_run.cli import progress

    now = [100.0]
    rate, _elapsed, eta = progress._labelled_columns()
    bar = Progress(rate, eta, get_time=lambda: now[0], disable=True)
    task_id = bar.add_task("eval", total=1000)
    for _ in range(3):  # three rollouts in the first 3 ms: "3000/s" would mean nothing
        now[0] += 0.001
        bar.advance(task_id)
    task = bar.tasks[0]
    assert (rate.render(task).plain, eta.render(task).plain) == ("rate -", "ETA -")
    for _ in range(20):
        now[0] += 0.1
        bar.advance(task_id)
    assert (rate.render(task).plain, eta.render(task).plain) == ("rate 11/s", "ETA 1m29s")
