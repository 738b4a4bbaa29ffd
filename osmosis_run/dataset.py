"""JSONL dataset rows -> ``Row`` objects, streamed; a bad row is data that names file:line.

Row shapes (SPEC §2): the prompt is ``messages`` (a chat list), ``prompt`` (a chat list or a
string), or ``system_prompt`` + ``user_prompt``; the label is ``ground_truth`` or ``label``
(scalars become strings); ``metadata`` is an object; ``id`` is an optional string or integer,
unique in the dataset.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from osmosis_run.errors import DatasetError

__all__ = ["Row", "iter_rows", "parse_row", "rollout_id", "row_part"]

_SAFE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
_UNSAFE_CHAR = re.compile(r"[^A-Za-z0-9._-]")


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


def iter_rows(path: str, *, source: IO[str] | None = None) -> Iterator[Row]:
    """Stream the rows of a JSONL file (``-`` is stdin); blank lines are skipped.

    Raises:
        DatasetError: the file cannot be opened or decoded.
    """
    name = "<stdin>" if path == "-" else path
    try:
        stream = source or (sys.stdin if path == "-" else open(path, encoding="utf-8"))  # noqa: SIM115
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc.strerror or exc}") from None
    seen: dict[str, int] = {}
    try:
        index = 0
        for number, text in enumerate(stream, start=1):
            if number == 1:
                text = text.removeprefix("\ufeff")  # a byte order mark, as some editors write
            if not text.strip():
                continue
            row = parse_row(text, index=index, line=number, name=name)
            _check_unique(row, seen, name)
            yield row
            index += 1
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{name}: not UTF-8 text ({exc.reason}); save it as UTF-8") from None
    finally:
        if stream is not sys.stdin and source is None:
            stream.close()


def _check_unique(row: Row, seen: dict[str, int], name: str) -> None:
    if row.id is None or row.error is not None:
        return
    key = str(row.id)
    first = seen.setdefault(key, row.line)
    if first != row.line:
        row.error = f'{name}:{row.line}: duplicate id "{key}" (first on line {first})'
        row.id = None


def parse_row(text: str, *, index: int, line: int, name: str) -> Row:
    """Parse one JSONL line into a ``Row``; problems go into ``Row.error``, never raise."""
    where = f"{name}:{line}"
    try:
        data = json.loads(text.rstrip())
    except json.JSONDecodeError as exc:
        return Row(
            index, line, None, None, error=f"{where}: invalid JSON: {exc.msg} (column {exc.colno})"
        )
    if not isinstance(data, dict):
        kind = _json_kind(data)
        return Row(
            index, line, None, None, error=f"{where}: a row must be a JSON object (got {kind})"
        )
    row = Row(index, line, None, None)
    try:
        row.id = _row_id(data)
        row.prompt = _prompt(data)
        row.label = _label(data)
        row.metadata = _metadata(data)
    except _RowProblem as problem:
        row.error = f"{where}: {problem}"
    return row


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


def _prompt(data: dict[str, Any]) -> list[dict[str, Any]]:
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
        return _osmosis_prompt(data)
    raise _RowProblem('no prompt: give "messages", "prompt", or "user_prompt"')


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


def _osmosis_prompt(data: dict[str, Any]) -> list[dict[str, Any]]:
    messages = []
    for field, role in (("system_prompt", "system"), ("user_prompt", "user")):
        value = data.get(field)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise _expect(field, value, "a string")
        messages.append({"role": role, "content": value})
    if not any(m["role"] == "user" for m in messages):
        raise _RowProblem('"user_prompt" is missing or empty')
    return messages


def _label(data: dict[str, Any]) -> str | None:
    field = "ground_truth" if data.get("ground_truth") is not None else "label"
    value = data.get(field)
    if value is None:
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
