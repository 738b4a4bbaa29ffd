"""What runs an attempt behind the engine's seam (``osmosis_run.run.seam``).

``local`` runs the user's classes in this process (``LocalBackend``); ``ray`` runs them on a pool
of Ray actors (imported only for ``--backend ray``); ``fake`` answers attempts from a function,
for tests of the engine. ``executor_for(plan)`` picks the one a plan asks for.
"""

from __future__ import annotations

from osmosis_run.backends.local import LocalExecutor
from osmosis_run.run.plan import Plan
from osmosis_run.run.seam import Executor

__all__ = ["executor_for"]


def executor_for(plan: Plan) -> Executor:
    """The executor of a plan: in-process, or a Ray actor pool for ``--backend ray``.

    Raises:
        ConfigError: ``--backend ray`` without Ray installed.
    """
    if plan.settings.execution.backend == "ray":
        from osmosis_run.backends.ray import RayExecutor  # imports Ray: only when asked for

        return RayExecutor.from_plan(plan)
    return LocalExecutor.from_plan(plan)
