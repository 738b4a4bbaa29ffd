"""Dataset file formats: which reader a file needs, what a misnamed file looks like, raw records.

The name decides the format, as in osmosis-ai: ``.csv``, ``.parquet`` (``.pq``), ``.jsonl`` (and
``.ndjson``), each of the text ones optionally gzip-compressed (``.jsonl.gz``, ``.csv.gz``); any
other name is JSON Lines, as it always was. A ``.json`` file is refused. Before a run, ``check``
reads the first bytes of a file and refuses one that is plainly something else (a JSON array or
pretty-printed JSON named ``.jsonl``, a CSV named ``.jsonl``, gzip or Parquet under a text name),
with one line naming what the file looks like and how to fix it, instead of reporting every line
as invalid JSON.

CSV and Parquet rows come out of here as raw records, a mapping of column to cell, numbered from
1 in file order (a CSV header is not a row); ``osmosis_run.run.dataset`` gives them their meaning.
Both are streamed: CSV a record at a time, Parquet in small record batches of only the columns a
row can use, so memory stays flat however long the file is. pyarrow is imported only to read
Parquet (the ``parquet`` extra).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from osmosis_run.errors import DatasetError

__all__ = [
    "COLUMNS",
    "Format",
    "TableRecord",
    "check",
    "csv_count",
    "csv_records",
    "format_of",
    "open_gzip",
    "parquet_count",
    "parquet_records",
    "row_estimate",
    "stem",
    "table_ids",
]

Kind = Literal["jsonl", "csv", "parquet", "json"]

COLUMNS = (
    "id",
    "messages",
    "prompt",
    "system_prompt",
    "user_prompt",
    "ground_truth",
    "label",
    "metadata",
)
"""The columns a row is made from; a table's other columns are not read."""

CSV_FIELD_LIMIT = 16 * 1024 * 1024
"""The longest CSV field read, in characters (osmosis-ai's limit; the csv module's is 128 KiB)."""

PARQUET_BATCH = 1024
"""Rows per Parquet record batch: a batch's Python objects are what a read holds at once."""

_PARQUET_BUFFER = 1 << 16
SNIFF_BYTES = 1 << 16

_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"
_ZIP_MAGIC = b"PK\x03\x04"
_BOM = b"\xef\xbb\xbf"
_ARRAY_OF_OBJECTS = re.compile(r"\[\s*\{")
_HEADER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_ .-]*")
_SUFFIXES: dict[str, Kind] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".json": "json",
}


@dataclass(frozen=True, slots=True)
class Format:
    """How a dataset file is read: its kind, and whether it is gzip-compressed."""

    kind: Kind
    gzip: bool = False

    @property
    def suffix(self) -> str:
        """The file name ending of this format, e.g. ``.jsonl.gz``."""
        base = ".jsonl" if self.kind == "jsonl" else f".{self.kind}"
        return base + (".gz" if self.gzip else "")


def format_of(path: str) -> Format:
    """The format a dataset's name asks for (JSON Lines unless the name says otherwise)."""
    name = Path(path).name.lower()
    compressed = name.endswith(".gz")
    if compressed:
        name = name.removesuffix(".gz")
    kind = _SUFFIXES.get(Path(name).suffix, "jsonl")
    return Format(kind, compressed and kind != "parquet")


def stem(path: str) -> str:
    """The dataset's name without its format's suffixes: ``rows`` for ``data/rows.jsonl.gz``."""
    name = Path(path).name
    if name.lower().endswith(".gz") and len(name) > 3:
        name = name[:-3]
    return Path(name).stem


def _renamed(path: str, suffix: str) -> str:
    return str(Path(path).with_name(stem(path) + suffix))


# --------------------------------------------------------------------------- what a file holds


@dataclass(frozen=True, slots=True)
class _Looks:
    """What the first bytes of a file look like: a kind, and words that name it."""

    kind: Literal["gzip", "parquet", "zip", "array", "pretty", "jsonl", "csv", "text", "empty"]
    words: str


def _looks(head: bytes) -> _Looks:
    if head.startswith(_GZIP_MAGIC):
        return _Looks("gzip", "gzip-compressed data")
    if head.startswith(_PARQUET_MAGIC):
        return _Looks("parquet", "a Parquet file")
    if head.startswith(_ZIP_MAGIC):
        return _Looks("zip", "a ZIP archive")
    text = head.removeprefix(_BOM).decode("utf-8", "replace")
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    if not lines:
        return _Looks("empty", "empty")
    first = lines[0]
    if first.startswith("[") and _holds_objects(first):
        return _Looks("array", "a JSON array")
    if first.startswith("{"):
        if first == "{" or (not _is_json(first) and len(lines) > 1 and lines[1].startswith('"')):
            return _Looks("pretty", "pretty-printed JSON")
        return _Looks("jsonl", "JSON Lines")
    header = _csv_header(lines)
    if header is not None:
        return _Looks("csv", f'CSV (its header is "{_clip(",".join(header))}")')
    return _Looks("text", "text")


