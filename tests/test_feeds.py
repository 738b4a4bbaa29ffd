"""Row feeds (run/feeds.py): jobs handed to the event loop a batch at a time, made on the loop
from a regular file or by a thread from a stream, and the stream a FIFO is read from."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from osmosis_run.errors import DatasetError
from osmosis_run.run.dataset import Row, iter_rows
from osmosis_run.run.feeds import FEED_BATCH, Feed, InlineFeed, ThreadFeed, open_stream
from osmosis_run.run.rollouts import Job


def job(i: int) -> Job:
    return Job(Row(index=i, line=i + 1, id=i, prompt=None), 0, f"r{i}.s0", 0)


def jobs(count: int) -> Callable[[Callable[[], None]], Iterator[Job]]:
    def make(on_wait: Callable[[], None]) -> Iterator[Job]:
        return (job(i) for i in range(count))

    return make


async def drain(feed: Feed) -> list[int]:
    sizes: list[int] = []
    while (batch := await feed.next_batch()) is not None:
        sizes.append(len(batch))
    feed.close()
    return sizes


@pytest.mark.parametrize("kind", ["inline", "thread"])
def test_a_feed_hands_every_job_over_in_batches_then_none(kind: str) -> None:
    async def main() -> list[int]:
        make = jobs(FEED_BATCH * 2 + 5)
        feed = (
            InlineFeed(make) if kind == "inline" else ThreadFeed(make, asyncio.get_running_loop())
        )
        return await drain(feed)

    assert asyncio.run(main()) == [FEED_BATCH, FEED_BATCH, 5]


def test_what_the_feeds_thread_hits_is_raised_on_the_loop_after_the_jobs_before_it() -> None:
    def make(on_wait: Callable[[], None]) -> Iterator[Job]:
        yield job(0)
        on_wait()  # a read that may block: what was made so far is handed over first
        raise DatasetError("d.jsonl:2: not JSON")

    async def main() -> tuple[list[Job] | None, str]:
        feed = ThreadFeed(make, asyncio.get_running_loop())
        first = await feed.next_batch()
        with pytest.raises(DatasetError) as raised:
            await feed.next_batch()
        feed.close()
        return first, str(raised.value)

    first, error = asyncio.run(main())
    assert first is not None
    assert [j.rollout_id for j in first] == ["r0.s0"]
    assert error == "d.jsonl:2: not JSON"


def test_rows_of_a_fifo_are_read_through_the_stream_open_stream_gives(tmp_path: Path) -> None:
    fifo = tmp_path / "rows"
    os.mkfifo(fifo)

    def produce() -> None:
        with fifo.open("w") as out:
            out.write('{"prompt": "a"}\n{"prompt": "b"}\n')

    producer = threading.Thread(target=produce)
    producer.start()
    stream = open_stream(str(fifo))
    try:
        rows = list(iter_rows(str(fifo), source=stream))
    finally:
        stream.close()
        producer.join(10)
    assert [row.prompt for row in rows] == [
        [{"role": "user", "content": "a"}],
        [{"role": "user", "content": "b"}],
    ]


def test_a_fifo_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    with pytest.raises(DatasetError) as raised:
        open_stream(str(missing))
    assert str(raised.value) == f"cannot read dataset {missing}: No such file or directory"
