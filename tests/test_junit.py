"""osmosis_run.reports.junit: one testcase per rollout; low reward is a failure, a broken rollout an error."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from run_dirs import line

from osmosis_run.errors import ConfigError
from osmosis_run.reports.junit import write_junit
from osmosis_run.results.metrics import summarize
from osmosis_run.results.records import ResultLine


def mixed() -> list[ResultLine]:
    return [
        line("q1.s0", reward=1.0, workflow_ms=1500.0, grader_ms=500.0),
        line("q2.s0", reward=0.0),
        line("q2.s1", reward=0.25),
        line(
            "q3.s0",
            status="failure",
            error_category="validation_error",
            error_message="bad output\nTraceback line",
        ),
        line("q4.s0", status="timeout", error_category="timeout", error_message="took 5s"),
        line(
            "row@7.s0",
            row_id=None,
            status="invalid",
            error_category="invalid_row",
            error_message='d.jsonl:8: "prompt" is missing',
            workflow_ms=None,
            grader_ms=None,
        ),
        line("q5.s0", status="ungraded"),
        line("q6.s0", status="removed"),
    ]


def write(tmp_path: Path, lines: list[ResultLine], *, pass_threshold: float = 1.0) -> ET.Element:
    path = tmp_path / "reports" / "junit.xml"
    summary = summarize(lines, pass_threshold=pass_threshold)
    write_junit(lines, summary, path, suite_name="smoke")
    return ET.parse(path).getroot()


def cases(root: ET.Element) -> dict[str, ET.Element]:
    return {case.get("name", ""): case for case in root.iter("testcase")}


def test_counts_on_suite_and_root(tmp_path: Path) -> None:
    root = write(tmp_path, mixed())

    suite = root.find("testsuite")
    assert suite is not None
    expected = {"tests": "8", "failures": "2", "errors": "3", "skipped": "2"}
    for element in (root, suite):
        assert {key: element.get(key) for key in expected} == expected
    assert (root.tag, root.get("name"), suite.get("name")) == ("testsuites", "smoke", "smoke")


def test_low_reward_is_a_failure_with_the_reward_in_the_message(tmp_path: Path) -> None:
    found = cases(write(tmp_path, mixed()))

    failures = {name: case.find("failure") for name, case in found.items()}
    assert {name for name, failure in failures.items() if failure is not None} == {
        "q2.s0",
        "q2.s1",
    }
    assert found["q2.s0"].find("failure").attrib == {  # type: ignore[union-attr]
        "type": "reward",
        "message": "reward 0.0 < 1.0",
    }
    assert found["q2.s1"].find("failure").get("message") == "reward 0.25 < 1.0"  # type: ignore[union-attr]
    assert list(found["q1.s0"]) == []


def test_broken_rollouts_are_errors_not_failures(tmp_path: Path) -> None:
    found = cases(write(tmp_path, mixed()))

    errors = {name: case.find("error") for name, case in found.items()}
    broken = {name: error for name, error in errors.items() if error is not None}
    assert sorted(broken) == ["q3.s0", "q4.s0", "row@7.s0"]
    assert broken["q3.s0"].attrib == {"type": "validation_error", "message": "bad output"}
    assert broken["q3.s0"].text == "bad output\nTraceback line"
    assert broken["q4.s0"].attrib == {"type": "timeout", "message": "took 5s"}
    assert broken["row@7.s0"].get("message") == 'd.jsonl:8: "prompt" is missing'
    assert all(found[name].find("failure") is None for name in broken)


def test_ungraded_and_removed_are_skipped(tmp_path: Path) -> None:
    found = cases(write(tmp_path, mixed()))

    skipped = {name for name, case in found.items() if case.find("skipped") is not None}
    assert skipped == {"q5.s0", "q6.s0"}
    assert found["q6.s0"].find("skipped").get("message") == "removed"  # type: ignore[union-attr]


def test_classname_is_the_row_and_time_is_workflow_plus_grader(tmp_path: Path) -> None:
    found = cases(write(tmp_path, mixed()))

    assert found["q2.s1"].get("classname") == "q2"
    assert found["row@7.s0"].get("classname") == "row@7"
    assert found["q1.s0"].get("time") == "2.000"
    assert found["row@7.s0"].get("time") == "0.000"


def test_suite_time_is_the_wall_time_when_known(tmp_path: Path) -> None:
    lines = mixed()
    summary = summarize(lines)
    path = tmp_path / "j.xml"

    write_junit(lines, summary, path, suite_name="s")
    summed = ET.parse(path).getroot().get("time")
    write_junit(lines, summary.model_copy(update={"wall_s": 12.5}), path, suite_name="s")
    walled = ET.parse(path).getroot().get("time")

    assert (summed, walled) == ("2.009", "12.500")


def test_the_pass_threshold_of_the_summary_decides(tmp_path: Path) -> None:
    found = cases(write(tmp_path, mixed(), pass_threshold=0.2))

    assert found["q2.s1"].find("failure") is None
    assert found["q2.s0"].find("failure").get("message") == "reward 0.0 < 0.2"  # type: ignore[union-attr]


def test_summary_numbers_are_properties(tmp_path: Path) -> None:
    root = write(tmp_path, [line("a.s0"), line("b.s0", reward=0.5)])

    properties = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert properties == {
        "pass_threshold": "1.0",
        "mean_reward": "0.75",
        "mean_reward_graded": "0.75",
        "pass_rate": "0.5",
    }


def test_control_characters_are_stripped_so_the_xml_stays_well_formed(tmp_path: Path) -> None:
    message = "bad \x00byte\x1b[31m red\x7f ok\ttab \ud800 end"
    lines = [line("x.s0", status="failure", error_message=message)]

    root = write(tmp_path, lines)

    error = next(root.iter("error"))
    assert error.get("message") == "bad byte[31m red\x7f ok\ttab  end"
    assert error.text == "bad byte[31m red\x7f ok\ttab  end"


def test_the_file_is_replaced_whole_and_no_temporary_is_left(tmp_path: Path) -> None:
    write(tmp_path, mixed())
    write(tmp_path, [line("only.s0")])

    assert [p.name for p in (tmp_path / "reports").iterdir()] == ["junit.xml"]
    text = (tmp_path / "reports" / "junit.xml").read_text(encoding="utf-8")
    assert text.startswith("<?xml version='1.0' encoding='utf-8'?>\n<testsuites")
    assert [case.get("name") for case in ET.fromstring(text).iter("testcase")] == ["only.s0"]


def test_an_unwritable_path_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    target = tmp_path / "file" / "junit.xml"

    with pytest.raises(ConfigError) as caught:
        write_junit([line("a.s0")], summarize([]), target, suite_name="s")

    assert str(caught.value) == (
        f"cannot write JUnit report {target}: File exists; choose another path"
    )
