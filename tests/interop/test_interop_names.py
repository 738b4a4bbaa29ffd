"""Every name the osmosis-ai scaffold imports from osmosis_ai.rollout is importable from
osmosis_run (create_rollout_server from osmosis_run.server): the import-line port works."""

from __future__ import annotations

import ast
from importlib import resources

import osmosis_run
import osmosis_run.server
from interop.test_interop_serve import port_imports


def scaffold_imports() -> list[tuple[str, str]]:
    """(module, name) of each ``from osmosis_ai.rollout... import name`` in the scaffold."""
    source = resources.files("osmosis_ai.templates._scaffolds.rollout") / "main.py.tpl"
    tree = ast.parse(source.read_text())
    return [
        (node.module or "", alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("osmosis_ai.")
        for alias in node.names
    ]


def test_every_scaffold_name_ports_by_the_import_line() -> None:
    imported = scaffold_imports()
    assert {name for _, name in imported} == {
        "AgentWorkflow", "LocalBackend", "AgentWorkflowContext", "GraderContext", "Grader",
        "create_rollout_server",
    }  # fmt: skip
    for module, name in imported:
        namespace: dict[str, object] = {}
        exec(port_imports(f"from {module} import {name}"), namespace)
        home = osmosis_run.server if name == "create_rollout_server" else osmosis_run
        assert namespace[name] is getattr(home, name)
