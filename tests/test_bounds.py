"""Dependency bounds: constraints/lowest.txt pins exactly the floors pyproject.toml declares.

CI runs the suite with those pins as well as with the newest versions, so a floor is a tested
version only while the two files agree.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENT = re.compile(r"(?P<name>[A-Za-z0-9._-]+)(?P<specifiers>[^;]*)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def floors() -> dict[str, str | None]:
    """Each runtime and test requirement: the version its ``>=`` or ``==`` names, or None."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found: dict[str, str | None] = {}
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        match = REQUIREMENT.fullmatch(requirement.replace(" ", ""))
        assert match is not None, requirement
        lows = [s[2:] for s in match["specifiers"].split(",") if s.startswith((">=", "=="))]
        found[canonical(match["name"])] = lows[0] if len(lows) == 1 else None
    return found


def pins() -> dict[str, str]:
    text = (ROOT / "constraints" / "lowest.txt").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines()]
    pairs = [line.split("==") for line in lines if line and not line.startswith("#")]
    return {canonical(name): version for name, version in pairs}


def test_the_lowest_constraints_pin_every_floor_pyproject_declares() -> None:
    assert pins() == floors()
