"""The package's layers: each imports only the layers below it (the layout comment in
``osmosis_run/__init__.py`` draws them), so the architecture stays visible in the tree."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "osmosis_run"

# Bottom first. A module may import its own layer and the layers before it.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "_construct", "_json", "_redact", "retry", "eventloop"),
    ("http",),
    ("sdk",),
    ("results",),
    ("store",),
    ("run",),
    ("gateway",),
    ("backends",),
    ("server",),
    ("reports",),
    ("examples",),
    ("view",),
    ("cli", "__main__"),
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def top(module: str) -> str | None:
    """The first component under osmosis_run of a dotted module name, if it is ours."""
    parts = module.split(".")
    if parts[0] != "osmosis_run":
        return None
    return parts[1] if len(parts) > 1 else ""


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "osmosis_run":  # a module of ours, or a public name of the package
                names.update(
                    f"osmosis_run.{alias.name}"
                    for alias in node.names
                    if (PACKAGE / alias.name).is_dir() or (PACKAGE / f"{alias.name}.py").is_file()
                )
    return names


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_imports_only_its_layer_and_those_below(path: Path) -> None:
    own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    assert own in RANK, f"{own} is in no layer: add it to LAYERS and to the layout comment"
    for name in imported(path):
        other = top(name)
        if other is None or other == "":  # the package itself: its public SDK names
            continue
        assert other in RANK, f"{path.name} imports {name}, which is in no layer"
        assert RANK[other] <= RANK[own], (
            f"{path.relative_to(PACKAGE)} imports {name} (a layer above)"
        )


def test_the_sdk_imports_nothing_of_the_engine() -> None:
    for path in (PACKAGE / "sdk").glob("*.py"):
        for name in imported(path):
            assert top(name) in (
                None,
                "",
                "sdk",
                "errors",
                "_construct",
                "_json",
                "_redact",
                "retry",
            ), (
                path.name,
                name,
            )
