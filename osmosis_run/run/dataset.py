"""Dataset rows -> ``Row`` objects, streamed; a bad row is data that names where it is.

A dataset is JSON Lines (``.jsonl``, or any name not below), gzip-compressed JSON Lines
(``.jsonl.gz``), CSV (``.csv``, ``.csv.gz``) or Parquet (``.parquet``, the ``parquet`` extra);
``_formats`` reads the files, this module gives rows their meaning. stdin and other streams are
always JSON Lines. ``check_file`` refuses, before a run, a file that is plainly not what its name
says (a ``.json`` file, a CSV named ``.jsonl``), in one line naming what it looks like.

Row shapes (SPEC §2): the prompt is ``messages`` (a chat list), ``prompt`` (a chat list or a
string), or ``system_prompt`` + ``user_prompt``; the label is ``ground_truth`` or ``label``
(scalars become strings); ``metadata`` is an object; ``id`` is an optional string or integer,
unique in the dataset. As in osmosis-ai, an empty label or system prompt counts as missing.

CSV and Parquet rows follow osmosis-ai's table rules: every empty cell counts as missing, a
``metadata`` (or ``messages``) cell of text is JSON, an empty metadata object counts as none,
other cell values are taken as they are
(a number label becomes a string), and columns no row shape names are not read. A table with a
``metadata`` column is in metadata mode: a row needs no user prompt when it has a system prompt
or metadata (a JSON Lines row always needs one, as SPEC §2 has it). Their ``line``
is the row's 1-based number in the file (a CSV header is not a row), their messages say
``data.csv: row 3 (line 4): ...``, and their digest is the hash of the row's cells as one JSON
object.

One definition of a line serves reading, counting (``count_rows``), ``validate`` and resume:
the bytes are split on ``\n`` only, one trailing ``\r`` is dropped (so ``\r\n`` works), a byte
order mark is dropped from the first line, and each line is decoded as UTF-8 on its own. A line
holding nothing but JSON whitespace (space, tab, CR) is blank: skipped and not counted. Every
other line is a row, and a row that cannot be used (not UTF-8, not JSON, nested deeper than
``MAX_NESTING`` levels of objects and arrays, a number too long to read, a lone surrogate such
as ``"\ud800"``, a bad field) is an invalid row whose message names its line; reading never
raises for a row.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from osmosis_run.errors import DatasetError
from osmosis_run.run import _formats

__all__ = [
    "MAX_NESTING",
    "ByteStream",
    "Row",
    "check_file",
    "count_rows",
    "dataset_stem",
    "dotted",
    "find_lone_surrogate",
    "is_stream",
    "iter_rows",
    "no_rows_hint",
    "parse_row",
    "rollout_id",
    "row_part",
    "too_deep",
    "too_deep_at",
]

MAX_NESTING = 64
"""The deepest nesting of objects and arrays a row may hold (the row's own object is level 1)."""

CHUNK = 1 << 16
"""Bytes asked for per read: a pipe's read returns what has arrived, up to this."""

_BOM = b"\xef\xbb\xbf"
_JSON_SPACE = b" \t\r"
"""A line of nothing but these is blank: skipped, and not counted as a row."""
_BLANK_LINE = re.compile(rb"[%s]*\n" % _JSON_SPACE)
_BLANK_LINE_AFTER = re.compile(rb"\n(?=[%s]*\n)" % _JSON_SPACE)
_SAFE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
_UNSAFE_CHAR = re.compile(r"[^A-Za-z0-9._-]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_DECODER = json.JSONDecoder()


class ByteStream(Protocol):
    """What rows are read from: ``read1`` returns what is there (``b""`` at the end)."""

    def read1(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes, after at most one read of the source."""
        ...


@dataclass(slots=True)
class Row:
    """One dataset row: where it came from and what it asks; ``error`` is set when invalid."""

    index: int
    line: int
    id: str | int | None
    prompt: list[dict[str, Any]] | None
    label: str | None = None
    metadata: dict[str, Any] | None = None
    error: str | None = None
    digest: str = ""
    """16 hex digits of a hash of the row's line as read (no line ending, no BOM)."""

    @property
    def key(self) -> str:
        """The row's stable identity: its id, else its position in the source."""
        return f"id:{self.id}" if self.id is not None else f"index:{self.index}"

    @property
    def part(self) -> str:
        """This row's share of its rollout ids: one safe path segment, unique per key."""
        return row_part(self.id, self.index)


def row_part(row_id: str | int | None, index: int) -> str:
    """Map a row id (or, without one, the row's index) to one safe, collision-free path segment.

    A safe id is kept as it is. Any other id keeps its safe characters and gains ``~`` and a hash
    of the whole id; rows without an id become ``row@<index>``. ``~`` and ``@`` never occur in a
    kept id, so the three forms cannot meet.
    """
    if row_id is None:
        return f"row@{index}"
    text = str(row_id)
    if _SAFE_ID.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{_UNSAFE_CHAR.sub('_', text)[:48]}~{digest}"


def rollout_id(part: str, sample_index: int) -> str:
    """The rollout id of one sample of one row."""
    return f"{part}.s{sample_index}"


def is_stream(dataset: str) -> bool:
    """True for a dataset read as a stream, never as a file: ``-`` (stdin), a FIFO, a device.

    A stream is read once, as it arrives: its rows are not counted ahead and not hashed.
    """
    if dataset == "-":
        return True
    try:
        mode = os.stat(dataset).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def check_file(path: str) -> None:
    """Refuse a dataset file whose first bytes are plainly not the format its name says.

    A stream (``-``, a FIFO) is JSON Lines whatever its name, and is not read here.

    Raises:
        DatasetError: a ``.json`` file, a file that is another format than its name says (the
            message names what it looks like and how to fix it), a Parquet file without
            pyarrow, or a file that cannot be read.
    """
    if is_stream(path):
        return
    _formats.check(path)


def dataset_stem(path: str) -> str:
    """The dataset's file name without its format's suffixes: ``rows`` for ``rows.jsonl.gz``."""
    return _formats.stem(path)


def no_rows_hint(path: str) -> str:
    """What a dataset of this name holds, for the message of an empty one."""
    kind = "jsonl" if path == "-" or is_stream(path) else _formats.format_of(path).kind
    if kind == "csv":
        return "a CSV dataset holds a header line, then one row per line"
    if kind == "parquet":
        return "a Parquet dataset holds one row per table row"
    return "a dataset holds one JSON object per line"


def iter_rows(
    path: str,
    *,
    source: ByteStream | None = None,
    on_wait: Callable[[], None] | None = None,
) -> Iterator[Row]:
    """Stream the rows of a dataset file (``-`` is stdin); blank lines are skipped.

    The file's name decides its format (JSON Lines, gzip-compressed or not, CSV, Parquet); a
    stream is JSON Lines.

    Args:
        path: the dataset, as messages name it (``-`` reads stdin unless ``source`` is given).
        source: a binary JSON Lines stream to read instead of opening ``path`` (it is not
            closed here).
        on_wait: called just before each read that may block (no complete line is left to
            give), so a caller can hand over the rows it holds while a slow producer writes.
            A row is given as soon as its ``\n`` has been read.

    Raises:
        DatasetError: the file cannot be opened or read.
    """
    fmt = _file_format(path, source)
    if fmt.kind == "csv":
        return _table_rows(_formats.csv_records, path)
    if fmt.kind == "parquet":
        return _table_rows(_formats.parquet_records, path)
    return _jsonl_rows(path, source, on_wait, compressed=fmt.gzip)


_JSONL = _formats.Format("jsonl")


def _file_format(path: str, source: ByteStream | None) -> _formats.Format:
    """The format ``path`` is read in: JSON Lines for a stream or a given source."""
    if source is not None or path == "-" or is_stream(path):
        return _JSONL
    return _formats.format_of(path)


def _jsonl_rows(
    path: str,
    source: ByteStream | None,
    on_wait: Callable[[], None] | None,
    *,
    compressed: bool,
) -> Iterator[Row]:
    name = "<stdin>" if path == "-" else path
    stream, owned = _open(path, source, compressed=compressed)
    try:
        number = index = 0
        seen: dict[str, int] = {}
        for block in _blocks(stream, on_wait, name):
            if b"\r" in block:
                block = block.replace(b"\r\n", b"\n")
            lines = block.split(b"\n")
            lines.pop()  # the empty piece after the block's last newline
            for raw in lines:
                number += 1
                if not raw.strip(_JSON_SPACE):
                    continue
                row = _read_row(raw, index=index, line=number, name=name)
                _check_unique(row, seen, name)
                yield row
                index += 1
    finally:
        if owned:
            stream.close()


def count_rows(path: str) -> int:
    """How many rows a dataset file holds, by ``iter_rows``' own lines, without parsing them.

    Raises:
        DatasetError: the file cannot be opened or read.
    """
    fmt = _file_format(path, None)
    if fmt.kind == "csv":
        return _formats.csv_count(path)
    if fmt.kind == "parquet":
        return _formats.parquet_count(path)
    stream, _ = _open(path, None, compressed=fmt.gzip)
    total = 0
    try:
        for block in _blocks(stream, None, path):
            blank = len(_BLANK_LINE_AFTER.findall(block)) + bool(_BLANK_LINE.match(block))
            total += block.count(b"\n") - blank
    finally:
        stream.close()
    return total


def _open(path: str, source: ByteStream | None, *, compressed: bool) -> tuple[Any, bool]:
    """The stream to read and whether it is ours to close."""
    if source is not None:
        return source, False
    if path == "-":
        return sys.stdin.buffer, False
    try:
        if compressed:
            return _formats.open_gzip(path), True
        return open(path, "rb"), True  # closed by the caller
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc.strerror or exc}") from None


def _blocks(stream: ByteStream, on_wait: Callable[[], None] | None, name: str) -> Iterator[bytes]:
    """The stream's bytes in blocks of whole lines, each ending in ``\n``, as soon as read.

    The byte order mark is dropped from the first block; a line longer than a read is
    gathered from its pieces (joined once, never re-copied); a last line without a newline
    is given one. Splitting a block is then C-level work, and costs no read.
    """
    pending: list[bytes] = []  # the start of a line whose end has not been read yet
    first = True
    while True:
        if on_wait is not None:
            on_wait()
        try:
            chunk = stream.read1(CHUNK)
        except OSError as exc:
            raise DatasetError(f"cannot read dataset {name}: {exc.strerror or exc}") from None
        if not chunk:
            break
        end = chunk.rfind(b"\n") + 1
        if not end:
            pending.append(chunk)
            continue
        head, tail = chunk[:end], chunk[end:]
        block = b"".join([*pending, head]) if pending else head
        if first:
            block, first = block.removeprefix(_BOM), False
        yield block
        pending = [tail] if tail else []
    if pending:
        block = b"".join([*pending, b"\n"])
        yield block.removeprefix(_BOM) if first else block


def _read_row(raw: bytes, *, index: int, line: int, name: str) -> Row:
    digest = hashlib.blake2b(raw, digest_size=8).hexdigest()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        column = len(raw[: exc.start].decode("utf-8")) + 1
        problem = (
            f"{name}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {column}); "
            "save the file as UTF-8"
        )
        return Row(index, line, None, None, error=problem, digest=digest)
    return parse_row(text, index=index, line=line, name=name, digest=digest)


def _check_unique(row: Row, seen: dict[str, int], name: str) -> None:
    if row.id is None or row.error is not None:
        return
    key = str(row.id)
    first = seen.setdefault(key, row.line)
    if first != row.line:
        row.error = f'{name}:{row.line}: duplicate id "{key}" (first on line {first})'
        row.id = None


def parse_row(text: str, *, index: int, line: int, name: str, digest: str | None = None) -> Row:
    """Parse one JSONL line into a ``Row``; problems go into ``Row.error``, never raise.

    ``digest`` is the hash of the line's bytes (made from ``text`` when not given).
    """
    if digest is None:
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    row = Row(index, line, None, None, digest=digest)
    try:
        data = _json_object(text)
        # _fill's body, inline: this runs once per JSONL row.
        row.id = _row_id(data)
        row.prompt = _prompt(data, False)  # metadata mode is for tables (SPEC §2: a prompt)
        row.label = _label(data)
        row.metadata = _metadata(data)
    except _RowProblem as problem:
        row.error = f"{name}:{line}: {problem}"
    return row


def _fill(row: Row, data: dict[str, Any], *, metadata_mode: bool) -> None:
    """Set the row's fields from its data; the first bad field raises ``_RowProblem``."""
    row.id = _row_id(data)
    row.prompt = _prompt(data, metadata_mode)
    row.label = _label(data)
    row.metadata = _metadata(data)


def _table_rows(
    records: Callable[[str, str], Iterator[_formats.TableRecord]], path: str
) -> Iterator[Row]:
    """The rows of a CSV or Parquet file, from its records."""
    ids = _formats.table_ids(path)
    unique = _UniqueIds(ids, _formats.row_estimate(path)) if ids is not None else None
    source = records(path, path)
    try:
        for index, record in enumerate(source):
            row = _table_row(record, index)
            if unique is not None and row.id is not None and row.error is None:
                first = unique.first(str(row.id), row.line)
                if first is not None:
                    row.error = f'{record.where}: duplicate id "{row.id}" (first in row {first})'
                    row.id = None
            yield row
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()  # the file, now, when a reader stops early


def _table_row(record: _formats.TableRecord, index: int) -> Row:
    """One CSV or Parquet row; problems go into ``Row.error``, never raise.

    Its digest is the hash of the row as the JSON object it stands for (the cells as read,
    when they cannot be made into one).
    """
    row = Row(index, record.number, None, None)
    problem = record.problem
    if problem is None:
        try:
            data = _row_data(record.cells)
            text = json.dumps(data)
            row.digest = _hash(text)
            if "\\udc" in text:  # a byte that is not UTF-8, kept by the CSV reader as a surrogate
                _check_utf8(data)
            _fill(row, data, metadata_mode=record.metadata_mode)
        except _RowProblem as exc:
            problem = str(exc)
        else:
            return row
    if not row.digest:
        row.digest = _hash(json.dumps(record.cells, default=_plain_scalar))
    row.error = f"{record.where}: {problem}"
    return row


def _hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _check_utf8(cells: dict[str, Any]) -> None:
    for column, value in cells.items():
        if not isinstance(value, str):
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            byte = ord(value[exc.start]) - 0xDC00
            raise _RowProblem(
                f'not UTF-8 text (byte 0x{byte:02x} in column "{column}"); save the file as UTF-8'
            ) from None


_JSON_CELLS = ("metadata", "messages")
"""Columns whose text cells are JSON (a table cell cannot hold an object or a list)."""


def _row_data(cells: dict[str, Any]) -> dict[str, Any]:
    """A table row's cells as a row object: empty cells left out, JSON cells parsed."""
    data: dict[str, Any] = {}
    for column, value in cells.items():
        if value is None or value == "" or column not in _formats.COLUMNS:
            continue
        if isinstance(value, str):
            if column in _JSON_CELLS:
                if not value.strip():
                    continue
                value = _json_cell(column, value)
        elif isinstance(value, dict | list | tuple):
            value = _plain(column, value)
        elif not isinstance(value, int | float):  # a date, a decimal: its text
            value = _plain_scalar(value)
        if column == "metadata" and value == {}:
            continue  # osmosis-ai: an empty metadata object counts as none
        data[column] = value
    return data


def _json_cell(column: str, text: str) -> Any:
    """The JSON value a text cell holds, checked as a row's own JSON is."""
    try:
        value = _DECODER.decode(text.strip())
    except json.JSONDecodeError as exc:
        raise _RowProblem(f'"{column}" is not valid JSON: {exc.msg} (column {exc.colno})') from None
    except RecursionError:
        raise _RowProblem(_TOO_DEEP) from None
    except ValueError as exc:  # an integer of more digits than int() reads
        raise _RowProblem(_bad_number(exc)) from None
    holder = {column: value}
    if text.count("{") + text.count("[") >= MAX_NESTING and too_deep(holder):
        raise _RowProblem(_TOO_DEEP)
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        problem = _lone_surrogate(holder)
        if problem is not None:
            raise _RowProblem(problem)
    return value


def _plain(column: str, value: dict[str, Any] | list[Any] | tuple[Any, ...]) -> Any:
    """A Parquet struct, list or map cell as plain JSON values (a map becomes an object)."""
    if column == "metadata" and isinstance(value, list) and _is_pairs(value):
        value = dict(value)
    return json.loads(json.dumps(value, default=_plain_scalar))


def _is_pairs(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, tuple) and len(i) == 2 for i in items)


def _plain_scalar(value: object) -> Any:
    """A cell value JSON has no type for, as JSON: a date as ISO text, a decimal as a number."""
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() else str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, tuple):
        return list(value)
    return str(value)


