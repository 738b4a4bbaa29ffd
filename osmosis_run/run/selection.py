"""Which rows of a dataset a run takes: ranges, ids, a shard, a seeded shuffle, a limit.

Everything is decided by the row's key (its id, else its position), never by execution order, so
the same options always select the same rows in the same order, and ``--shard I/N`` runs cover
every row exactly once.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections.abc import Iterable, Iterator

from pydantic import BaseModel, ConfigDict, field_serializer

from osmosis_run.errors import ConfigError
from osmosis_run.run.dataset import Row, count_rows, is_stream, iter_rows

__all__ = [
    "Selection",
    "count_planned",
    "parse_rows_spec",
    "parse_shard",
    "select",
    "stable_hash",
]


class Selection(BaseModel):
    """The row selection options of a run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    offset: int = 0
    limit: int | None = None
    rows: tuple[tuple[int, int], ...] | None = None
    ids: frozenset[str] | None = None
    shard: tuple[int, int] | None = None
    shuffle: bool = False
    seed: int = 0

    @field_serializer("ids")
    def _sorted_ids(self, ids: frozenset[str] | None) -> list[str] | None:
        return sorted(ids) if ids is not None else None


def stable_hash(*parts: object) -> int:
    """A 64-bit hash of the parts that is the same in every process (unlike ``hash()``)."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def parse_rows_spec(spec: str) -> tuple[tuple[int, int], ...]:
    """Parse ``"3,7,10-20"`` (0-based, inclusive ranges) into ranges.

    Raises:
        ConfigError: the spec is malformed.
    """
    ranges = []
    for part in spec.split(","):
        start, dash, end = part.strip().partition("-")
        try:
            low = int(start)
            high = int(end) if dash else low
        except ValueError:
            raise ConfigError(
                f'--rows "{spec}": expected indices and ranges like "3,7,10-20"'
            ) from None
        if low < 0 or high < low:
            raise ConfigError(f'--rows "{spec}": "{part.strip()}" is not a valid range')
        ranges.append((low, high))
    return tuple(ranges)


def parse_shard(spec: str) -> tuple[int, int]:
    """Parse ``"I/N"`` (0 <= I < N).

    Raises:
        ConfigError: the spec is malformed.
    """
    index, slash, count = spec.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise ConfigError(f'--shard "{spec}": expected I/N, for example 0/4') from None
    if not slash or n < 1 or not 0 <= i < n:
        raise ConfigError(f'--shard "{spec}": need 0 <= I < N, for example 0/4')
    return i, n


def select(rows: Iterable[Row], selection: Selection) -> Iterator[Row]:
    """Yield the selected rows, in source order or, with ``shuffle``, in seeded order."""
    filtered = (
        selection.offset
        or selection.rows is not None
        or selection.ids is not None
        or selection.shard is not None
    )
    # Every row is kept without a filter: no test per row (this runs once per dataset row).
    chosen = (row for row in rows if _keeps(row, selection)) if filtered else iter(rows)
    if selection.shuffle:
        chosen = _shuffled(chosen, selection)
    elif selection.limit is not None:
        chosen = itertools.islice(chosen, selection.limit)
    return chosen


def _keeps(row: Row, selection: Selection) -> bool:
    if row.index < selection.offset:
        return False
    if selection.rows is not None and not any(lo <= row.index <= hi for lo, hi in selection.rows):
        return False
    if selection.ids is not None and (row.id is None or str(row.id) not in selection.ids):
        return False
    if selection.shard is not None:
        i, n = selection.shard
        return stable_hash("shard", row.key) % n == i
    return True


def _shuffled(rows: Iterator[Row], selection: Selection) -> Iterator[Row]:
    def order(row: Row) -> int:
        return stable_hash("shuffle", selection.seed, row.key)

    if selection.limit is not None:
        # Keep only the `limit` smallest keys: memory O(limit), not O(dataset).
        return iter(heapq.nsmallest(selection.limit, rows, key=order))
    return iter(sorted(rows, key=order))


def count_planned(dataset: str | None, selection: Selection, samples: int) -> int | None:
    """How many rollouts the selection holds (None for a stream: stdin, a FIFO).

    Rows are counted by the reader's own definition of a line, so the count is what a run
    reads; only a selection by id or key parses the rows.

    Raises:
        DatasetError: the file cannot be read.
    """
    if dataset is None or is_stream(dataset):
        return None
    if selection.ids is not None or selection.shard is not None or selection.shuffle:
        rows = sum(1 for _ in select(iter_rows(dataset), selection))
        return rows * samples
    total = count_rows(dataset)
    indices = range(selection.offset, total)
    if selection.rows is not None:
        ranges = selection.rows
        count = sum(1 for i in indices if any(lo <= i <= hi for lo, hi in ranges))
    else:
        count = len(indices)
    if selection.limit is not None:
        count = min(count, selection.limit)
    return count * samples
