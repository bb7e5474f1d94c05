"""The fold's batches under faust (streams.runtime.kafka.seam item 8): an idle stream waits
for a record without a timer, a lone record is folded once nothing more comes for
`BATCH_QUIET_S` (not after the whole batch window), records that keep coming are gathered
until the batch is full or the window ends, and a backlog (records that came while the last
batch was folded) fills the whole window, as faust's own batching does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from streams.runtime.kafka import seam

WINDOW_S = 1.0


class _Stream:
    """What `_no_idle_timer` uses of a faust Stream: its processors (run in order on each
    record, as faust runs them) and `wait_for_stopped` (mode's: True once the stream stops;
    here it never does)."""

    def __init__(self) -> None:
        self.processors: list[Callable[[Any], Awaitable[Any]]] = []

    def add_processor(self, processor: Callable[[Any], Awaitable[Any]]) -> None:
        self.processors.append(processor)

    async def wait_for_stopped(self, *events: asyncio.Event, timeout: float | None = None) -> bool:
        (event,) = events
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
        return False

    async def deliver(self, value: Any) -> None:
        for processor in self.processors:
            value = await processor(value)


def _batch_wait(records: Callable[[_Stream, asyncio.Event], Awaitable[None]],
                backlog: bool = False) -> float:
    """Seconds take_events' wait for a batch (window WINDOW_S) lasts while `records` delivers
    (`backlog`: a record came before the wait, while the last batch was folded)."""
    async def run() -> float:
        stream = _Stream()
        seam._no_idle_timer(stream)
        if backlog:
            await stream.deliver(b"record")
        full = asyncio.Event()  # take_events' buffer_full
        loop = asyncio.get_running_loop()
        feeding = asyncio.create_task(records(stream, full))
        await asyncio.sleep(0.05)  # the stream is idle first: the wait must not time out
        start = loop.time()
        waiting = asyncio.create_task(stream.wait_for_stopped(full, timeout=WINDOW_S))
        await waiting
        took = loop.time() - start
        feeding.cancel()
        return took

    return asyncio.run(run())


def test_a_lone_record_is_folded_without_waiting_out_the_batch_window() -> None:
    async def one(stream: _Stream, full: asyncio.Event) -> None:
        await asyncio.sleep(0.2)
        await stream.deliver(b"record")

    took = _batch_wait(one)
    assert 0.1 < took < 0.2 + WINDOW_S / 4, took  # its arrival, then a quiet gap, not 1 s


def test_records_that_keep_coming_are_gathered_until_the_window_ends() -> None:
    async def steady(stream: _Stream, full: asyncio.Event) -> None:
        while True:
            await stream.deliver(b"record")
            await asyncio.sleep(seam.BATCH_QUIET_S / 3)

    took = _batch_wait(steady)
    assert WINDOW_S * 0.9 < took < WINDOW_S * 1.5, took


def test_a_full_batch_is_taken_at_once() -> None:
    async def burst(stream: _Stream, full: asyncio.Event) -> None:
        await asyncio.sleep(0.1)
        for n in range(10):
            await stream.deliver(b"record")
            if n == 4:
                full.set()  # take_events' processor flags a full buffer after the record
            await asyncio.sleep(0.001)

    took = _batch_wait(burst)
    assert took < 0.1 + WINDOW_S / 4, took


def test_a_backlog_fills_the_whole_window() -> None:
    async def nothing_more(stream: _Stream, full: asyncio.Event) -> None:
        await asyncio.sleep(3600)

    took = _batch_wait(nothing_more, backlog=True)
    assert WINDOW_S * 0.9 < took < WINDOW_S * 1.5, took