MIN_ID_BITS = 1 << 16
"""The smallest filter ``_UniqueIds`` makes, in bits."""


class _UniqueIds:
    """Which rows of a table repeat an earlier row's id, in about 2 bytes a row, not 100.

    A table is read twice. First its id column goes through a filter of two bits an id (16
    bits a row, as many rows as the file is estimated to hold), which keeps the hash of every
    id it may have seen before: an id that occurs twice is always among these suspects, and
    about one unique id in seventy joins them by chance. Then, as the rows are read, only the
    suspects' first rows are remembered, exactly. (JSON Lines, which may be a stream read
    once, keeps every id.)
    """

    def __init__(self, ids: Iterator[str], estimate: int) -> None:
        size = max(MIN_ID_BITS, 1 << (16 * max(estimate, 1) - 1).bit_length())
        size = min(size, 1 << 32)
        bits = bytearray(size >> 3)
        mask = size - 1
        suspects: set[int] = set()
        for key in ids:
            h = hash(key)
            low, high = h & mask, (h >> 32) & mask
            if bits[low >> 3] & (1 << (low & 7)) and bits[high >> 3] & (1 << (high & 7)):
                suspects.add(h)
            bits[low >> 3] |= 1 << (low & 7)
            bits[high >> 3] |= 1 << (high & 7)
        self._suspects = suspects
        self._first: dict[str, int] = {}

    def first(self, key: str, line: int) -> int | None:
        """The row an earlier row with this id is on, or None for the id's first row."""
        if hash(key) not in self._suspects:
            return None
        first = self._first.setdefault(key, line)
        return first if first != line else None


