"""Datasets beyond JSON Lines: CSV, Parquet and gzip files give the results the same rows give in
JSONL, with osmosis-ai's table rules; a bad row is an ``invalid`` result naming its row; a file
that is not what its name says is one line naming what it looks like (exit 2, nothing runs)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import results, subprocess_env, write_jsonl
from typer.testing import Result

from osmosis_run.results.records import ResultLine, Summary
from osmosis_run.run import _formats, dataset
from osmosis_run.run.dataset import count_rows, iter_rows
from osmosis_run.run.selection import Selection, count_planned

Cli = Callable[..., Result]
ECHO = ["--workflow", "eval_flows:Echo", "--grader", "eval_flows:ExactMatch"]
# What validate says it loaded, given ECHO: its first lines on stdout.
LOADED = ["workflow  eval_flows:Echo (loaded)", "grader    eval_flows:ExactMatch (loaded)"]
LOADED_TEXT = "".join(line + "\n" for line in LOADED)
COLUMNS = ["id", "system_prompt", "user_prompt", "prompt", "ground_truth", "label", "metadata"]

# Every row shape and outcome the formats must agree on: graded right and wrong, ungraded,
# a label given as a number, metadata, a system prompt, a string prompt, an invalid row.
ROWS: list[dict[str, Any]] = [
    {"id": "right", "user_prompt": "q0", "ground_truth": "q0"},
    {"id": "wrong", "system_prompt": "be brief", "user_prompt": "q1", "ground_truth": "no"},
    {"id": "ungraded", "user_prompt": "q2"},
    {"id": "number", "user_prompt": "7", "ground_truth": 7},
    {"id": "meta", "user_prompt": "q4", "label": "q4", "metadata": {"k": [1, {"x": "y"}]}},
    {"id": "plain", "prompt": "q5", "ground_truth": "q5"},
    {"id": "noprompt", "ground_truth": "z"},
    {"user_prompt": "q7", "ground_truth": "q7"},
]
VOLATILE = {"workflow_ms", "grader_ms", "finished_at", "row_hash", "error_message"}


def cell(value: Any) -> str:
    """A CSV cell: text as it is, an object as its JSON, a number as its digits."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def write_csv(path: Path, rows: list[dict[str, Any]], *, columns: list[str] = COLUMNS) -> Path:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([cell(row.get(c)) for c in columns] for row in rows)
    data = text.getvalue().encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]], **types: pa.DataType) -> Path:
    """Rows as a Parquet table of text columns (metadata as JSON text), unless typed."""
    table = {}
    for c in COLUMNS:
        values = [row.get(c) for row in rows]
        if c in types:
            table[c] = pa.array(values, types[c])
        else:
            table[c] = pa.array([None if v is None else cell(v) for v in values], pa.string())
    pq.write_table(pa.table(table), path)
    return path


