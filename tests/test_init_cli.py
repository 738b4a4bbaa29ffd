"""`osmosis-run init`: the project it writes runs at once, offline, from any folder; it refuses
to write over a folder that is not empty unless told to."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import results
from typer.testing import Result

Cli = Callable[..., Result]


def files(module: str = "demo_rollout") -> list[str]:
    return [
        f"{module}.py",
        "dataset.jsonl",
        "eval.toml",
        f"test_{module}.py",
        "README.md",
        ".gitignore",
    ]


FILES = files()


@pytest.fixture(autouse=True)
def _forget_rollout_modules() -> Iterator[None]:
    """Projects of one name share a module name; import each one afresh."""

    def forget() -> None:
        for name in [n for n in sys.modules if n.endswith("_rollout")]:
            del sys.modules[name]

    forget()
    yield
    forget()


def created(where: str, module: str = "demo_rollout") -> str:
    lines = [f"created {where}/{name}\n" for name in files(module)]
    return "".join(lines) + (
        f"next: osmosis-run eval --config {where}/eval.toml  "
        f"(and: pytest {where}/test_{module}.py)\n"
    )


def test_init_writes_a_project_that_evaluates_at_once(cli: Cli, tmp_path: Path) -> None:
    made = cli("init", "demo")
    assert made.exit_code == 0
    assert made.stderr == created("demo")
    assert made.stdout == ""
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == sorted(FILES)

    run = cli("eval", "--config", "demo/eval.toml", "--out", "out")
    assert run.exit_code == 0, run.stderr
    lines = results(tmp_path / "out")
    assert len(lines) == 10
    assert {line.status for line in lines} == {"success"}
    rewards = {line.row_id: line.reward for line in lines}
    assert rewards == {f"q{i:02}": 1.0 for i in range(1, 10)} | {"q10": 0.0}
    assert lines[0].messages is not None
    assert lines[0].messages[-1] == {"role": "assistant", "content": "The answer is 42."}


def test_the_project_runs_from_any_folder(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("init", "demo").exit_code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    run = cli("eval", "--config", str(tmp_path / "demo" / "eval.toml"))
    assert run.exit_code == 0, run.stderr
    # Run directories go next to eval.toml (runs_dir = "runs"), not into the current folder.
    assert list(elsewhere.iterdir()) == []
    (run_dir,) = (tmp_path / "demo" / "runs").iterdir()
    assert len(results(run_dir)) == 10


def test_the_project_validates_clean(cli: Cli, tmp_path: Path) -> None:
    assert cli("init", "demo").exit_code == 0
    checked = cli("validate", "--config", "demo/eval.toml")
    assert checked.exit_code == 0
    assert (checked.stdout, checked.stderr) == (
        "config file      demo/eval.toml (read)\n"
        "workflow         demo_rollout:DemoWorkflow (loaded)\n"
        "workflow config  demo_rollout:config, answer_prefix from [workflow_config] (loaded)\n"
        "grader           demo_rollout:DemoGrader (loaded)\n"
        "demo/dataset.jsonl: 10 rows, 0 invalid\n",
        "",
    )


@pytest.mark.slow
def test_the_generated_tests_pass(cli: Cli, tmp_path: Path) -> None:
    assert cli("init", "my-agent").exit_code == 0
    project = tmp_path / "my-agent"
    assert (
        "class MyAgentWorkflow(AgentWorkflow[MyAgentConfig]):"
        in (project / "my_agent_rollout.py").read_text()
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("6 passed")


@pytest.mark.slow
def test_two_projects_side_by_side_are_tested_by_one_pytest(cli: Cli, tmp_path: Path) -> None:
    """No "import file mismatch": each project's module and tests have names of their own."""
    made = cli("init", "alpha")
    assert made.stderr == created("alpha", "alpha_rollout")
    assert cli("init", "Beta-Two").stderr == created("Beta-Two", "beta_two_rollout")
    assert sorted(p.name for p in (tmp_path / "Beta-Two").iterdir()) == sorted(
        files("beta_two_rollout")
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("12 passed")


def test_two_projects_run_in_one_process(cli: Cli, tmp_path: Path) -> None:
    assert cli("init", "alpha").exit_code == 0
    assert cli("init", "beta").exit_code == 0
    for name in ("alpha", "beta"):
        run = cli("eval", "--config", f"{name}/eval.toml", "--out", f"out-{name}")
        assert run.exit_code == 0, run.stderr
        assert len(results(tmp_path / f"out-{name}")) == 10
    toml = (tmp_path / "beta" / "eval.toml").read_text()
    assert 'workflow = "beta_rollout:BetaWorkflow"\n' in toml


def test_dir_chooses_where_the_project_goes(cli: Cli, tmp_path: Path) -> None:
    made = cli("init", "demo", "--dir", "nested/place")
    assert made.exit_code == 0
    assert made.stderr == created("nested/place")
    assert not (tmp_path / "demo").exists()
    toml = (tmp_path / "nested" / "place" / "eval.toml").read_text()
    assert "#   osmosis-run eval --config nested/place/eval.toml\n" in toml
    run = cli("eval", "--config", "nested/place/eval.toml", "--out", "out")
    assert run.exit_code == 0, run.stderr


def test_an_existing_empty_folder_is_used(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    made = cli("init", "demo")
    assert made.exit_code == 0
    assert (tmp_path / "demo" / "demo_rollout.py").is_file()


def test_a_folder_that_is_not_empty_is_refused(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "notes.txt").write_text("mine")
    refused = cli("init", "demo")
    assert refused.exit_code == 2
    assert refused.stderr == (
        "error: demo exists and is not empty; choose another NAME or --dir, "
        "or pass --force to write the project files into it\n"
    )
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["notes.txt"]


def test_force_writes_into_a_folder_that_is_not_empty(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "notes.txt").write_text("mine")
    (tmp_path / "demo" / "demo_rollout.py").write_text("stale")
    made = cli("init", "demo", "--force")
    assert made.exit_code == 0
    assert made.stderr == created("demo")
    assert (tmp_path / "demo" / "notes.txt").read_text() == "mine"
    assert (tmp_path / "demo" / "demo_rollout.py").read_text().startswith('"""demo: ')
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == sorted([*FILES, "notes.txt"])
    assert cli("eval", "--config", "demo/eval.toml", "--out", "out").exit_code == 0


def test_a_file_in_the_way_is_refused_even_with_force(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "demo").write_text("a file")
    refused = cli("init", "demo", "--force")
    assert refused.exit_code == 2
    assert refused.stderr == (
        "error: demo exists and is not a folder; choose another NAME or --dir\n"
    )


@pytest.mark.parametrize("name", ["my agent", "1st", "../up", "a/b", "-x", "_x", "é", "x" * 41])
def test_names_that_cannot_name_classes_are_refused(cli: Cli, tmp_path: Path, name: str) -> None:
    refused = cli("init", "--", name)
    assert refused.exit_code == 2
    assert refused.stderr == (
        f'error: "{name}" is not a valid project name: use letters, digits, "_" and "-", '
        "starting with a letter, at most 40 characters (for example my_agent); "
        "to choose where the project goes, use --dir\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_run_toml_reproduces_the_run_from_another_folder(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("init", "demo").exit_code == 0
    assert cli("eval", "--config", "demo/eval.toml", "--out", "out").exit_code == 0
    before = (tmp_path / "out" / "results.jsonl").read_bytes()
    # A new process would not have the project's folder on sys.path, nor its module imported.
    sys.modules.pop("demo_rollout", None)
    project = str((tmp_path / "demo").resolve())
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != project])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    again = cli("eval", "--config", str(tmp_path / "out" / "run.toml"))
    assert again.exit_code == 0, again.stderr
    assert (tmp_path / "out" / "results.jsonl").read_bytes() == before
