"""Unit: the fold agent's batch hold (offsets of a batch are released only after its writes) and
its read positions (each events partition is folded strictly in offset order)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from factories import header, user
from faust.types.tuples import Message

from projections.errors import INGEST_SEQ_GAP
from projections.records import EventRecord
from streams.agents import Delivery, FoldPositions, fold_batch, fold_held, fold_messages
from streams.codec import decode_document
from streams.kafka.foldstep import FoldProcessor, position_key, read_position
from streams.topics import Topics


class _Event:
    """What take_events yields: an event whose message faust refcounts (one per stream)."""

    def __init__(self, offset: int) -> None:
        self.message = Message("p.events", 0, offset, 0.0, 0, None, b"s", b"{}", None)
        self.message.incref()  # faust's own reference for the agent's stream

    def ack(self) -> bool:
        return self.message.ack(consumer=None)  # type: ignore[arg-type]


class _Consumer:
    """What the hold touches of faust's consumer: the offsets offered for commit."""

    def __init__(self) -> None:
        self.committable: list[int] = []
        self._unacked_messages: set[Message] = set()

    def ack(self, message: Message) -> bool:
        message.acked = True
        self.committable.append(message.offset)
        return True


class _App:
    def __init__(self) -> None:
        self.consumer = _Consumer()


class _Stream:
    def __init__(self) -> None:
        self.app = _App()

    async def ack(self, event: _Event) -> bool:
        return event.ack()


def _take_events_finally(batch: list[_Event]) -> None:
    """take_events acks every event of a batch when the generator resumes or is closed."""
    for event in batch:
        event.ack()


def test_a_finished_batch_is_released_by_take_events_ack() -> None:
    batch = [_Event(n) for n in range(3)]

    async def work() -> Delivery:
        # during the writes, take_events' ack alone could not commit anything
        assert all(e.message.refcount == 2 for e in batch)
        return Delivery()

    asyncio.run(fold_held(_Stream(), batch, work()))
    assert not any(e.message.acked for e in batch)
    _take_events_finally(batch)
    assert all(e.message.acked for e in batch)


def test_an_interrupted_batch_stays_unacked_and_is_redelivered() -> None:
    batch = [_Event(n) for n in range(3)]

    async def interrupted() -> Delivery:
        await asyncio.sleep(10)
        return Delivery()

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

    async def failing() -> Delivery:
        raise OSError("broker gone")

    with pytest.raises(SystemExit):
        asyncio.run(fold_held(_Stream(), batch, failing()))
    assert exits == [70]
    _take_events_finally(batch)
    assert not batch[0].message.acked


def test_records_left_unread_are_released_without_being_offered_for_commit() -> None:
    batch = [_Event(n) for n in range(4)]
    stream = _Stream()

    class _Consumed(_Event):
        def ack(self) -> bool:  # faust's path: the final ack hands the offset to the consumer
            if not self.message.acked and not self.message.decref():
                return stream.app.consumer.ack(self.message)
            return False

    batch = [_Consumed(n) for n in range(4)]

    async def work() -> Delivery:
        return Delivery(unread=[batch[2].message, batch[3].message], resume={0: 2})

    asyncio.run(fold_held(stream, batch, work()))
    _take_events_finally(batch)
    assert all(e.message.acked for e in batch)  # nothing left for a rebalance to wait on
    assert stream.app.consumer.committable == [0, 1]  # 2 and 3 are read again, not committed


# -- read positions -------------------------------------------------------------------------

TOPICS = Topics("t", 4)


class _Record:
    """An events-topic record as aiokafka and faust hand it over."""

    def __init__(self, offset: int, line: dict[str, Any], partition: int = 0) -> None:
        self.topic, self.partition, self.offset = TOPICS.events, partition, offset
        self.key, self.value = b"s1", orjson.dumps(line)


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    async def send(self, topic: str, value: bytes, *, key: bytes, partition: int) -> Any:
        self.sent.append((topic, value))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class _Fold:
    """fold_messages over a dict table, writes applied as the agent's table applies them."""

    def __init__(self) -> None:
        self.table: dict[str, bytes] = {}
        self.writes: list[list[str]] = []
        self.producer = _Producer()
        self.processor = FoldProcessor(max_event_bytes=4096)

    async def _write(self, partition: int, records: Any) -> list[Any]:
        records = list(records)
        self.writes.append([key for key, _ in records])
        for key, value in records:
            if value is None:
                self.table.pop(key, None)
            else:
                self.table[key] = value
        return []

    def run(self, records: list[_Record], starts: dict[int, int] | None = None) -> Delivery:
        return asyncio.run(fold_messages(self.producer, TOPICS, self.table,
                                         self._write, self.processor, records, starts=starts))

    def position(self, partition: int = 0) -> int | None:
        return read_position(self.table, partition)

    def folded_seqs(self) -> list[int]:
        records = [decode_document(value) for topic, value in self.producer.sent
                   if topic == TOPICS.documents]
        return [record.seq for record in records if isinstance(record, EventRecord)]

    def dead_letters(self) -> list[bytes]:
        return [value for topic, value in self.producer.sent if topic == TOPICS.dead_letter]


