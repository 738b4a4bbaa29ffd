"""What runs an attempt behind the engine's seam (``osmosis_run.run.seam``).

``local`` runs the user's classes in this process (``LocalBackend``); ``fake`` answers attempts
from a function, for tests of the engine; ``osmosis_ai`` runs osmosis_ai classes unchanged
(with osmosis_ai's own context objects). ``executor_for(plan)`` picks the one a plan asks for.
"""

from __future__ import annotations

from osmosis_run.backends.local import LocalExecutor
from osmosis_run.backends.osmosis_ai import OsmosisAiExecutor, uses_osmosis_ai
from osmosis_run.run.plan import Plan

__all__ = ["executor_for"]


def executor_for(plan: Plan) -> LocalExecutor:
    """The executor of a plan: today the in-process one."""
    if uses_osmosis_ai(plan.components):  # osmosis_ai classes, with osmosis_ai's own objects
        return OsmosisAiExecutor.from_plan(plan)
    return LocalExecutor.from_plan(plan)
