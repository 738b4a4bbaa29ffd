"""The SDK: what workflow and grader authors write against (the ``osmosis_ai.rollout`` model).

types, contexts, the base classes, ``LocalBackend`` and ``module:attr`` loading. It imports
nothing of the engine, the run directory or the reports.
"""