def write_gzip(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    return path


WRITERS: dict[str, Callable[[Path, list[dict[str, Any]]], Path]] = {
    "csv": write_csv,
    "csv.gz": write_csv,
    "parquet": write_parquet,
    "jsonl.gz": write_gzip,
}


def comparable(lines: list[ResultLine]) -> list[dict[str, Any]]:
    kept = [line.model_dump(exclude=VOLATILE) for line in lines]
    return sorted(kept, key=lambda line: line["rollout_id"])


def eval_(cli: Cli, name: str, *args: str) -> Result:
    return cli("eval", name, *ECHO, "--out", f"run-{name}", "--max-error-rate", "100%", *args)


def summary_of(run: Path) -> Summary:
    return Summary.model_validate_json((run / "summary.json").read_bytes())


@pytest.mark.parametrize("kind", list(WRITERS))
def test_the_same_rows_give_the_same_results_as_jsonl(cli: Cli, tmp_path: Path, kind: str) -> None:
    write_jsonl(tmp_path / "rows.jsonl", ROWS)
    WRITERS[kind](tmp_path / f"rows.{kind}", ROWS)
    for name in ("rows.jsonl", f"rows.{kind}"):
        result = eval_(cli, name, "--samples", "2")
        assert result.exit_code == 0, result.stderr
    jsonl = results(tmp_path / "run-rows.jsonl")
    other = results(tmp_path / f"run-rows.{kind}")
    assert comparable(other) == comparable(jsonl)
    assert {(line.row_id, line.status) for line in jsonl} == {
        ("right", "success"),
        ("wrong", "success"),
        ("ungraded", "ungraded"),
        ("number", "success"),
        ("meta", "success"),
        ("plain", "success"),
        ("noprompt", "invalid"),
        (None, "success"),
    }
    assert [line.label for line in other if line.row_id == "number"] == ["7", "7"]
    same = {"rollouts", "planned", "complete", "counts", "error_categories", "reward_graded"}
    same |= {"reward_all", "passed", "pass_rate", "pass_at_k", "pass_hat_k"}
    mine = summary_of(tmp_path / f"run-rows.{kind}").model_dump(include=same)
    assert mine == summary_of(tmp_path / "run-rows.jsonl").model_dump(include=same)
    assert count_rows(str(tmp_path / f"rows.{kind}")) == len(ROWS)


def test_a_table_row_is_named_by_its_row_and_a_csv_row_by_its_line_too(
    cli: Cli, tmp_path: Path
) -> None:
    write_csv(tmp_path / "rows.csv", ROWS)
    write_parquet(tmp_path / "rows.parquet", ROWS)
    write_gzip(tmp_path / "rows.jsonl.gz", ROWS)
    messages = {}
    for name in ("rows.csv", "rows.parquet", "rows.jsonl.gz"):
        assert eval_(cli, name).exit_code == 0
        [bad] = [line for line in results(tmp_path / f"run-{name}") if line.status == "invalid"]
        assert (bad.line, bad.row_index, bad.rollout_id) == (7, 6, "noprompt.s0")
        messages[name] = bad.error_message
    # A table with a metadata column is in metadata mode: a row may stand on its metadata.
    meta = 'no prompt and no metadata: give "user_prompt" (or "prompt", "messages") or a non-empty "metadata"'
    assert messages == {
        "rows.csv": f"rows.csv: row 7 (line 8): {meta}",
        "rows.parquet": f"rows.parquet: row 7: {meta}",
        "rows.jsonl.gz": 'rows.jsonl.gz:7: no prompt: give "messages", "prompt", or "user_prompt"',
    }


# ---------------------------------------------------------------- files that are not what they say

ARRAY = json.dumps(ROWS[:2]).encode()
PRETTY = json.dumps(ROWS[0], indent=2).encode() + b"\n" + json.dumps(ROWS[1], indent=2).encode()
LINES = b"".join(json.dumps(row).encode() + b"\n" for row in ROWS[:2])
CSV_TEXT = b"user_prompt,ground_truth\nq,a\n"


def parquet_bytes() -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"user_prompt": ["q"]}), sink)
    return bytes(sink.getvalue().to_pybytes())