def _json_object(text: str) -> dict[str, Any]:
    """The row's JSON object, checked for what would fail later: depth and lone surrogates."""
    try:
        data = _DECODER.decode(text.rstrip())  # json.loads, one call fewer: it runs per row
    except json.JSONDecodeError as exc:
        raise _RowProblem(_not_json(text, exc)) from None
    except RecursionError:
        raise _RowProblem(_TOO_DEEP) from None
    except ValueError as exc:  # an integer of more digits than int() reads
        raise _RowProblem(_bad_number(exc)) from None
    if not isinstance(data, dict):
        raise _RowProblem(f"a row must be a JSON object (got {_json_kind(data)})")
    # Cheap C-level tests first: only a line with that many brackets can be that deep, and
    # only an escape can make a lone surrogate (the line itself is valid UTF-8).
    if text.count("{") + text.count("[") > MAX_NESTING and too_deep(data):
        raise _RowProblem(_TOO_DEEP)
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        problem = _lone_surrogate(data)
        if problem is not None:
            raise _RowProblem(problem)
    return data


_VALID_TEXT = "text must be valid Unicode"
_TOO_DEEP = f"nested deeper than {MAX_NESTING} levels of objects and arrays; flatten the row"


def _not_json(text: str, exc: json.JSONDecodeError) -> str:
    message = f"invalid JSON: {exc.msg} (column {exc.colno})"
    if "\r" in text:
        return f"{message}; the line holds CR line breaks: JSON Lines needs \\n line endings"
    stripped = text.strip(" \t")
    if stripped.isspace():
        return (
            f"invalid JSON: the line holds only whitespace (U+{ord(stripped[0]):04X}); "
            "delete it or leave it empty"
        )
    return message


