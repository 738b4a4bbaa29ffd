"""The interop suite: osmosis-run against the real osmosis-ai package (Python >= 3.12).

Collected only where ``osmosis_ai`` is importable:

    PYTHONPATH=. /path/to/py312-venv/bin/python -m pytest tests/interop -q

With ``OSMOSIS_RUN_INTEROP_STRICT=1`` (CI) the suite must run: a missing osmosis_ai is a
collection error, and every skipped test is reported as a failure.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest

# Read once and taken out of the environment: osmosis-run refuses unknown OSMOSIS_RUN_* variables,
# and the suite starts osmosis-run processes.
STRICT = os.environ.pop("OSMOSIS_RUN_INTEROP_STRICT", None) == "1"
HAVE_OSMOSIS_AI = importlib.util.find_spec("osmosis_ai") is not None

# LiteLLM fetches its model cost map from the network when it is imported: use its local copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

if not HAVE_OSMOSIS_AI and not STRICT:
    collect_ignore_glob = ["test_*.py"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under OSMOSIS_RUN_INTEROP_STRICT=1, a skipped interop test is a failed one."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if STRICT and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under OSMOSIS_RUN_INTEROP_STRICT=1: {reason}"