MISNAMED: dict[str, tuple[str, Callable[[], bytes], str]] = {
    "a JSON array in .json": (
        "rows.json",
        lambda: ARRAY,
        "dataset rows.json is a .json file holding a JSON array; datasets are JSON Lines (one "
        "object per line), CSV or Parquet: convert it with jq -c '.[]' rows.json > rows.jsonl",
    ),
    "pretty JSON in .json": (
        "rows.json",
        lambda: json.dumps(ROWS[0], indent=2).encode(),
        "dataset rows.json is a .json file holding pretty-printed JSON; datasets are JSON Lines "
        "(one object per line): rewrite it with jq -c . rows.json > rows.jsonl",
    ),
    "JSON Lines in .json": (
        "rows.json",
        lambda: LINES,
        "dataset rows.json is a .json file holding JSON Lines; name it rows.jsonl",
    ),
    "CSV in .json": (
        "rows.json",
        lambda: CSV_TEXT,
        'dataset rows.json is not JSON: it looks like CSV (its header is "user_prompt,ground_truth"); '
        "name it rows.csv",
    ),
    "an empty .json": (
        "rows.json",
        lambda: b"",
        "dataset rows.json is a .json file, and datasets are JSON Lines, CSV or Parquet; give a "
        ".jsonl, .jsonl.gz, .csv or .parquet file",
    ),
    "CSV in .jsonl": (
        "rows.jsonl",
        lambda: CSV_TEXT,
        'dataset rows.jsonl looks like CSV (its header is "user_prompt,ground_truth"), not JSON '
        "Lines; name it rows.csv",
    ),
    "CSV of other columns in .jsonl": (
        "data/rows.jsonl",
        lambda: b"question,answer\nwhat,that\n",
        'dataset data/rows.jsonl looks like CSV (its header is "question,answer"), not JSON '
        "Lines; name it data/rows.csv",
    ),
    "a one-column CSV in .jsonl": (
        "rows.jsonl",
        lambda: b"user_prompt\nq1\nq2\n",
        'dataset rows.jsonl looks like CSV (its header is "user_prompt"), not JSON Lines; '
        "name it rows.csv",
    ),
    "a JSON array in .jsonl": (
        "rows.jsonl",
        lambda: ARRAY,
        "dataset rows.jsonl holds a JSON array, not JSON Lines (one object per line); convert "
        "it with jq -c '.[]' rows.jsonl > rows-rows.jsonl",
    ),
    "a pretty-printed JSON array in .jsonl": (
        "rows.jsonl",
        lambda: json.dumps(ROWS[:2], indent=2).encode(),
        "dataset rows.jsonl holds a JSON array, not JSON Lines (one object per line); convert "
        "it with jq -c '.[]' rows.jsonl > rows-rows.jsonl",
    ),
    "pretty-printed objects in .jsonl": (
        "rows.jsonl",
        lambda: PRETTY,
        "dataset rows.jsonl holds pretty-printed JSON (objects over several lines), not JSON "
        "Lines; rewrite it with jq -c . rows.jsonl > rows-rows.jsonl",
    ),
    "gzip in .jsonl": (
        "rows.jsonl",
        lambda: gzip.compress(LINES),
        "dataset rows.jsonl is gzip-compressed data, not JSON Lines text; name it rows.jsonl.gz",
    ),
    "Parquet in .jsonl": (
        "rows.jsonl",
        parquet_bytes,
        "dataset rows.jsonl is a Parquet file, not JSON Lines text; name it rows.parquet",
    ),
    "a ZIP archive in .csv": (
        "rows.csv",
        lambda: b"PK\x03\x04" + b"\0" * 40,
        "dataset rows.csv is a ZIP archive, not CSV text; unzip it, or export the sheet as CSV",
    ),
    "JSON Lines in .csv": (
        "rows.csv",
        lambda: LINES,
        "dataset rows.csv looks like JSON Lines, not CSV; name it rows.jsonl",
    ),
    "JSON Lines in .jsonl.gz, not compressed": (
        "rows.jsonl.gz",
        lambda: LINES,
        "dataset rows.jsonl.gz is not gzip-compressed: it looks like JSON Lines; name it "
        "rows.jsonl",
    ),
    "CSV in .jsonl.gz": (
        "rows.jsonl.gz",
        lambda: gzip.compress(CSV_TEXT),
        'dataset rows.jsonl.gz looks like CSV (its header is "user_prompt,ground_truth"), not '
        "JSON Lines; name it rows.csv.gz",
    ),
    "CSV in .parquet": (
        "rows.parquet",
        lambda: CSV_TEXT,
        "dataset rows.parquet is not a Parquet file: it looks like CSV (its header is "
        '"user_prompt,ground_truth"); name it rows.csv',
    ),
    "a truncated gzip file": (
        "rows.jsonl.gz",
        lambda: gzip.compress(LINES * 20)[:60],
        "cannot read dataset rows.jsonl.gz: the gzip data ends early (the file is truncated)",
    ),
    "a CSV header that names a column twice": (
        "rows.csv",
        lambda: b"label,user_prompt,label\na,b,c\n",
        'dataset rows.csv: the CSV header names the column "label" twice; rename one',
    ),
}