def _bad_number(exc: ValueError) -> str:
    if "integer string conversion" not in str(exc):
        return f"invalid JSON: {exc}"
    return (
        f"a number is too long (more than {sys.get_int_max_str_digits()} digits); "
        "write it as a string"
    )


def too_deep(data: dict[str, Any] | list[Any]) -> bool:
    """True when objects and arrays nest deeper than ``MAX_NESTING`` (walked, not recursed)."""
    return too_deep_at(data) is not None


def too_deep_at(data: dict[str, Any] | list[Any]) -> list[str | int] | None:
    """The path of the first object or array nested deeper than ``MAX_NESTING``, or None."""
    stack: list[tuple[list[str | int], Any]] = [([], data)]
    while stack:
        path, item = stack.pop()
        if len(path) >= MAX_NESTING:
            return path
        children = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in children:
            if isinstance(child, dict | list):
                stack.append(([*path, key], child))
    return None


def _lone_surrogate(data: dict[str, Any]) -> str | None:
    """Name the first string (or key) that holds a lone surrogate, e.g. ``"metadata.k"``."""
    found = find_lone_surrogate(data)
    if found is None:
        return None
    path, bad, is_key = found
    where = dotted(path)
    if is_key:
        owner = f'"{where}" has a key' if where else "a key"
        return f"{owner} that holds a lone surrogate ({bad}); {_VALID_TEXT}"
    return f'"{where}" holds a lone surrogate ({bad}); {_VALID_TEXT}'