def _holds_objects(line: str) -> bool:
    """True for the first line of an array of rows: ``[`` alone, or an array of objects.

    An array line such as ``[1, 2]`` or ``[]`` is left to be an invalid row of JSON Lines.
    """
    if line == "[" or (_ARRAY_OF_OBJECTS.match(line) and not _is_json(line)):
        return True
    try:
        items = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(items, list) and any(isinstance(item, dict) for item in items)


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return True


def _csv_header(lines: list[str]) -> list[str] | None:
    """The first line's fields when it reads as a CSV header, else None."""
    fields = [f.strip() for f in next(csv.reader([lines[0]]), [])]
    if any(f.lower() in COLUMNS for f in fields):
        return fields
    if len(fields) < 2:
        return None
    names = all(_HEADER_NAME.fullmatch(f) for f in fields)
    same_width = len(lines) > 1 and len(next(csv.reader([lines[1]]), [])) == len(fields)
    return fields if names and same_width else None


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


# --------------------------------------------------------------------------- checks before a run


def check(path: str) -> Format:
    """The format of a dataset file, once its first bytes agree with its name.

    Raises:
        DatasetError: the file is a ``.json`` file, holds something other than its name says
            (the message names what it looks like and how to fix it), or cannot be read.
    """
    fmt = format_of(path)
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc.strerror or exc}") from None
    looks = _looks(head)
    if fmt.kind == "json":
        raise DatasetError(_json_file(path, looks))
    if fmt.kind == "parquet":
        if looks.kind != "parquet":
            raise DatasetError(_not(path, "a Parquet file", looks))
        with _parquet_file(path):
            return fmt
    if fmt.gzip:
        if looks.kind != "gzip":
            raise DatasetError(_not(path, "gzip-compressed", looks))
        looks = _looks(_gunzip_head(path))
    problem = _misnamed(path, fmt, looks)
    if problem is not None:
        raise DatasetError(problem)
    if fmt.kind == "csv":
        _check_header(path, fmt)
    return fmt


def _not(path: str, what: str, looks: _Looks) -> str:
    """The message for a file that is not what its name ending promises."""
    suffix = {"csv": ".csv", "parquet": ".parquet", "gzip": ".jsonl.gz"}.get(looks.kind, ".jsonl")
    return (
        f"dataset {path} is not {what}: it looks like {looks.words}; "
        f"name it {_renamed(path, suffix)}"
    )


def _json_file(path: str, looks: _Looks) -> str:
    """The message for a ``.json`` dataset, by what it holds."""
    target = _renamed(path, ".jsonl")
    if looks.kind == "array":
        return (
            f"dataset {path} is a .json file holding a JSON array; datasets are JSON Lines "
            f"(one object per line), CSV or Parquet: convert it with jq -c '.[]' {path} > {target}"
        )
    if looks.kind == "jsonl":
        return f"dataset {path} is a .json file holding JSON Lines; name it {target}"
    if looks.kind == "pretty":
        return (
            f"dataset {path} is a .json file holding pretty-printed JSON; datasets are JSON "
            f"Lines (one object per line): rewrite it with jq -c . {path} > {target}"
        )
    if looks.kind in ("csv", "parquet", "gzip"):
        return _not(path, "JSON", looks)
    return (
        f"dataset {path} is a .json file, and datasets are JSON Lines, CSV or Parquet; "
        "give a .jsonl, .jsonl.gz, .csv or .parquet file"
    )


def _misnamed(path: str, fmt: Format, looks: _Looks) -> str | None:
    """The message for a text dataset whose bytes are plainly another format, else None."""
    name = f"dataset {path}"
    gz = ".gz" if fmt.gzip else ""
    if looks.kind in ("gzip", "parquet", "zip"):
        fix = {
            "gzip": f"name it {path}.gz",
            "parquet": f"name it {_renamed(path, '.parquet')}",
            "zip": "unzip it, or export the sheet as CSV",
        }[looks.kind]
        return f"{name} is {looks.words}, not {_kind_words(fmt)}; {fix}"
    if fmt.kind == "csv":
        if looks.kind in ("jsonl", "array", "pretty"):
            return (
                f"{name} looks like {looks.words}, not CSV; name it {_renamed(path, '.jsonl' + gz)}"
            )
        return None
    if looks.kind == "csv":
        target = _renamed(path, ".csv" + gz)
        return f"{name} looks like {looks.words}, not JSON Lines; name it {target}"
    target = _renamed(path, "-rows.jsonl" if fmt.suffix == ".jsonl" else ".jsonl")
    if looks.kind == "array":
        return (
            f"{name} holds a JSON array, not JSON Lines (one object per line); convert it with "
            f"jq -c '.[]' {path} > {target}"
        )
    if looks.kind == "pretty":
        return (
            f"{name} holds pretty-printed JSON (objects over several lines), not JSON Lines; "
            f"rewrite it with jq -c . {path} > {target}"
        )
    return None


