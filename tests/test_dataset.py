"""The dataset reader: one definition of a line for reading, counting, validate and resume; a bad
row is an ``invalid`` result naming its line, never a crash; a FIFO is read like stdin; a dataset
or config file that cannot be read is one line, exit 2."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import results, subprocess_env, write_jsonl
from typer.testing import Result

from osmosis_run.results.records import Summary
from osmosis_run.run import dataset
from osmosis_run.run.dataset import MAX_NESTING, count_rows, is_stream, iter_rows, parse_row
from osmosis_run.run.selection import Selection, count_planned

Cli = Callable[..., Result]
ECHO = ["--workflow", "eval_flows:Echo", "--grader", "eval_flows:ExactMatch"]
# What validate says it loaded, given ECHO: its first lines on stdout.
LOADED = ["workflow  eval_flows:Echo (loaded)", "grader    eval_flows:ExactMatch (loaded)"]
GOOD = {"id": "good", "prompt": "p", "ground_truth": "p"}
SURROGATE = "text must be valid Unicode"
TOO_DEEP = f"nested deeper than {MAX_NESTING} levels of objects and arrays; flatten the row"


def nested(depth: int) -> str:
    """A row whose objects and arrays nest exactly ``depth`` levels (the row is level 1)."""
    inner = "[" * (depth - 2) + "1" + "]" * (depth - 2)
    return '{"prompt": "p", "metadata": {"k": ' + inner + "}}"


# Each kind of bad row (as the line's bytes) and the message it must give, after "d.jsonl:2: ".
BAD_ROWS: dict[str, tuple[bytes, str]] = {
    "not UTF-8": (
        b'{"prompt": "caf\xe9"}',
        "not UTF-8 text (byte 0xe9 at column 16); save the file as UTF-8",
    ),
    "an encoded surrogate": (
        b'{"prompt": "\xed\xa0\x80"}',
        "not UTF-8 text (byte 0xed at column 13); save the file as UTF-8",
    ),
    "nested 65 levels": (nested(MAX_NESTING + 1).encode(), TOO_DEEP),
    "nested 300 levels": (nested(300).encode(), TOO_DEEP),
    "nested 100k levels": (nested(100_000).encode(), TOO_DEEP),
    "a 5000-digit id": (
        b'{"id": ' + b"9" * 5000 + b', "prompt": "p"}',
        "a number is too long (more than 4300 digits); write it as a string",
    ),
    "a lone surrogate in the prompt": (
        b'{"prompt": "a\\ud800b"}',
        f'"prompt" holds a lone surrogate (\\ud800); {SURROGATE}',
    ),
    "a lone surrogate in the id": (
        b'{"id": "\\udfff", "prompt": "p"}',
        f'"id" holds a lone surrogate (\\udfff); {SURROGATE}',
    ),
    "a lone surrogate in a message": (
        b'{"messages": [{"role": "user", "content": "\\uD83D"}]}',
        f'"messages[0].content" holds a lone surrogate (\\ud83d); {SURROGATE}',
    ),
    "a lone surrogate in a metadata key": (
        b'{"prompt": "p", "metadata": {"ok": 1, "\\ud800": 2}}',
        f'"metadata" has a key that holds a lone surrogate (\\ud800); {SURROGATE}',
    ),
    "a lone surrogate in a label": (
        b'{"prompt": "p", "label": "\\ud800"}',
        f'"label" holds a lone surrogate (\\ud800); {SURROGATE}',
    ),
    "a line of Unicode whitespace": (
        "\u00a0\u3000".encode(),
        "invalid JSON: the line holds only whitespace (U+00A0); delete it or leave it empty",
    ),
}


def dataset_with(path: Path, *lines: bytes) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def eval_(cli: Cli, name: str, *args: str) -> Result:
    return cli("eval", name, *ECHO, "--out", "run", *args)


def summary_of(run: Path) -> Summary:
    return Summary.model_validate_json((run / "summary.json").read_bytes())


@pytest.mark.parametrize("kind", list(BAD_ROWS))
def test_a_bad_row_is_an_invalid_result_and_the_run_resumes(
    cli: Cli, tmp_path: Path, kind: str
) -> None:
    raw, message = BAD_ROWS[kind]
    dataset_with(tmp_path / "d.jsonl", json.dumps(GOOD).encode(), raw)
    for _ in range(2):  # the second time resumes the finished run: no crash, still complete
        result = eval_(cli, "d.jsonl")
        assert result.exit_code == 3, result.stderr
        assert result.stderr.endswith(
            "FAILED: error budget: exceeded (1 of 2 rollouts failed, 50.00%; 0 allowed)\n"
        )
        lines = results(tmp_path / "run")
        assert [(r.line, r.status, r.error_message) for r in lines if r.status != "success"] == [
            (2, "invalid", f"d.jsonl:2: {message}")
        ]
        summary = summary_of(tmp_path / "run")
        assert (summary.planned, summary.rollouts, summary.complete) == (2, 2, True)


def test_validate_finds_exactly_the_rows_eval_marks_invalid(cli: Cli, tmp_path: Path) -> None:
    lines = [json.dumps(GOOD).encode()]
    for raw, _ in BAD_ROWS.values():
        lines += [raw, json.dumps({"prompt": f"p{len(lines)}"}).encode()]
    dataset_with(tmp_path / "d.jsonl", *lines)
    expected = [
        f"d.jsonl:{2 * n + 2}: {message}" for n, (_, message) in enumerate(BAD_ROWS.values())
    ]
    checked = cli("validate", "d.jsonl", *ECHO)
    assert checked.exit_code == 2
    assert checked.stdout.splitlines() == [
        *LOADED,
        *expected,
        f"d.jsonl: {len(lines)} rows, {len(BAD_ROWS)} invalid",
    ]
    ran = eval_(cli, "d.jsonl", "--max-error-rate", "100%")
    assert ran.exit_code == 0, ran.stderr
    invalid = [r.error_message for r in results(tmp_path / "run") if r.status == "invalid"]
    assert invalid == expected
    summary = summary_of(tmp_path / "run")
    assert (summary.planned, summary.rollouts, summary.complete) == (len(lines), len(lines), True)


ROWS = [json.dumps({"id": f"q{i}", "prompt": f"p{i}", "ground_truth": f"p{i}"}) for i in range(5)]
ENDINGS: dict[str, tuple[bytes, int]] = {
    # The file's bytes, and how many rollouts it holds.
    "LF": ("\n".join(ROWS).encode() + b"\n", 5),
    "CRLF": ("\r\n".join(ROWS).encode() + b"\r\n", 5),
    "CRLF, no final newline": ("\r\n".join(ROWS).encode(), 5),
    "CR only: one line that is not JSON": ("\r".join(ROWS).encode() + b"\r", 1),
    "a BOM-only first line": (b"\xef\xbb\xbf\n" + "\n".join(ROWS).encode() + b"\n", 5),
    "a BOM and CRLF": (b"\xef\xbb\xbf" + "\r\n".join(ROWS).encode(), 5),
    "blank lines of spaces, tabs and CRs": (
        ("\n \t \n".join(ROWS) + "\n\r\n\n").encode(),
        5,
    ),
    "lines of Unicode whitespace": (
        "\n\u00a0\n".join(ROWS[:3]).encode() + "\n\u3000\n".encode(),
        6,
    ),
}


@pytest.mark.parametrize("kind", list(ENDINGS))
def test_the_planned_count_is_what_the_run_reads(cli: Cli, tmp_path: Path, kind: str) -> None:
    data, rollouts = ENDINGS[kind]
    (tmp_path / "d.jsonl").write_bytes(data)
    result = eval_(cli, "d.jsonl", "--max-error-rate", "100%")
    assert result.exit_code == 0, result.stderr
    summary = summary_of(tmp_path / "run")
    assert len(results(tmp_path / "run")) == rollouts
    assert (summary.planned, summary.rollouts, summary.complete) == (rollouts, rollouts, True)
    assert count_planned(str(tmp_path / "d.jsonl"), Selection(), 1) == rollouts


def test_a_file_of_cr_line_endings_says_so(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_bytes(ENDINGS["CR only: one line that is not JSON"][0])
    result = eval_(cli, "d.jsonl")
    assert result.exit_code == 3
    [line] = results(tmp_path / "run")
    assert (line.line, line.status, line.error_message) == (
        1,
        "invalid",
        "d.jsonl:1: invalid JSON: Extra data (column 52); the line holds CR line breaks: "
        "JSON Lines needs \\n line endings",
    )


def test_crlf_rows_are_the_rows_of_lf(tmp_path: Path) -> None:
    lf = tmp_path / "lf.jsonl"
    crlf = tmp_path / "crlf.jsonl"
    lf.write_bytes(ENDINGS["LF"][0])
    crlf.write_bytes(ENDINGS["CRLF"][0])
    assert list(iter_rows(str(lf))) == list(iter_rows(str(crlf)))


def test_every_row_has_the_digest_of_its_line(tmp_path: Path) -> None:
    lines = [b'{"prompt": "a"}', b"[1]", b'{"prompt": "\xff"}', b'  {"prompt": "b"}\t']
    (tmp_path / "d.jsonl").write_bytes(
        b"\xef\xbb\xbf" + lines[0] + b"\r\n" + b"\n".join(lines[1:]) + b"\n"
    )
    rows = list(iter_rows(str(tmp_path / "d.jsonl")))
    assert [r.error is None for r in rows] == [True, False, False, True]
    assert [r.digest for r in rows] == [
        hashlib.blake2b(line, digest_size=8).hexdigest() for line in lines
    ]


def test_the_count_and_the_reader_agree_on_every_line_in_any_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pieces = [b"\n", b"\r\n", b"\r", b" ", b"\t", b"\x0c", b"{}", b"\xef\xbb\xbf", b"\xc2\xa0"]
    files = [
        b"".join(pieces[(i * 7 + j * j) % len(pieces)] for j in range(i % 23)) for i in range(200)
    ]
    path = tmp_path / "d.jsonl"
    for data in files:
        path.write_bytes(data)
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        lines = [line.removesuffix(b"\r") for line in lines]
        if lines:
            lines[0] = lines[0].removeprefix(b"\xef\xbb\xbf")
        numbers = [n for n, line in enumerate(lines, 1) if line.strip(b" \t\r")]
        for chunk in (1, 3, dataset.CHUNK):
            monkeypatch.setattr(dataset, "CHUNK", chunk)
            assert [row.line for row in iter_rows(str(path))] == numbers, (data, chunk)
            assert count_rows(str(path)) == len(numbers), (data, chunk)


@pytest.mark.parametrize(("depth", "ok"), [(MAX_NESTING, True), (MAX_NESTING + 1, False)])
def test_the_nesting_limit(depth: int, ok: bool) -> None:
    row = parse_row(nested(depth), index=0, line=1, name="d.jsonl")
    assert row.error == (None if ok else f"d.jsonl:1: {TOO_DEEP}")


def test_a_row_at_the_nesting_limit_runs_and_is_written(cli: Cli, tmp_path: Path) -> None:
    dataset_with(tmp_path / "d.jsonl", nested(MAX_NESTING).encode())
    result = eval_(cli, "d.jsonl")
    assert result.exit_code == 0, result.stderr
    [line] = results(tmp_path / "run")
    assert line.status == "success"
    request = json.loads((tmp_path / "run/rollouts/row@0.s0/result.json").read_bytes())
    assert "request" in request


def test_a_row_is_given_as_soon_as_its_newline_arrives() -> None:
    read_end, write_end = os.pipe()
    waits: list[int] = []
    with open(read_end, "rb") as source:
        rows = iter_rows("-", source=source, on_wait=lambda: waits.append(len(waits)))
        got: list[Any] = []

        def take() -> None:
            got.append(next(rows))

        os.write(write_end, b'{"prompt": "a"}\n{"prompt": "b')
        taker = threading.Thread(target=take, daemon=True)
        taker.start()
        taker.join(5)  # the pipe stays open: a reader waiting for more never returns
        assert [row.line for row in got] == [1]
        assert len(waits) == 1  # before the one read
        os.write(write_end, b'"}\n')
        os.close(write_end)
        assert [(row.line, row.prompt) for row in rows] == [(2, [{"role": "user", "content": "b"}])]
        assert len(waits) == 3  # before the read that completes line 2, and before the end


def test_is_stream(tmp_path: Path) -> None:
    fifo = tmp_path / "rows"
    os.mkfifo(fifo)
    file = write_jsonl(tmp_path / "d.jsonl", [GOOD])
    assert [is_stream(p) for p in ("-", str(fifo), os.devnull)] == [True, True, True]
    assert [is_stream(p) for p in (str(file), str(tmp_path), str(tmp_path / "no"))] == [
        False,
        False,
        False,
    ]


@contextlib.contextmanager
def feeding(fifo: Path, data: bytes) -> Iterator[None]:
    """Write ``data`` into the FIFO from a thread, as a producer process would."""

    def feed() -> None:
        with open(fifo, "wb") as f:  # waits for the reader to open the FIFO
            for start in range(0, len(data), 100):
                f.write(data[start : start + 100])
                f.flush()

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        yield
    finally:
        if writer.is_alive():  # nobody opened the FIFO: let the writer finish
            fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            writer.join(5)
            os.close(fd)
        writer.join(5)


def fifo_rows(tmp_path: Path, n: int) -> tuple[Path, bytes]:
    fifo = tmp_path / "rows.fifo"
    os.mkfifo(fifo)
    rows = [{"id": f"q{i}", "prompt": f"p{i}", "ground_truth": f"p{i}"} for i in range(n)]
    return fifo, "".join(json.dumps(row) + "\n" for row in rows).encode() + b"[]\n"


def test_a_fifo_dataset_is_read_like_stdin(cli: Cli, tmp_path: Path) -> None:
    fifo, data = fifo_rows(tmp_path, 30)
    with feeding(fifo, data):
        result = cli("eval", "rows.fifo", *ECHO, "--out", "run", "--max-error-rate", "100%")
    assert result.exit_code == 0, result.stderr
    lines = results(tmp_path / "run")
    assert sorted((r.line, r.status) for r in lines) == [
        *((n, "success") for n in range(1, 31)),
        (31, "invalid"),
    ]
    assert [r.error_message for r in lines if r.status == "invalid"] == [
        "rows.fifo:31: a row must be a JSON object (got array)"
    ]
    summary = summary_of(tmp_path / "run")
    assert (summary.planned, summary.rollouts, summary.complete) == (None, 31, True)
    fingerprint = json.loads((tmp_path / "run/fingerprint.json").read_bytes())
    assert fingerprint["dataset"] == "stream"


def test_a_fifo_dataset_validates(cli: Cli, tmp_path: Path) -> None:
    fifo, data = fifo_rows(tmp_path, 3)
    with feeding(fifo, data):
        result = cli("validate", "rows.fifo", *ECHO)
    assert result.exit_code == 2
    assert result.stdout.splitlines() == [
        *LOADED,
        "rows.fifo:4: a row must be a JSON object (got array)",
        "rows.fifo: 4 rows, 1 invalid",
    ]


@pytest.mark.parametrize("command", ["eval", "validate"])
def test_a_directory_is_not_a_dataset(cli: Cli, tmp_path: Path, command: str) -> None:
    (tmp_path / "data").mkdir()
    result = cli(command, "data", *ECHO)
    assert result.exit_code == 2
    assert result.stderr == "error: dataset data is a directory; give a JSONL file\n"
    assert not (tmp_path / "runs").exists()


def without_file_permission_override() -> list[str]:
    """A command prefix under which a file's mode bits bind (root reads a mode-000 file)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to drop root's permission override")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


