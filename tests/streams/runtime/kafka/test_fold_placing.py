"""The fold's placing after a rebalance (streams.runtime.kafka.seam item 5, `FaustFold.place`):
a batch read while faust's consumer thread performs the seek to the recorded positions is
folded from those positions, its acks counted by faust's commit bookkeeping from there too,
and one read before the placing is left for the fetch after it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from aiokafka.structs import TopicPartition

from streams.runtime.kafka import seam

TOPIC = "t.events"


class _Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None = b"s"
    value: bytes | None = b"{}"


class _Signal:
    def connect(self, receiver: Any) -> None:
        pass


class _App:
    def __init__(self) -> None:
        self.on_partitions_revoked = _Signal()
        self.consumer: Any = None


class _Table:
    def on_recover(self, callback: Any) -> None:
        pass


class _Processor:
    """Positions 5 (partition 0) and none (partition 1) recorded; keeps what it folds."""

    topic = TOPIC

    def __init__(self) -> None:
        self.folded: list[tuple[int, int]] = []

    def recorded(self, partition: int) -> int | None:
        return {0: 5}.get(partition)

    async def process(self, records: Sequence[Any], upto: Mapping[int, int]) -> None:
        self.folded += [(r.partition, r.offset) for r in records]


class _Consumer:
    """faust's consumer as `place` uses it: `seek_wait` runs on its own thread, so the agent's
    batch (`during`) can be processed before it returns."""

    def __init__(self, fold: seam.FaustFold, during: list[_Record]) -> None:
        self.fold, self.during = fold, during
        self._committed_offset: dict[Any, Any] = {}
        self.sought: dict[int, int] = {}
        self.committed_during_seek: dict[int, Any] = {}
        self.left_unread: set[int] = set()

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)}

    async def earliest_offsets(self, *tps: TopicPartition) -> dict[TopicPartition, int]:
        return {tp: 0 for tp in tps}

    async def seek_wait(self, targets: Mapping[TopicPartition, int]) -> None:
        self.sought.update({tp.partition: offset for tp, offset in targets.items()})
        self.committed_during_seek = {tp.partition: o for tp, o in self._committed_offset.items()}
        self.left_unread = await self.fold._process(list(self.during))


def _fold() -> tuple[_Processor, seam.FaustFold]:
    processor = _Processor()
    return processor, seam.FaustFold(_App(), _Table(), processor)  # type: ignore[arg-type]


def _placed_with(during: list[_Record]) -> tuple[_Processor, _Consumer]:
    async def run() -> tuple[_Processor, _Consumer]:
        processor, fold = _fold()
        consumer = _Consumer(fold, during)
        await fold._recovered()
        await fold.place(consumer)
        return processor, consumer

    return asyncio.run(run())


def test_a_batch_read_during_the_seek_is_folded_from_the_recorded_positions() -> None:
    records = [_Record(TOPIC, 0, 5), _Record(TOPIC, 1, 0), _Record(TOPIC, 0, 6)]
    processor, consumer = _placed_with(records)
    assert consumer.sought == {0: 5, 1: 0}
    # faust's "no commit at all" for partition 1 (offset 0) is None
    assert consumer.committed_during_seek == {0: 5, 1: None}
    assert processor.folded == [(0, 5), (1, 0), (0, 6)]
    assert consumer.left_unread == set()


def test_records_below_the_recorded_position_are_not_folded_again() -> None:
    processor, consumer = _placed_with([_Record(TOPIC, 0, 3), _Record(TOPIC, 0, 5)])
    assert processor.folded == [(0, 5)]
    assert consumer.left_unread == set()


def test_a_batch_read_before_the_fold_is_recovered_is_left_for_the_fetch_after_placing() -> None:
    async def run() -> tuple[_Processor, set[int]]:
        processor, fold = _fold()
        return processor, await fold._process([_Record(TOPIC, 0, 5)])

    processor, unread = asyncio.run(run())
    assert processor.folded == [] and len(unread) == 1