def _kind_words(fmt: Format) -> str:
    return {"csv": "CSV text", "jsonl": "JSON Lines text"}.get(fmt.kind, fmt.kind)


def _gunzip_head(path: str) -> bytes:
    try:
        with gzip.open(path, "rb") as f:
            return f.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"cannot read dataset {path}: {_gzip_problem(exc)}") from None


def _gzip_problem(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "the gzip data ends early (the file is truncated)"
    if isinstance(exc, zlib.error):
        return f"the gzip data is damaged ({exc})"
    return getattr(exc, "strerror", None) or str(exc)


def _check_header(path: str, fmt: Format) -> None:
    """Refuse a CSV header that names a column a row is made from twice."""
    with _csv_text(path, fmt) as text:
        try:
            header = next((fields for fields in csv.reader(text) if fields), [])
        except (csv.Error, OSError, EOFError, zlib.error) as exc:
            raise DatasetError(f"cannot read dataset {path}: {_gzip_problem(exc)}") from None
    seen: set[str] = set()
    for name in (f.strip() for f in header):
        if name in COLUMNS and name in seen:
            raise DatasetError(
                f'dataset {path}: the CSV header names the column "{name}" twice; rename one'
            )
        seen.add(name)


# --------------------------------------------------------------------------- readers


def open_gzip(path: str) -> _GzipStream:
    """A gzip file's decompressed bytes, as a stream whose read errors are ``OSError``."""
    return _GzipStream(gzip.open(path, "rb"))


class _GzipStream:
    """``read1`` of a gzip file; a truncated or damaged file is an ``OSError`` that says so."""

    def __init__(self, f: gzip.GzipFile) -> None:
        self._f = f

    def read1(self, size: int = -1, /) -> bytes:
        """Up to ``size`` decompressed bytes."""
        try:
            return self._f.read1(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise OSError(_gzip_problem(exc)) from None

    def close(self) -> None:
        """Close the file."""
        self._f.close()


@dataclass(frozen=True, slots=True)
class TableRecord:
    """One CSV or Parquet row as read: its number, where it is, its cells or why it has none."""

    number: int
    """1-based, in file order; a CSV header and blank CSV lines are not rows."""
    where: str
    """How messages name the row: ``data.csv: row 3 (line 4)``, ``data.parquet: row 3``."""
    cells: dict[str, Any]
    problem: str | None = None
    metadata_mode: bool = False
    """The table has a ``metadata`` column: a row with a system prompt or metadata needs no
    user prompt."""


def _csv_text(path: str, fmt: Format) -> io.TextIOWrapper:
    """The CSV file as text; bytes that are not UTF-8 are kept as surrogates, found per row."""
    raw: Any = gzip.open(path, "rb") if fmt.gzip else open(path, "rb")  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")


def csv_records(path: str, name: str) -> Iterator[TableRecord]:
    """Stream the records of a CSV file, one per row, header first read and then left out.

    Raises:
        DatasetError: the file cannot be read (a CSV record that cannot be parsed is a row
            with a problem, not an error).
    """
    # The csv module's limit is process-wide; raising it only ever accepts more.
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    try:
        with _csv_text(path, format_of(path)) as text:
            yield from _csv_rows(csv.reader(text), name)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"cannot read dataset {name}: {_gzip_problem(exc)}") from None


def _csv_rows(reader: Any, name: str) -> Iterator[TableRecord]:
    header: list[str] | None = None
    mode = False
    number = line = 0
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            number += 1
            where = f"{name}: row {number} (line {line + 1})"
            line = reader.line_num
            yield TableRecord(number, where, {}, f"not CSV ({exc}); check this row's quotes")
            continue
        start, line = line + 1, reader.line_num
        if not fields:
            continue
        if header is None:
            header = [f.strip() for f in fields]
            mode = "metadata" in header
            continue
        number += 1
        where = f"{name}: row {number} (line {start})"
        if len(fields) > len(header):
            problem = (
                f"{len(fields)} fields, but the header has {len(header)}; "
                "quote a field that holds a comma"
            )
            yield TableRecord(number, where, {}, problem)
            continue
        yield TableRecord(number, where, dict(zip(header, fields, strict=False)), None, mode)


def csv_count(path: str) -> int:
    """How many rows ``csv_records`` gives, without making them.

    Raises:
        DatasetError: the file cannot be read.
    """
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    total = -1  # the header
    try:
        with _csv_text(path, format_of(path)) as text:
            reader = csv.reader(text)
            while True:
                try:
                    fields = next(reader)
                except StopIteration:
                    break
                except csv.Error:
                    total += 1
                    continue
                total += bool(fields)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"cannot read dataset {path}: {_gzip_problem(exc)}") from None
    return max(total, 0)


