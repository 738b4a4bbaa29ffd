"""The ``--backend ray`` options, on the host: no Ray cluster starts here (see test_ray.py).

Where each value comes from (command line > environment > config file > default), what a bad
value says, that the backend stays out of the fingerprint, and that a local run never imports
Ray.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import typer
from conftest import subprocess_env, write_jsonl
from typer.testing import Result

from osmosis_run.cli import app
from osmosis_run.run.components import load_components, selection_of
from osmosis_run.run.fingerprint import build_fingerprint, default_run_dir
from osmosis_run.run.settings import EvalSettings, Execution, option_name, resolve_settings

ROW = {"prompt": "a", "ground_truth": "a"}


def test_the_ray_options_come_from_the_config_file_the_environment_and_the_command_line(
    tmp_path: Path,
) -> None:
    config = tmp_path / "eval.toml"
    config.write_text(
        'backend = "ray"\nray_address = "10.0.0.5:6379"\nray_actors = 4\nray_actor_cpus = 1\n'
        "ray_batch = 16\nray_shared_fs = true\nray_ready_timeout = 30\n"
    )
    from_file = resolve_settings({}, config_file=config, environ={}).execution
    assert (from_file.backend, from_file.ray_address, from_file.ray_actors) == (
        "ray",
        "10.0.0.5:6379",
        4,
    )
    assert (from_file.ray_actor_cpus, from_file.ray_batch, from_file.ray_shared_fs) == (1, 16, True)
    assert from_file.ray_ready_timeout == 30
    env = {"OSMOSIS_RUN_RAY_BATCH": "32", "OSMOSIS_RUN_RAY_ACTORS": "8"}
    over = resolve_settings({"ray_actors": 2}, config_file=config, environ=env).execution
    assert (over.ray_batch, over.ray_actors) == (32, 2)  # env beats the file, the CLI beats env


def test_ray_batch_auto_comes_from_every_source_in_any_case(tmp_path: Path) -> None:
    config = tmp_path / "eval.toml"
    config.write_text('ray_batch = "auto"\n')
    assert resolve_settings({}, config_file=config, environ={}).execution.ray_batch == "auto"
    env = {"OSMOSIS_RUN_RAY_BATCH": "AUTO"}
    assert resolve_settings({}, environ=env).execution.ray_batch == "auto"
    assert resolve_settings({"ray_batch": "8"}, environ=env).execution.ray_batch == 8
    assert resolve_settings({"ray_batch": " Auto "}, environ={}).execution.ray_batch == "auto"


def test_the_defaults_run_locally_with_adaptive_batches() -> None:
    e = EvalSettings().execution
    assert (e.backend, e.ray_address, e.ray_actors, e.ray_actor_cpus, e.ray_batch) == (
        "local",
        None,
        None,
        0.0,
        "auto",
    )
    assert (e.ray_shared_fs, e.ray_ready_timeout) == (False, 120.0)


def test_evals_ray_options_are_the_settings_and_say_their_defaults() -> None:
    """Each ``--ray-*`` option is an ``Execution`` field (the one definition the Ray backend
    reads); the defaults the help text states are the model's."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    command = group.commands["eval"]
    helps = {
        name: param.help or ""
        for param in command.params
        if isinstance(param, typer.core.TyperOption)
        for name in param.opts
        if name.startswith("--ray-")
    }
    fields = Execution.model_fields
    assert sorted(helps) == sorted(option_name(key) for key in fields if key.startswith("ray_"))
    assert f"(default {fields['ray_ready_timeout'].default:g})" in helps["--ray-ready-timeout"]
    assert f"{fields['ray_batch'].default} (default)" in helps["--ray-batch"]
    assert f"{fields['ray_actor_cpus'].default:g} for" in helps["--ray-actor-cpus"]
    assert "(default)" in helps["--ray-actor-cpus"]


def test_a_bad_backend_or_batch_is_one_line_and_exit_2(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    write_jsonl(tmp_path / "d.jsonl", [ROW])
    bad = cli("eval", "d.jsonl", "--workflow", "eval_flows:Echo", "--backend", "spark")
    assert bad.exit_code == 2
    assert bad.stderr == (
        "error: --backend (command line): Input should be 'local', 'processes' or 'ray' (got 'spark')\n"
    )
    zero = cli("eval", "d.jsonl", "--workflow", "eval_flows:Echo", "--ray-batch", "0")
    assert zero.exit_code == 2
    assert zero.stderr == (
        "error: --ray-batch (command line): Input should be greater than or equal to 1 (got 0)\n"
    )
    word = cli("eval", "d.jsonl", "--workflow", "eval_flows:Echo", "--ray-batch", "lots")
    assert word.exit_code == 2
    assert word.stderr == (
        "error: --ray-batch (command line): Input should be a whole number of rollouts (1 or "
        "more) or 'auto' (got 'lots')\n"
    )
    assert not (tmp_path / "runs").exists()


def test_the_backend_is_not_part_of_the_fingerprint(tmp_path: Path) -> None:
    dataset = write_jsonl(tmp_path / "d.jsonl", [ROW])
    prints = []
    for extra in ({}, {"backend": "ray", "ray_actors": 3, "ray_batch": 64}):
        settings = EvalSettings(dataset=str(dataset), workflow="eval_flows:Echo", **extra)
        parts = load_components(settings)
        fingerprint = build_fingerprint(
            settings, selection_of(settings), parts.workflow, parts.grader
        )
        prints.append((fingerprint, default_run_dir(settings, fingerprint)))
    assert prints[0] == prints[1]


def test_a_local_run_never_imports_ray(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "d.jsonl", [ROW])
    code = (
        "import sys\n"
        "from osmosis_run.cli import main\n"
        "sys.argv = ['osmosis-run', 'eval', 'd.jsonl', '--workflow', 'eval_flows:Echo']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
        "print(code, 'ray' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.splitlines()[-1] == "0 False", done.stderr


def test_backend_ray_without_ray_installed_says_how_to_get_it(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "d.jsonl", [ROW])
    code = (
        "import sys\n"
        "sys.modules['ray'] = None  # as if Ray were not installed\n"
        "from osmosis_run.cli import main\n"
        "sys.argv = ['osmosis-run', 'eval', 'd.jsonl', '--workflow', 'eval_flows:Echo',\n"
        "            '--backend', 'ray', '--out', 'run']\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        'error: --backend ray needs Ray on this machine: pip install "osmosis-run[ray]"'
    ]
    assert not (tmp_path / "run").exists()


def test_an_address_nobody_listens_on_is_refused_at_once(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    with socket.socket() as s:  # a loopback port that was free a moment ago: refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    write_jsonl(tmp_path / "d.jsonl", [ROW])
    done = cli(
        "eval", "d.jsonl", "-w", "eval_flows:Echo", "--backend", "ray",
        "--ray-address", f"127.0.0.1:{port}", "--out", "run",
    )  # fmt: skip
    assert done.exit_code == 2
    assert done.stderr == (
        f"error: cannot join the Ray cluster at 127.0.0.1:{port}: Connection refused; is "
        "`ray start --head` running there, and is the port right?\n"
    )
