"""Every backend behind the execution seam is an ``Executor`` (``osmosis_run/run/seam.py``).

mypy (strict, over tests/ too) checks the list below against the protocol; the test checks the
same at run time, member by member, so a backend that drifts from the seam fails here with its
name rather than in the middle of a run.
"""

from __future__ import annotations

import inspect

import pytest

from osmosis_run.backends.fake import FakeExecutor
from osmosis_run.backends.local import LocalExecutor
from osmosis_run.backends.osmosis_ai import OsmosisAiExecutor
from osmosis_run.backends.processes import ProcessExecutor
from osmosis_run.backends.ray import RayExecutor
from osmosis_run.backends.regrade import RegradeExecutor
from osmosis_run.backends.remote import RemoteExecutor
from osmosis_run.run import seam
from osmosis_run.run.seam import Executor

EXECUTORS: list[type[Executor]] = [
    LocalExecutor,
    OsmosisAiExecutor,
    RemoteExecutor,
    ProcessExecutor,
    RayExecutor,
    RegradeExecutor,
    FakeExecutor,
]

MEMBERS = {
    name: member
    for name, member in vars(Executor).items()
    if not name.startswith("_") and (callable(member) or isinstance(member, property))
}


def test_the_protocol_is_what_the_module_docstring_draws() -> None:
    assert sorted(MEMBERS) == [
        "adopt_artifacts_dirs",
        "close",
        "limit",
        "local_artifacts",
        "open",
        "run",
    ]
    doc = seam.__doc__ or ""
    for name in MEMBERS:
        assert f" {name}" in doc.split("``deadlines``")[0], name
    for executor in EXECUTORS:
        assert f"**{executor.__name__}**" in doc, executor.__name__


@pytest.mark.parametrize("executor", EXECUTORS, ids=lambda cls: cls.__name__)
def test_each_backend_has_every_member_of_the_seam(executor: type[Executor]) -> None:
    for name, member in MEMBERS.items():
        theirs = inspect.getattr_static(executor, name)
        if isinstance(member, property):
            assert isinstance(theirs, property), f"{executor.__name__}.{name} is not a property"
            continue
        assert inspect.iscoroutinefunction(theirs) == inspect.iscoroutinefunction(member), (
            f"{executor.__name__}.{name}: async where the seam is not, or the reverse"
        )
        assert list(inspect.signature(theirs).parameters) == list(
            inspect.signature(member).parameters
        ), f"{executor.__name__}.{name}{inspect.signature(theirs)}"