LOG = [header("s1")] + [user(seq, f"q{seq}") for seq in range(6)]


def test_a_partition_is_folded_from_its_start_and_its_position_written_last() -> None:
    fold = _Fold()
    delivery = fold.run([_Record(n, LOG[n]) for n in range(4)], starts={0: 0})
    assert delivery == Delivery()
    assert fold.folded_seqs() == [0, 1, 2]
    assert fold.position() == 4
    assert fold.writes[-1][-1] == position_key(0)  # after the state it describes


def test_records_past_the_position_are_left_unread_and_the_partition_sought_back() -> None:
    fold = _Fold()
    fold.run([_Record(n, LOG[n]) for n in range(3)], starts={0: 0})
    # offset 3 never arrives (faust dropped it); 4 and 5 would be INGEST_SEQ_GAP
    skipped = [_Record(4, LOG[4]), _Record(5, LOG[5])]
    delivery = fold.run(skipped)
    assert delivery.unread == skipped and delivery.resume == {0: 3}
    assert fold.position() == 3 and fold.folded_seqs() == [0, 1]
    assert not fold.dead_letters()  # nothing parked: the log has no gap
    # after the seek back, the same records come again, in order
    assert fold.run([_Record(n, LOG[n]) for n in range(3, 7)]) == Delivery()
    assert fold.folded_seqs() == [0, 1, 2, 3, 4, 5] and fold.position() == 7


def test_redelivered_records_before_the_position_are_skipped() -> None:
    fold = _Fold()
    fold.run([_Record(n, LOG[n]) for n in range(5)], starts={0: 0})
    assert fold.run([_Record(n, LOG[n]) for n in range(2, 7)]) == Delivery()
    assert fold.folded_seqs() == [0, 1, 2, 3, 4, 5]
    assert fold.processor.stats["reread"] == 3 and fold.processor.stats["duplicates"] == 0


def test_nothing_is_read_from_a_partition_without_a_position_or_a_start() -> None:
    fold = _Fold()
    records = [_Record(n, LOG[n]) for n in range(3)]
    delivery = fold.run(records)  # delivered before the post-rebalance seek named a start
    assert delivery.unread == records and delivery.resume == {}
    assert fold.table == {} and not fold.producer.sent


def test_a_genuine_gap_in_the_log_is_still_parked_and_moves_the_position() -> None:
    fold = _Fold()
    log = [LOG[0], LOG[1], LOG[3]]  # the log itself lacks seq 1
    fold.run([_Record(n, line) for n, line in enumerate(log)], starts={0: 0})
    [letter] = fold.dead_letters()
    assert orjson.loads(letter)["code"] == INGEST_SEQ_GAP
    assert fold.position() == 3  # parked records are read: the partition moves on


def test_partitions_keep_separate_positions() -> None:
    fold = _Fold()
    delivery = fold.run([_Record(0, LOG[0], partition=1), _Record(5, LOG[0], partition=2)],
                        starts={1: 0, 2: 4})
    assert [r.partition for r in delivery.unread] == [2] and delivery.resume == {2: 4}
    assert fold.position(1) == 1 and fold.position(2) is None


class _RecordEvent:
    def __init__(self, record: _Record) -> None:
        self.message = record


def test_nothing_is_folded_until_the_table_is_recovered_after_a_rebalance() -> None:
    fold = _Fold()

    class _Table:
        data = fold.table
        write = fold._write

    positions = FoldPositions(_Table(), TOPICS.events)  # type: ignore[arg-type]
    events = [_RecordEvent(_Record(n, LOG[n])) for n in range(3)]

    def run() -> Delivery:
        return asyncio.run(fold_batch(fold.producer, TOPICS, _Table(),  # type: ignore[arg-type]
                                      fold.processor, positions, events))

    assert run().unread == [e.message for e in events] and not fold.producer.sent
    asyncio.run(positions.recovered())
    positions.starts[0] = 0  # what the seek after the recovery does
    assert run() == Delivery() and fold.folded_seqs() == [0, 1]
    positions.forget()  # the next rebalance: the moved partitions' state is not back yet
    assert run().unread == [e.message for e in events] and positions.starts == {}