@pytest.mark.parametrize("command", ["eval", "validate"])
@pytest.mark.parametrize("case", list(MISNAMED))
def test_a_file_that_is_not_what_its_name_says_is_one_line(
    cli: Cli, tmp_path: Path, case: str, command: str
) -> None:
    name, content, message = MISNAMED[case]
    (tmp_path / name).parent.mkdir(exist_ok=True)
    (tmp_path / name).write_bytes(content())
    result = cli(command, name, *ECHO)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"error: {message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({name.split("/")[0]})


def test_a_jsonl_file_of_broken_rows_is_still_read_row_by_row(cli: Cli, tmp_path: Path) -> None:
    # Only a file that is plainly something else is refused: a broken first row, an array
    # row or free text are invalid rows, as they always were.
    write_jsonl(tmp_path / "d.jsonl", ['{"id": "broken", ', "[1, 2]", "[]", "just text", ROWS[0]])
    result = cli("validate", "d.jsonl", *ECHO)
    assert result.exit_code == 2
    assert result.stdout.splitlines() == [
        *LOADED,
        "d.jsonl:1: invalid JSON: Expecting property name enclosed in double quotes (column 17)",
        "d.jsonl:2: a row must be a JSON object (got array)",
        "d.jsonl:3: a row must be a JSON object (got array)",
        "d.jsonl:4: invalid JSON: Expecting value (column 1)",
        "d.jsonl: 5 rows, 4 invalid",
    ]


def test_a_gzip_file_truncated_past_its_first_bytes_stops_the_run_before_it_starts(
    cli: Cli, tmp_path: Path
) -> None:
    rows = [{"id": f"r{i}", "user_prompt": os.urandom(40).hex()} for i in range(4000)]
    data = gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode())
    (tmp_path / "d.jsonl.gz").write_bytes(data[: len(data) - 100])
    message = (
        "error: cannot read dataset d.jsonl.gz: the gzip data ends early (the file is truncated)\n"
    )
    result = cli("eval", "d.jsonl.gz", *ECHO)
    assert (result.exit_code, result.stderr) == (2, message)
    assert not (tmp_path / "runs").exists()
    checked = cli("validate", "d.jsonl.gz", *ECHO)
    assert (checked.exit_code, checked.stderr) == (2, message)


