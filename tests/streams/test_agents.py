"""Unit: the fold agent's batch hold — offsets of a batch are released only after its writes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from faust.types.tuples import Message

from streams.agents import fold_held


class _Event:
    """What take_events yields: an event whose message faust refcounts (one per stream)."""

    def __init__(self, offset: int) -> None:
        self.message = Message("p.events", 0, offset, 0.0, 0, None, b"s", b"{}", None)
        self.message.incref()  # faust's own reference for the agent's stream

    def ack(self) -> bool:
        return self.message.ack(consumer=None)  # type: ignore[arg-type]


class _Stream:
    async def ack(self, event: _Event) -> bool:
        return event.ack()


def _take_events_finally(batch: list[_Event]) -> None:
    """take_events acks every event of a batch when the generator resumes or is closed."""
    for event in batch:
        event.ack()


def test_a_finished_batch_is_released_by_take_events_ack() -> None:
    batch = [_Event(n) for n in range(3)]

    async def work() -> None:
        # during the writes, take_events' ack alone could not commit anything
        assert all(e.message.refcount == 2 for e in batch)

    asyncio.run(fold_held(_Stream(), batch, work()))
    assert not any(e.message.acked for e in batch)
    _take_events_finally(batch)
    assert all(e.message.acked for e in batch)


def test_an_interrupted_batch_stays_unacked_and_is_redelivered() -> None:
    batch = [_Event(n) for n in range(3)]

    async def interrupted() -> None:
        await asyncio.sleep(10)

    async def run() -> None:
        task = asyncio.create_task(fold_held(_Stream(), batch, interrupted()))
        await asyncio.sleep(0.01)
        task.cancel()  # a stop or rebalance cancels the agent mid-batch
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    _take_events_finally(batch)  # the generator is closed: faust acks what it handed out
    assert not any(e.message.acked for e in batch)  # nothing committable: redelivered


def test_a_failing_batch_exits_the_process_instead_of_committing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[Any] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)  # os._exit never returns

    monkeypatch.setattr("streams.agents.os._exit", fake_exit)
    batch = [_Event(0)]

    async def failing() -> None:
        raise OSError("broker gone")

    with pytest.raises(SystemExit):
        asyncio.run(fold_held(_Stream(), batch, failing()))
    assert exits == [70]
    _take_events_finally(batch)
    assert not batch[0].message.acked
