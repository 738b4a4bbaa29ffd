"""A run as a JUnit XML report, for CI systems that show test results.

One ``<testcase>`` per rollout (classname: the row, name: the rollout id). A rollout whose reward
is below the pass threshold is a ``<failure>``; a failed, timed-out or invalid rollout is an
``<error>`` (the workflow or grader broke, which is not the same as a low score); an ungraded or
removed rollout, which has no score, is ``<skipped/>`` (the outcome rule, ``results.outcome``).

The file is written as ``xml.etree`` would write the tree (``ET.indent``, UTF-8, the same
escapes), one testcase at a time: a run of a million rollouts is a million testcases streamed
to a file beside the report, whose counts then head it, never a million elements in memory.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from osmosis_run.reports._files import write_whole
from osmosis_run.results import outcome
from osmosis_run.results.records import ResultLine, Summary

__all__ = ["write_junit"]

# What XML 1.0 cannot hold: control characters other than tab, newline and carriage return,
# lone surrogates, and U+FFFE/U+FFFF. Stripped so that any error message keeps the file valid.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_COUNTS = ("tests", "failures", "errors", "skipped")
# xml.etree's escapes: in text, & < >; in attribute values also " and the three white spaces.
_TEXT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_ATTRIBUTE = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        '"': "&quot;",
        "\r": "&#13;",
        "\n": "&#10;",
        "\t": "&#09;",
    }
)


def write_junit(
    lines: Iterable[ResultLine], summary: Summary, path: Path, *, suite_name: str
) -> None:
    """Write the rollouts of a run to ``path`` as one JUnit test suite.

    Args:
        lines: the run's results, one per rollout (read once, in order).
        summary: the run's summary; its pass threshold decides failures.
        path: the XML file to write (replaced whole; its folder is created).
        suite_name: the name of the test suite.

    Raises:
        ConfigError: the file cannot be written.
    """

    def write(temporary: Path) -> None:
        cases = temporary.with_name(f"{temporary.name}.cases")
        try:
            with cases.open("w", encoding="utf-8", newline="\n") as out:
                counts, total_s = _write_cases(out, lines, summary.pass_threshold)
            wall_s = summary.wall_s if summary.wall_s is not None else total_s
            with temporary.open("wb") as out, cases.open("rb") as written:
                out.write(_head(suite_name, summary, counts, wall_s).encode("utf-8"))
                shutil.copyfileobj(written, out, 1 << 20)
                out.write(b"  </testsuite>\n</testsuites>")
        finally:
            cases.unlink(missing_ok=True)

    write_whole(path, write, what="JUnit report ")


def _head(name: str, summary: Summary, counts: dict[str, int], wall_s: float) -> str:
    """The declaration, both suites' start tags with their counts, and the properties."""
    totals = "".join(f' {key}="{counts[key]}"' for key in _COUNTS) + f' time="{wall_s:.3f}"'
    suite = _attribute(name)
    properties = "".join(
        f'      <property name="{_attribute(key)}" value="{_attribute(value)}" />\n'
        for key, value in _properties(summary)
    )
    return (
        "<?xml version='1.0' encoding='utf-8'?>\n"
        f'<testsuites name="{suite}"{totals}>\n'
        f'  <testsuite name="{suite}"{totals}>\n'
        f"    <properties>\n{properties}    </properties>\n"
    )


def _properties(summary: Summary) -> list[tuple[str, str]]:
    values = {
        "pass_threshold": summary.pass_threshold,
        "mean_reward": summary.reward_all.mean,
        "mean_reward_graded": summary.reward_graded.mean,
        "pass_rate": summary.pass_rate,
    }
    return [(name, "" if value is None else repr(value)) for name, value in values.items()]


def _write_cases(
    out: TextIO, lines: Iterable[ResultLine], threshold: float
) -> tuple[dict[str, int], float]:
    """Write one testcase per rollout; return the counts and the summed seconds."""
    counts = dict.fromkeys(_COUNTS, 0)
    total_s = 0.0
    for line in lines:
        case, kind, seconds = _testcase(line, threshold)
        out.write(case)
        counts["tests"] += 1
        if kind is not None:
            counts[kind] += 1
        total_s += seconds
    return counts, total_s


def _testcase(line: ResultLine, threshold: float) -> tuple[str, str | None, float]:
    """One rollout's testcase; its count key (None: passed) and its seconds."""
    seconds = ((line.workflow_ms or 0.0) + (line.grader_ms or 0.0)) / 1000
    case = (
        f'    <testcase classname="{_attribute(_classname(line))}" '
        f'name="{_attribute(line.rollout_id)}" time="{seconds:.3f}"'
    )
    if outcome.is_error(line.status):
        message = _clean(line.error_message or line.status)
        kind = _attribute(line.error_category or line.status)
        first = _attribute(message.splitlines()[0] if message else "")
        error = f'<error type="{kind}" message="{first}"'
        error += f">{message.translate(_TEXT)}</error>" if message else " />"
        return f"{case}>\n      {error}\n    </testcase>\n", "errors", seconds
    reward = outcome.score(line.status, line.reward)
    if reward is None:
        skipped = f'<skipped message="{_attribute(line.status)}" />'
        return f"{case}>\n      {skipped}\n    </testcase>\n", "skipped", seconds
    if not outcome.passed(line.status, reward, threshold):
        message = _attribute(f"reward {reward!r} < {threshold!r}")
        failure = f'<failure type="reward" message="{message}" />'
        return f"{case}>\n      {failure}\n    </testcase>\n", "failures", seconds
    return f"{case} />\n", None, seconds


def _classname(line: ResultLine) -> str:
    if line.row_id is not None:
        return str(line.row_id)
    return outcome.split_rollout_id(line.rollout_id)[0]


def _clean(text: str) -> str:
    return _NOT_XML.sub("", text)


def _attribute(text: str) -> str:
    """``text`` cleaned and escaped for an attribute value, as xml.etree writes it."""
    return _clean(text).translate(_ATTRIBUTE)