def test_parquet_without_pyarrow_says_what_to_install(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_parquet(tmp_path / "rows.parquet", ROWS)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    result = cli("eval", "rows.parquet", *ECHO)
    assert (result.exit_code, result.stderr) == (
        2,
        "error: dataset rows.parquet is Parquet, which needs pyarrow: "
        "pip install 'osmosis-run[parquet]'\n",
    )


def test_a_damaged_parquet_file_is_one_line(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "rows.parquet").write_bytes(b"PAR1" + b"\0" * 100)
    result = cli("validate", "rows.parquet", *ECHO)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: dataset rows.parquet is not readable Parquet: ")
    assert len(result.stderr.splitlines()) == 1


def test_stdin_stays_json_lines(cli: Cli, tmp_path: Path) -> None:
    result = cli(
        "eval", "-", *ECHO, "--out", "run", "--max-error-rate", "100%", input=CSV_TEXT.decode()
    )
    assert result.exit_code == 0, result.stderr
    assert [(r.line, r.error_message) for r in results(tmp_path / "run")] == [
        (1, "<stdin>:1: invalid JSON: Expecting value (column 1)"),
        (2, "<stdin>:2: invalid JSON: Expecting value (column 1)"),
    ]


# ---------------------------------------------------------------- invalid rows


def test_every_bad_csv_row_is_named_by_row_and_line(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_bytes(
        b"id,user_prompt,ground_truth,metadata\n"
        b"a,q,a,\n"
        b'b,"two\nlines",x,\n'  # a quoted line break: this row is on lines 3 and 4
        b"c,q,a,b,extra\n"
        b"d,q,a,{not json}\n"
        b'e,q,a,"[1, 2]"\n'
        b"f,caf\xe9,a,\n"
        b"a,again,a,\n"
        b"\n"  # a blank line is not a row
        b',,label only,""\n'
        b'h,,,"{""k"": 1}"\n'  # metadata mode: metadata stands for the prompt
    )
    checked = cli("validate", "d.csv", *ECHO)
    assert checked.exit_code == 2
    problems = [
        "d.csv: row 3 (line 5): 5 fields, but the header has 4; quote a field that holds a comma",
        'd.csv: row 4 (line 6): "metadata" is not valid JSON: Expecting property name enclosed '
        "in double quotes (column 2)",
        'd.csv: row 5 (line 7): "metadata" must be an object (got array)',
        'd.csv: row 6 (line 8): not UTF-8 text (byte 0xe9 in column "user_prompt"); save the '
        "file as UTF-8",
        'd.csv: row 7 (line 9): duplicate id "a" (first in row 1)',
        'd.csv: row 8 (line 11): no prompt and no metadata: give "user_prompt" (or "prompt", '
        '"messages") or a non-empty "metadata"',
    ]
    assert checked.stdout.splitlines() == [*LOADED, *problems, "d.csv: 9 rows, 6 invalid"]
    ran = cli("eval", "d.csv", *ECHO, "--out", "run", "--max-error-rate", "100%")
    assert ran.exit_code == 0, ran.stderr
    lines = sorted(results(tmp_path / "run"), key=lambda r: r.line)
    assert [(r.line, r.status) for r in lines] == [
        (1, "success"),
        (2, "success"),
        (3, "invalid"),
        (4, "invalid"),
        (5, "invalid"),
        (6, "invalid"),
        (7, "invalid"),
        (8, "invalid"),
        (9, "failure"),  # Echo needs a user message; the row itself is valid
    ]
    assert [r.error_message for r in lines if r.status == "invalid"] == problems
    assert lines[1].messages is not None
    assert lines[1].messages[0] == {"role": "user", "content": "two\nlines"}
    assert lines[8].metadata == {"k": 1}


def test_every_bad_parquet_row_is_named_by_its_row(cli: Cli, tmp_path: Path) -> None:
    table = pa.table(
        {
            "id": pa.array([1, 2, 1, None, 5], pa.int64()),
            "user_prompt": ["q", None, "q", "q", "q"],
            "ground_truth": ["a", "a", "a", "a", "a"],
            "metadata": [None, None, None, '{"k": ', "[]"],
        }
    )
    pq.write_table(table, tmp_path / "d.parquet")
    checked = cli("validate", "d.parquet", *ECHO)
    assert checked.exit_code == 2
    assert checked.stdout.splitlines() == [
        *LOADED,
        'd.parquet: row 2: no prompt and no metadata: give "user_prompt" (or "prompt", '
        '"messages") or a non-empty "metadata"',
        'd.parquet: row 3: duplicate id "1" (first in row 1)',
        'd.parquet: row 4: "metadata" is not valid JSON: Expecting value (column 6)',
        'd.parquet: row 5: "metadata" must be an object (got array)',
        "d.parquet: 5 rows, 4 invalid",
    ]


def test_a_bad_float_id_in_parquet_is_an_invalid_row(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": [1.5], "prompt": ["p"]}), tmp_path / "d.parquet")
    [row] = iter_rows(str(tmp_path / "d.parquet"))
    assert (
        row.error
        == 'd.parquet: row 1: "id" must be a string or an integer (got number)'.replace(
            "d.parquet", str(tmp_path / "d.parquet")
        )
    )


def test_parquet_cells_of_any_type(tmp_path: Path) -> None:
    when = pa.scalar(1_700_000_000_000_000, pa.timestamp("us"))
    table = pa.table(
        {
            "id": pa.array([3, 4, 5], pa.int64()),
            "messages": pa.array(
                [[{"role": "user", "content": "hi"}], None, None],
                pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
            ),
            "user_prompt": [None, "q", "q"],
            "ground_truth": pa.array([1.5, 2.0, None], pa.float64()),
            "label": pa.array([None, None, True], pa.bool_()),
            "metadata": pa.array(
                [{"when": when.as_py(), "n": 1}, None, {"when": None, "n": 2}],
                pa.struct([("when", pa.timestamp("us")), ("n", pa.int64())]),
            ),
            "other": ["not", "read", "here"],
        }
    )
    pq.write_table(table, tmp_path / "d.parquet")
    rows = list(iter_rows(str(tmp_path / "d.parquet")))
    assert [(r.id, r.prompt, r.label, r.metadata, r.error) for r in rows] == [
        (
            3,
            [{"role": "user", "content": "hi"}],
            "1.5",
            {"when": "2023-11-14T22:13:20", "n": 1},
            None,
        ),
        (4, [{"role": "user", "content": "q"}], "2.0", None, None),
        (5, [{"role": "user", "content": "q"}], "true", {"when": None, "n": 2}, None),
    ]


def test_a_parquet_map_column_is_metadata(tmp_path: Path) -> None:
    table = pa.table(
        {
            "prompt": ["p"],
            "metadata": pa.array([[("a", "1"), ("b", "2")]], pa.map_(pa.string(), pa.string())),
        }
    )
    pq.write_table(table, tmp_path / "d.parquet")
    [row] = iter_rows(str(tmp_path / "d.parquet"))
    assert (row.metadata, row.error) == ({"a": "1", "b": "2"}, None)


# ---------------------------------------------------------------- osmosis-ai's row rules


def test_osmosis_table_rules(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_bytes(
        b"\xef\xbb\xbf user_prompt , ground_truth ,label,system_prompt,metadata,extra\r\n"
        b"q,,fallback,,,ignored\r\n"  # an empty ground truth: the label is used
        b"q,,,,,\r\n"  # no label at all: ungraded
        b'q,1,,sys,"  ",\r\n'  # a metadata cell of spaces is empty
        b',,,,"{""task"": ""t""}",\r\n'  # metadata mode: no prompt needed
        b',,,sys only,"{""task"": ""t""}",\r\n'
        b"q,2,,,{},\r\n"  # an empty metadata object counts as none
        b",,,sys only,,\r\n"  # metadata mode: a system prompt alone is a prompt
    )
    rows = list(iter_rows(str(tmp_path / "d.csv")))
    assert [(r.prompt, r.label, r.metadata, r.error) for r in rows] == [
        ([{"role": "user", "content": "q"}], "fallback", None, None),
        ([{"role": "user", "content": "q"}], None, None, None),
        ([{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}], "1", None, None),
        ([], None, {"task": "t"}, None),
        ([{"role": "system", "content": "sys only"}], None, {"task": "t"}, None),
        ([{"role": "user", "content": "q"}], "2", None, None),
        ([{"role": "system", "content": "sys only"}], None, None, None),
    ]


def test_json_lines_rows_take_the_empty_label_rule_but_always_need_a_prompt(
    tmp_path: Path,
) -> None:
    write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"user_prompt": "q", "ground_truth": "", "label": "fallback"},
            {"user_prompt": "q", "label": ""},
            {"metadata": {"task": "t"}},
            {"metadata": {"task": "t"}, "system_prompt": "s"},
        ],
    )
    rows = list(iter_rows(str(tmp_path / "d.jsonl")))
    name = tmp_path / "d.jsonl"
    assert [(r.prompt, r.label, r.error) for r in rows] == [
        ([{"role": "user", "content": "q"}], "fallback", None),
        ([{"role": "user", "content": "q"}], None, None),
        (None, None, f'{name}:3: no prompt: give "messages", "prompt", or "user_prompt"'),
        (None, None, f'{name}:4: "user_prompt" is missing or empty'),
    ]


# ---------------------------------------------------------------- selection, resume, fingerprint

SELECTIONS = [
    ["--rows", "1,3-5"],
    ["--shard", "0/2"],
    ["--shuffle", "--seed", "7", "--limit", "4"],
    ["--offset", "2", "--limit", "3"],
    ["--ids", "right,meta"],
]


@pytest.mark.parametrize("kind", ["csv", "parquet", "jsonl.gz"])
@pytest.mark.parametrize("selection", SELECTIONS, ids=" ".join)
def test_the_selection_takes_the_rows_it_takes_in_jsonl(
    cli: Cli, tmp_path: Path, kind: str, selection: list[str]
) -> None:
    write_jsonl(tmp_path / "rows.jsonl", ROWS)
    WRITERS[kind](tmp_path / f"rows.{kind}", ROWS)
    order = {}
    for name in ("rows.jsonl", f"rows.{kind}"):
        result = eval_(cli, name, *selection, "--concurrency", "1")
        assert result.exit_code == 0, result.stderr
        order[name] = [line.rollout_id for line in results(tmp_path / f"run-{name}")]
        assert summary_of(tmp_path / f"run-{name}").planned == len(order[name])
    assert order[f"rows.{kind}"] == order["rows.jsonl"]
    assert order["rows.jsonl"]


@pytest.mark.parametrize("kind", ["csv", "parquet", "jsonl.gz"])
def test_a_table_run_resumes_and_refuses_a_changed_file(
    cli: Cli, tmp_path: Path, kind: str
) -> None:
    name = f"rows.{kind}"
    WRITERS[kind](tmp_path / name, ROWS)
    first = cli("eval", name, *ECHO, "--max-error-rate", "100%")
    assert first.exit_code == 0, first.stderr
    [run] = (tmp_path / "runs").iterdir()
    assert run.name.startswith("rows-")
    again = cli("eval", name, *ECHO, "--max-error-rate", "100%")
    assert again.exit_code == 0, again.stderr
    assert len(results(run)) == len(ROWS)
    assert summary_of(run).complete
    fingerprint = json.loads((run / "fingerprint.json").read_bytes())
    assert fingerprint["dataset"] == dataset.sha256_file(tmp_path / name)
    WRITERS[kind](tmp_path / name, ROWS[:-1])
    changed = cli("eval", name, *ECHO, "--out", str(run.relative_to(tmp_path)))
    assert changed.exit_code == 2
    assert changed.stderr == (
        f"error: runs/{run.name} holds a run made with other inputs (changed: dataset); add "
        "--fresh to start it over, or choose another --out\n"
    )


@pytest.mark.parametrize(
    ("name", "stem"),
    [
        ("rows.jsonl.gz", "rows"),
        ("rows.csv.gz", "rows"),
        ("rows.parquet", "rows"),
        ("rows.jsonl", "rows"),
        ("rows.v2.csv", "rows.v2"),
        ("rows.txt", "rows"),
        ("rows.gz", "rows"),
    ],
)
def test_the_dataset_stem(name: str, stem: str) -> None:
    assert dataset.dataset_stem(f"data/{name}") == stem


# ---------------------------------------------------------------- counting and the id check


def test_the_count_is_what_the_reader_reads(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_bytes(
        b'\n\nuser_prompt,label\r\n\r\nq,"a\nb"\r\n\nq,c,d\n"unclosed,x\n'
    )
    rows = list(iter_rows(str(tmp_path / "d.csv")))
    assert [(r.line, r.error is None) for r in rows] == [(1, True), (2, False), (3, True)]
    assert count_rows(str(tmp_path / "d.csv")) == 3
    assert count_planned(str(tmp_path / "d.csv"), Selection(limit=2), 3) == 6
    (tmp_path / "empty.csv").write_bytes(b"")
    assert count_rows(str(tmp_path / "empty.csv")) == 0
    assert list(iter_rows(str(tmp_path / "empty.csv"))) == []


def test_a_csv_field_past_the_limit_is_an_invalid_row_and_the_next_row_reads(
    tmp_path: Path,
) -> None:
    big = "x" * (_formats.CSV_FIELD_LIMIT + 1)
    (tmp_path / "d.csv").write_text(f'user_prompt,label\nq,a\n"{big}",b\nq2,c\n')
    rows = list(iter_rows(str(tmp_path / "d.csv")))
    assert [(r.line, r.label, r.error) for r in rows] == [
        (1, "a", None),
        (
            2,
            None,
            f"{tmp_path / 'd.csv'}: row 2 (line 3): not CSV (field larger than field limit "
            "(16777216)); check this row's quotes",
        ),
        (3, "c", None),
    ]
    assert count_rows(str(tmp_path / "d.csv")) == 3


def test_an_empty_table_has_no_rows(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_bytes(b"user_prompt,ground_truth\n")
    pq.write_table(pa.table({"user_prompt": pa.array([], pa.string())}), tmp_path / "d.parquet")
    checked = cli("validate", "d.csv", *ECHO)
    assert (checked.exit_code, checked.stdout) == (
        2,
        LOADED_TEXT + "d.csv: no rows; a CSV dataset holds a header line, then one row per line\n"
        "d.csv: 0 rows, 0 invalid\n",
    )
    checked = cli("validate", "d.parquet", *ECHO)
    assert (checked.exit_code, checked.stdout) == (
        2,
        LOADED_TEXT + "d.parquet: no rows; a Parquet dataset holds one row per table row\n"
        "d.parquet: 0 rows, 0 invalid\n",
    )


@pytest.mark.parametrize("bits", [8, dataset.MIN_ID_BITS])
def test_the_id_check_is_exact_however_small_its_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bits: int
) -> None:
    monkeypatch.setattr(dataset, "MIN_ID_BITS", bits)
    monkeypatch.setattr(_formats, "row_estimate", lambda path: 0)
    ids = [f"r{(i * 7919) % 3001}" for i in range(4000)]  # 999 ids occur twice
    rows = [{"id": i, "prompt": "p"} for i in ids]
    write_csv(tmp_path / "d.csv", rows, columns=["id", "prompt"])
    seen: dict[str, int] = {}
    expected = []
    for number, i in enumerate(ids, 1):
        first = seen.setdefault(i, number)
        where = f"{tmp_path / 'd.csv'}: row {number} (line {number + 1})"
        expected.append(
            None if first == number else f'{where}: duplicate id "{i}" (first in row {first})'
        )
    assert [row.error for row in iter_rows(str(tmp_path / "d.csv"))] == expected
    assert sum(e is not None for e in expected) == 999


# ---------------------------------------------------------------- memory


def peak_rss_mib(args: list[str], cwd: Path) -> float:
    """Run an osmosis-run command to its end and return its peak resident memory."""
    child = subprocess.Popen(
        [sys.executable, "-c", "from osmosis_run.cli import main; main()", *args],
        cwd=cwd,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(child.pid, 0)
    assert child.stderr is not None
    stderr = child.stderr.read().decode()
    child.stderr.close()
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0, stderr
    return usage.ru_maxrss / 1024


def write_big_parquet(path: Path, n: int) -> None:
    """n rows with ids and metadata, written in row groups of 100,000 as a writer would."""
    with pq.ParquetWriter(
        path,
        pa.schema(
            [
                ("id", pa.string()),
                ("system_prompt", pa.string()),
                ("user_prompt", pa.string()),
                ("ground_truth", pa.string()),
                ("metadata", pa.string()),
            ]
        ),
    ) as writer:
        for start in range(0, n, 100_000):
            span = range(start, min(n, start + 100_000))
            writer.write_table(
                pa.table(
                    {
                        "id": [f"row-{i}" for i in span],
                        "system_prompt": ["Answer with a number."] * len(span),
                        "user_prompt": [f"What is {i} + {i}?" for i in span],
                        "ground_truth": [str(2 * i) for i in span],
                        "metadata": [f'{{"n": {i}}}' for i in span],
                    }
                )
            )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_validating_a_million_parquet_rows_takes_the_memory_of_a_hundred_thousand(
    tmp_path: Path,
) -> None:
    write_big_parquet(tmp_path / "small.parquet", 100_000)
    write_big_parquet(tmp_path / "big.parquet", 1_000_000)
    small = peak_rss_mib(["validate", "small.parquet", *ECHO], tmp_path)
    big = peak_rss_mib(["validate", "big.parquet", *ECHO], tmp_path)
    assert big <= small * 1.10, (small, big)
