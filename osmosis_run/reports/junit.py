"""A run as a JUnit XML report, for CI systems that show test results.

One ``<testcase>`` per rollout (classname: the row, name: the rollout id). A rollout whose reward
is below the pass threshold is a ``<failure>``; a failed, timed-out or invalid rollout is an
``<error>`` (the workflow or grader broke, which is not the same as a low score); an ungraded or
removed rollout, which has no score, is ``<skipped/>`` (the outcome rule, ``results.outcome``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path

from osmosis_run.reports._files import write_whole
from osmosis_run.results import outcome
from osmosis_run.results.records import ResultLine, Summary

__all__ = ["write_junit"]

# What XML 1.0 cannot hold: control characters other than tab, newline and carriage return,
# lone surrogates, and U+FFFE/U+FFFF. Stripped so that any error message keeps the file valid.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_COUNTS = ("tests", "failures", "errors", "skipped")


def write_junit(
    lines: Iterable[ResultLine], summary: Summary, path: Path, *, suite_name: str
) -> None:
    """Write the rollouts of a run to ``path`` as one JUnit test suite.

    Args:
        lines: the run's results, one per rollout.
        summary: the run's summary; its pass threshold decides failures.
        path: the XML file to write (replaced whole; its folder is created).
        suite_name: the name of the test suite.

    Raises:
        ConfigError: the file cannot be written.
    """
    suite = ET.Element("testsuite", name=_clean(suite_name))
    properties = ET.SubElement(suite, "properties")
    for name, value in _properties(summary):
        ET.SubElement(properties, "property", name=name, value=value)
    counts = dict.fromkeys(_COUNTS, 0)
    total_s = 0.0
    for line in lines:
        outcome, seconds = _testcase(suite, line, summary.pass_threshold)
        counts["tests"] += 1
        if outcome is not None:
            counts[outcome] += 1
        total_s += seconds
    wall_s = summary.wall_s if summary.wall_s is not None else total_s
    root = ET.Element("testsuites", name=_clean(suite_name))
    for element in (root, suite):
        for key in _COUNTS:
            element.set(key, str(counts[key]))
        element.set("time", f"{wall_s:.3f}")
    root.append(suite)
    _write(ET.ElementTree(root), path)


def _properties(summary: Summary) -> list[tuple[str, str]]:
    values = {
        "pass_threshold": summary.pass_threshold,
        "mean_reward": summary.reward_all.mean,
        "mean_reward_graded": summary.reward_graded.mean,
        "pass_rate": summary.pass_rate,
    }
    return [(name, "" if value is None else repr(value)) for name, value in values.items()]


def _testcase(suite: ET.Element, line: ResultLine, threshold: float) -> tuple[str | None, float]:
    """Add one rollout's testcase; return its outcome count key (None: passed) and seconds."""
    seconds = ((line.workflow_ms or 0.0) + (line.grader_ms or 0.0)) / 1000
    case = ET.SubElement(
        suite,
        "testcase",
        classname=_clean(_classname(line)),
        name=_clean(line.rollout_id),
        time=f"{seconds:.3f}",
    )
    if outcome.is_error(line.status):
        message = _clean(line.error_message or line.status)
        error = ET.SubElement(
            case,
            "error",
            type=_clean(line.error_category or line.status),
            message=message.splitlines()[0] if message else "",
        )
        error.text = message
        return "errors", seconds
    reward = outcome.score(line.status, line.reward)
    if reward is None:
        ET.SubElement(case, "skipped", message=line.status)
        return "skipped", seconds
    if not outcome.passed(line.status, reward, threshold):
        ET.SubElement(case, "failure", type="reward", message=f"reward {reward!r} < {threshold!r}")
        return "failures", seconds
    return None, seconds


def _classname(line: ResultLine) -> str:
    if line.row_id is not None:
        return str(line.row_id)
    return outcome.split_rollout_id(line.rollout_id)[0]


def _clean(text: str) -> str:
    return _NOT_XML.sub("", text)


def _write(tree: ET.ElementTree[ET.Element], path: Path) -> None:
    """Write whole: to a temporary name beside ``path``, then renamed into place."""
    ET.indent(tree)
    write_whole(
        path,
        lambda temporary: tree.write(temporary, encoding="utf-8", xml_declaration=True),
        what="JUnit report ",
    )