@pytest.mark.parametrize("command", ["eval", "validate"])
def test_an_unreadable_dataset_is_one_line(tmp_path: Path, command: str) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [GOOD])
    data.chmod(0)
    args = [sys.executable, "-c", "from osmosis_run.cli import main; main()", command]
    done = subprocess.run(
        [*without_file_permission_override(), *args, "d.jsonl", *ECHO],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "error: cannot read dataset d.jsonl: Permission denied\n"
    assert not (tmp_path / "runs").exists()


def test_a_config_file_that_is_not_utf8_is_one_line(cli: Cli, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "d.jsonl", [GOOD])
    (tmp_path / "eval.toml").write_bytes(b'dataset = "d.jsonl"\n# caf\xe9\n')
    for command in ("eval", "validate"):
        result = cli(command, "--config", "eval.toml", *ECHO)
        assert result.exit_code == 2
        assert result.stderr == (
            "error: eval.toml: not UTF-8 text (byte 0xe9 on line 2); save it as UTF-8\n"
        )


TOO_MANY = "100000000000000000000000"
MAXSIZE = str(sys.maxsize)


@pytest.mark.parametrize(
    ("args", "env", "toml", "message"),
    [
        (
            ["--limit", TOO_MANY],
            {},
            "",
            f"--limit (command line): Input should be less than or equal to {MAXSIZE} "
            f"(got {TOO_MANY})",
        ),
        (
            ["--offset", TOO_MANY],
            {},
            "",
            f"--offset (command line): Input should be less than or equal to {MAXSIZE} "
            f"(got {TOO_MANY})",
        ),
        (
            [],
            {"OSMOSIS_RUN_LIMIT": TOO_MANY},
            "",
            f"--limit (OSMOSIS_RUN_LIMIT): Input should be less than or equal to {MAXSIZE} "
            f"(got '{TOO_MANY}')",
        ),
        (
            [],
            {"OSMOSIS_RUN_LIMIT": "1e23"},
            "",
            "--limit (OSMOSIS_RUN_LIMIT): Input should be a valid integer, unable to parse string as "
            "an integer (got '1e23')",
        ),
        (
            [],
            {},
            "limit = 1e23",
            f"--limit (limit in eval.toml): must be at most {MAXSIZE} (got 1e+23)",
        ),
        (
            [],
            {},
            f"limit = {TOO_MANY[:-3]}",
            f"--limit (limit in eval.toml): Input should be less than or equal to {MAXSIZE} "
            f"(got {TOO_MANY[:-3]})",
        ),
        (
            [],
            {},
            "[evaluation]\nlimit = 1e23",
            f"--limit (evaluation.limit in eval.toml): must be at most {MAXSIZE} (got 1e+23)",
        ),
        (
            [],
            {},
            "offset = 1e23",
            f"--offset (offset in eval.toml): must be at most {MAXSIZE} (got 1e+23)",
        ),
    ],
)
def test_a_huge_limit_or_offset_is_a_usage_error(
    cli: Cli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    toml: str,
    message: str,
) -> None:
    write_jsonl(tmp_path / "d.jsonl", [GOOD])
    (tmp_path / "eval.toml").write_text(toml + "\n")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = cli("eval", "d.jsonl", *ECHO, "--config", "eval.toml", *args)
    assert result.exit_code == 2
    assert result.stderr == f"error: {message}\n"
    assert not (tmp_path / "runs").exists()
