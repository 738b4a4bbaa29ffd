"""What runs an attempt behind the engine's seam (``osmosis_run.run.seam``).

``local`` runs the user's classes in this process (``LocalBackend``); ``osmosis_ai`` runs
osmosis_ai classes unchanged (with osmosis_ai's own context objects); ``remote`` has a rollout
server run them (``--server URL``, needs httptools: ``osmosis-run[remote]``); ``processes`` runs
them in worker processes on this machine (``--backend processes``); ``ray`` runs them on a
pool of Ray actors (imported only for ``--backend ray``); ``fake`` answers attempts from a
function, for tests of the engine. ``executor_for(plan)`` picks the one a plan asks for.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from osmosis_run.backends.local import LocalExecutor
from osmosis_run.backends.osmosis_ai import osmosis_ai_executor, refuse_elsewhere, uses_osmosis_ai
from osmosis_run.errors import ConfigError
from osmosis_run.run.plan import Plan
from osmosis_run.run.seam import Executor
from osmosis_run.run.settings.models import Execution

__all__ = ["check_backend_options", "cool_down", "executor_for", "warm_up"]


def executor_for(
    plan: Plan,
    *,
    endpoint: tuple[str, str | None] | None = None,
    notify: Callable[[str], None] | None = None,
) -> Executor:
    """The executor of a plan: a rollout server's with ``--server``, worker processes with
    ``--backend processes``, a Ray actor pool with ``--backend ray``, else the in-process one.

    ``endpoint`` is the model URL and key the rollouts are handed when a gateway runs (its base
    URL and run key), which the Ray actors check they reach and set for their rollouts;
    ``notify`` takes one line for stderr as it happens (a lost Ray actor).

    Raises:
        ConfigError: ``--server`` without httptools installed, ``--backend ray`` without Ray.
    """
    check_backend_options(plan.settings.execution)
    if plan.settings.execution.remote:
        try:
            from osmosis_run.backends.remote import RemoteExecutor
        except ModuleNotFoundError as exc:
            raise ConfigError(
                f'--server needs {exc.name}: pip install "osmosis-run[remote]"'
            ) from None
        return RemoteExecutor.from_plan(plan)
    refuse_elsewhere(plan)  # a module-level HarborBackend runs in this process only
    if plan.settings.execution.backend == "ray":
        from osmosis_run.backends.ray import RayExecutor  # imports Ray: only when asked for

        return RayExecutor.from_plan(plan, endpoint=endpoint, notify=notify)
    if plan.settings.execution.backend == "processes":
        from osmosis_run.backends.processes import ProcessExecutor

        return ProcessExecutor.from_plan(plan, notify=notify)
    if uses_osmosis_ai(plan.local_components()):  # with osmosis_ai's own context objects
        return osmosis_ai_executor(plan)  # a module-level HarborBackend's too
    return LocalExecutor.from_plan(plan)


def check_backend_options(e: Execution) -> None:
    """Options of a backend the run does not use are a usage error rather than ignored.

    Raises:
        ConfigError: ``--backend processes|ray`` with ``--server``, or a worker option
            (``--workers``, ``--max-worker-memory``, ``--worker-recycle``) without
            ``--backend processes``.
    """
    if e.remote and e.backend != "local":
        raise ConfigError(
            f"--backend {e.backend} runs the rollouts from here, but --server has the rollout "
            "server run them; drop one of the two"
        )
    given = [
        name
        for name, value in (
            ("--workers", e.workers),
            ("--max-worker-memory", e.max_worker_memory),
            ("--worker-recycle", e.worker_recycle),
        )
        if value is not None
    ]
    if given and e.backend != "processes":
        verb = "is an option" if len(given) == 1 else "are options"
        raise ConfigError(
            f"{' and '.join(given)} {verb} of worker processes; add --backend processes"
        )


def warm_up(e: Execution) -> None:
    """Start ahead what a backend is slow to start, so that it overlaps with preparing the run:
    ``--backend processes``'s workers (most of their start is importing Python)."""
    if e.backend == "processes" and not e.remote:
        from osmosis_run.backends.processes import cpu_count
        from osmosis_run.backends.processes import warm_up as start

        start(e.workers or cpu_count())


def cool_down() -> None:
    """End what ``warm_up`` started that no executor took (the run could not start)."""
    processes = sys.modules.get("osmosis_run.backends.processes")
    if processes is not None:
        processes.discard_warm()
