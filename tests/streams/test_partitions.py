"""Unit: streams.runtime.kafka.partitions.ReadPositions — every consumer loop reads each partition in
offset order from the position its own state recorded."""

from __future__ import annotations

from dataclasses import dataclass

from streams.runtime.kafka.partitions import ReadPositions


@dataclass(frozen=True)
class R:
    partition: int
    offset: int


def offsets(records: list[R]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


def test_records_pass_in_order_from_the_placed_position() -> None:
    positions = ReadPositions()
    positions.place(0, 5)
    admitted = positions.admit([R(0, 5), R(0, 6), R(0, 7)])
    assert offsets(admitted.records) == [(0, 5), (0, 6), (0, 7)]
    assert admitted.upto == {0: 8} and not admitted.unread and not admitted.resume
    assert positions.at == {0: 5}  # nothing moves until the effects are durable
    positions.advance(admitted.upto)
    assert positions.at == {0: 8}


def test_redelivered_records_are_skipped() -> None:
    positions = ReadPositions()
    positions.place(0, 5)
    admitted = positions.admit([R(0, 3), R(0, 4), R(0, 5)])
    assert offsets(admitted.records) == [(0, 5)] and admitted.reread == 2


def test_records_past_a_hole_are_left_unread_and_the_partition_sought_back() -> None:
    positions = ReadPositions()
    positions.place(0, 5)
    admitted = positions.admit([R(0, 7), R(0, 8)])
    assert admitted.records == [] and offsets(admitted.unread) == [(0, 7), (0, 8)]
    assert admitted.resume == {0: 5}
    # after the seek back the same records come again, in order
    again = positions.admit([R(0, 5), R(0, 6), R(0, 7)])
    assert offsets(again.records) == [(0, 5), (0, 6), (0, 7)] and not again.resume


def test_a_partition_not_placed_yet_is_not_read_at_all() -> None:
    positions = ReadPositions()
    positions.place(1, 0)
    admitted = positions.admit([R(0, 0), R(1, 0)])
    assert offsets(admitted.records) == [(1, 0)] and offsets(admitted.unread) == [(0, 0)]
    assert admitted.resume == {}  # its placement seeks it anyway


def test_forgotten_partitions_are_not_read_until_placed_again() -> None:
    positions = ReadPositions()
    positions.place(0, 0)
    positions.place(1, 0)
    positions.forget([0])
    assert offsets(positions.admit([R(0, 0), R(1, 0)]).records) == [(1, 0)]
    positions.forget()
    assert positions.admit([R(1, 0)]).records == []
    positions.advance({1: 1})  # a batch finished after its partition was revoked
    assert positions.at == {}


def test_seek_backs_of_one_partition_are_spaced_when_asked() -> None:
    positions = ReadPositions(reseek_s=60.0)
    positions.place(0, 0)
    assert positions.admit([R(0, 2)]).resume == {0: 0}
    # a record fetched before that seek, delivered after it: unread, but no second seek
    late = positions.admit([R(0, 3)])
    assert offsets(late.unread) == [(0, 3)] and late.resume == {}


def test_a_hole_that_persists_after_a_seek_back_is_read_across_on_a_compacted_topic() -> None:
    compacted = ReadPositions(compacted=True)
    compacted.place(0, 5)
    assert compacted.admit([R(0, 7)]).resume == {0: 5}
    admitted = compacted.admit([R(0, 7), R(0, 8)])  # offsets 5 and 6 are gone from the log
    assert offsets(admitted.records) == [(0, 7), (0, 8)] and admitted.upto == {0: 9}
    plain = ReadPositions()
    plain.place(0, 5)
    plain.admit([R(0, 7)])
    assert plain.admit([R(0, 7)]).records == []  # the events topic has no holes of its own


def test_partitions_keep_separate_positions() -> None:
    positions = ReadPositions()
    positions.place(1, 0)
    positions.place(2, 4)
    admitted = positions.admit([R(1, 0), R(2, 5), R(1, 1)])
    assert offsets(admitted.records) == [(1, 0), (1, 1)] and admitted.upto == {1: 2}
    assert offsets(admitted.unread) == [(2, 5)] and admitted.resume == {2: 4}


@dataclass(frozen=True)
class Seg:
    partition: int
    offset: int
    value: bytes


def test_a_batch_of_segments_is_processed_in_runs_of_about_max_lines() -> None:
    positions = ReadPositions()
    positions.place(0, 0)
    positions.place(1, 0)
    records = [Seg(0, 0, b"a\nb\nc"), Seg(1, 0, b"d"), Seg(0, 1, b"e\nf"), Seg(1, 1, b"g\nh\ni")]
    admitted = positions.admit(records)
    runs = list(admitted.chunks(max_lines=4))
    assert [[(r.partition, r.offset) for r in run] for run, _ in runs] == [
        [(0, 0), (1, 0)], [(0, 1), (1, 1)]]
    assert [upto for _, upto in runs] == [{0: 1, 1: 1}, {0: 2, 1: 2}]
    assert list(admitted.chunks(max_lines=100)) == [(records, {0: 2, 1: 2})]


class _Consumer:
    """What PartitionLoop asks of an aiokafka consumer: seeks, beginning offsets, commits (the
    first `fail` of them refused as after a rebalance)."""

    def __init__(self, fail: int = 0) -> None:
        self.commits: list[dict[int, int]] = []
        self.fail = fail

    def seek(self, tp: object, offset: int) -> None:
        pass

    async def beginning_offsets(self, tps: list[object]) -> dict[object, int]:
        return dict.fromkeys(tps, 0)

    async def commit(self, offsets: dict[object, object]) -> None:
        from aiokafka.errors import CommitFailedError

        if self.fail:
            self.fail -= 1
            raise CommitFailedError("rebalanced")
        self.commits.append({tp.partition: meta.offset  # type: ignore[attr-defined]
                             for tp, meta in offsets.items()})


class _Recorded:
    """A processor whose durable state recorded `at` (partition -> next offset)."""

    topic = "docs"

    def __init__(self, at: dict[int, int]) -> None:
        self.at = at

    def recorded(self, partition: int) -> int | None:
        return self.at.get(partition)

    async def process(self, records: object, upto: dict[int, int]) -> None:
        self.at.update(upto)


def test_positions_placed_by_a_rebalance_are_committed_even_when_nothing_more_arrives() -> None:
    # the records up to these positions were processed before the rebalance, and their
    # commits were lost to it: the group's lag must still reach them, or a job waiting for
    # the group to reach the log's end waits for ever
    import asyncio

    from aiokafka import TopicPartition

    from streams.runtime.kafka.partitions import PartitionLoop

    async def scenario() -> list[dict[int, int]]:
        consumer = _Consumer(fail=1)
        loop = PartitionLoop(consumer, _Recorded({0: 109, 1: 57}))  # type: ignore[arg-type]
        listener = loop.listener()
        await listener.on_partitions_assigned([TopicPartition("docs", 0),
                                               TopicPartition("docs", 1)])
        await loop.step({})  # refused (the group rebalances again): kept for the next step
        assert consumer.commits == []
        await loop.step({})
        await loop.step({})  # committed once, not again
        return consumer.commits

    assert asyncio.run(scenario()) == [{0: 109, 1: 57}]


def test_a_revoked_partition_is_not_committed_by_its_former_reader() -> None:
    import asyncio

    from aiokafka import TopicPartition

    from streams.runtime.kafka.partitions import PartitionLoop

    async def scenario() -> list[dict[int, int]]:
        consumer = _Consumer()
        loop = PartitionLoop(consumer, _Recorded({0: 5, 1: 7}))  # type: ignore[arg-type]
        listener = loop.listener()
        await listener.on_partitions_assigned([TopicPartition("docs", 0),
                                               TopicPartition("docs", 1)])
        await listener.on_partitions_revoked([TopicPartition("docs", 1)])
        await loop.step({})
        return consumer.commits

    assert asyncio.run(scenario()) == [{0: 5}]