def find_lone_surrogate(data: Any) -> tuple[list[str | int], str, bool] | None:
    """The first string or key, depth first, that holds a lone surrogate such as ``"\\ud800"``.

    Returns its path (keys and list indexes; for a key, the path of the object holding it),
    the surrogate as an escape, and whether it is in a key. Walked, not recursed.
    """
    stack: list[tuple[list[str | int], Any]] = [([], data)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            for key in item:
                bad = _surrogate_in(key) if isinstance(key, str) else None
                if bad is not None:
                    return path, bad, True
            stack.extend(([*path, k], v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend(([*path, i], child) for i, child in reversed(list(enumerate(item))))
        elif isinstance(item, str):
            bad = _surrogate_in(item)
            if bad is not None:
                return path, bad, False
    return None


def dotted(path: list[str | int]) -> str:
    """A field's path as messages name it: ``metadata.k``, ``initial_messages[0].content``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text = f"{text}.{part}" if text else part
    return text


def _surrogate_in(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return text[exc.start : exc.end].encode("unicode_escape").decode("ascii")
    return None


class _RowProblem(Exception):
    """A row field is wrong; the message names the field."""


def _json_kind(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _expect(field: str, value: object, kinds: str) -> _RowProblem:
    return _RowProblem(f'"{field}" must be {kinds} (got {_json_kind(value)})')


def _row_id(data: dict[str, Any]) -> str | int | None:
    value = data.get("id")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _expect("id", value, "a string or an integer")
    if value == "":
        raise _RowProblem('"id" must not be empty')
    return value


def _prompt(data: dict[str, Any], metadata_mode: bool) -> list[dict[str, Any]]:
    if "messages" in data:
        return _messages("messages", data["messages"])
    if "prompt" in data:
        value = data["prompt"]
        if value == "":
            raise _RowProblem('"prompt" must not be empty')
        if isinstance(value, str):
            return [{"role": "user", "content": value}]
        if not isinstance(value, list):
            raise _expect("prompt", value, "a string or a list of chat messages")
        return _messages("prompt", value)
    if "user_prompt" in data or "system_prompt" in data:
        return _osmosis_prompt(data, metadata_mode=metadata_mode)
    if metadata_mode:
        return _metadata_prompt(data, [])
    raise _RowProblem('no prompt: give "messages", "prompt", or "user_prompt"')


_NO_PROMPT_NOR_METADATA = (
    'no prompt and no metadata: give "user_prompt" (or "prompt", "messages") '
    'or a non-empty "metadata"'
)


def _metadata_prompt(data: dict[str, Any], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Metadata mode: a row without a user prompt stands on its system prompt or its metadata.

    As osmosis-ai's reader has it: only a row with neither is refused.
    """
    if not messages and not _metadata(data):
        raise _RowProblem(_NO_PROMPT_NOR_METADATA)
    return messages


def _messages(field: str, value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _expect(field, value, "a list of chat messages")
    if not value:
        raise _RowProblem(f'"{field}" must not be empty')
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise _expect(f"{field}[{i}]", message, "an object")
        if not isinstance(message.get("role"), str):
            raise _expect(f"{field}[{i}].role", message.get("role"), "a string")
    return value


def _osmosis_prompt(data: dict[str, Any], *, metadata_mode: bool) -> list[dict[str, Any]]:
    messages = []
    for field, role in (("system_prompt", "system"), ("user_prompt", "user")):
        value = data.get(field)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise _expect(field, value, "a string")
        messages.append({"role": role, "content": value})
    if not any(m["role"] == "user" for m in messages):
        if metadata_mode:
            return _metadata_prompt(data, messages)
        raise _RowProblem('"user_prompt" is missing or empty')
    return messages


def _label(data: dict[str, Any]) -> str | None:
    """``ground_truth``, else ``label``; an empty string counts as missing (as in osmosis-ai)."""
    field = "ground_truth"
    value = data.get(field)
    if value is None or value == "":
        field = "label"
        value = data.get(field)
        if value is None or value == "":
            return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        raise _expect(field, value, "a string or a number")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _metadata(data: dict[str, Any]) -> dict[str, Any] | None:
    value = data.get("metadata")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _expect("metadata", value, "an object")
    return value


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