def _parquet_file(path: str) -> Any:
    """The open ``pyarrow.parquet.ParquetFile`` (read page by page, so memory stays flat).

    Raises:
        DatasetError: pyarrow is missing, or the file is not readable Parquet.
    """
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise DatasetError(
            f"dataset {path} is Parquet, which needs pyarrow: pip install 'osmosis-run[parquet]'"
        ) from None
    try:
        return pq.ParquetFile(path, buffer_size=_PARQUET_BUFFER, pre_buffer=False)
    except _arrow_errors() as exc:
        raise DatasetError(_parquet_problem(path, exc)) from None


def _arrow_errors() -> tuple[type[Exception], ...]:
    """What pyarrow raises for a file it cannot read (``ArrowIOError`` is an ``OSError``)."""
    import pyarrow as pa

    return (OSError, ValueError, pa.ArrowException)


def _parquet_problem(path: str, exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot read dataset {path}: {exc.strerror}"
    return f"dataset {path} is not readable Parquet: {exc}"


def parquet_count(path: str) -> int:
    """How many rows a Parquet file holds (from its footer).

    Raises:
        DatasetError: the file cannot be read.
    """
    with _parquet_file(path) as f:
        return int(f.metadata.num_rows)


def parquet_records(path: str, name: str) -> Iterator[TableRecord]:
    """Stream the rows of a Parquet file, reading only the columns a row can use.

    Raises:
        DatasetError: the file cannot be read.
    """
    with _parquet_file(path) as f:
        columns = [c for c in f.schema_arrow.names if c in COLUMNS]
        mode = "metadata" in columns
        number = 0
        batches = f.iter_batches(batch_size=PARQUET_BATCH, columns=columns, use_threads=False)
        errors = _arrow_errors()
        while True:
            try:
                batch = next(batches, None)
            except errors as exc:
                raise DatasetError(_parquet_problem(name, exc)) from None
            if batch is None:
                return
            for cells in batch.to_pylist():
                number += 1
                yield TableRecord(number, f"{name}: row {number}", cells, None, mode)


def table_ids(path: str) -> Iterator[str] | None:
    """The ``id`` cells of a CSV or Parquet file as text, in file order (None: no such column).

    Empty cells are left out; the cells of rows that turn out invalid are given too.

    Raises:
        DatasetError: the file cannot be read.
    """
    fmt = format_of(path)
    if fmt.kind == "parquet":
        with _parquet_file(path) as f:
            if "id" not in f.schema_arrow.names:
                return None
        return _parquet_ids(path)
    with _csv_text(path, fmt) as text:
        try:
            header = next((fields for fields in csv.reader(text) if fields), [])
        except (csv.Error, OSError, EOFError, zlib.error) as exc:
            raise DatasetError(f"cannot read dataset {path}: {_gzip_problem(exc)}") from None
    return _csv_ids(path) if "id" in (f.strip() for f in header) else None


def _csv_ids(path: str) -> Iterator[str]:
    for record in csv_records(path, path):
        value = record.cells.get("id")
        if value:
            yield value


def _parquet_ids(path: str) -> Iterator[str]:
    with _parquet_file(path) as f:
        errors = _arrow_errors()
        batches = f.iter_batches(batch_size=PARQUET_BATCH * 16, columns=["id"], use_threads=False)
        while True:
            try:
                batch = next(batches, None)
            except errors as exc:
                raise DatasetError(_parquet_problem(path, exc)) from None
            if batch is None:
                return
            for value in batch.column(0).to_pylist():
                if value is not None and value != "":
                    yield str(value)


def row_estimate(path: str) -> int:
    """About how many rows a CSV or Parquet file holds, without reading it through."""
    fmt = format_of(path)
    if fmt.kind == "parquet":
        return parquet_count(path)
    try:
        size = Path(path).stat().st_size
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:
        return 0
    if fmt.gzip:
        size *= 4  # text compresses about so much
    return size * (head.count(b"\n") or 1) // max(len(head), 1)
