"""Transport: the thin faust agents; all per-record decisions live in streams.kafka.foldstep."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import faust
from aiokafka import AIOKafkaProducer
from faust.types.tuples import ack_lock

from streams.codec import (
    DeadLetter,
    dead_letter_key,
    document_key,
    encode_dead_letter,
    encode_document,
)
from streams.kafka.foldstep import (
    FoldProcessor,
    Overlay,
    StateView,
    encode_position,
    position_key,
    read_position,
)
from streams.kafka.producer import batching_producer
from streams.kafka.table import PartitionedTable
from streams.settings import Settings
from streams.topics import FOLD_TABLE, Topics, bootstrap_servers

log = logging.getLogger("recall.fold")

#: Writes a partition's drained table records (in order); returns the send futures.
TableWrite = Callable[[int, Iterable[tuple[str, bytes | None]]], Awaitable[list[Awaitable[Any]]]]
#: Records per batch. A batch costs one table write per touched key and one wait for the
#: document acks, so bigger batches amortise more when sessions are bursty.
BATCH_MAX = 500
#: How long a partial batch may wait: the latency floor of an event on a quiet topic.
BATCH_WITHIN_S = 0.05
#: Output producer linger: documents of one batch are sent together anyway.
OUTPUT_LINGER_MS = 2


class _TableView:
    """Reads the table's store directly: faust's __getitem__ sensors cost more than the fold."""

    def __init__(self, table: PartitionedTable) -> None:
        self._data = table.data

    def get(self, key: str, default: None = None) -> bytes | None:
        value: bytes | None = self._data.get(key)
        return value


@dataclass(slots=True)
class Delivery:
    """What `fold_messages` made of a batch. `unread`: records ahead of their partition's
    position (some record before them was not delivered): not folded, and not to be counted as
    processed; `resume`: partition -> the offset to read again from."""

    unread: list[Any] = field(default_factory=list)
    resume: dict[int, int] = field(default_factory=dict)


class FoldPositions:
    """The fold's read position per events partition, so the fold is a function of the log
    whatever order faust delivers records in.

    The position is the table record `position_key(k)`, written after each batch's other writes
    and recovered with them, so it always describes the state beside it. A record at the
    position is folded and moves it; a record before it was folded already (a redelivery);
    a record past it means faust skipped records (measured: records fetched before a
    rebalance's seek, delivered after it, while the re-fetched ones were dropped; faust then
    committed past the hole, and its gap check is off by one). Those are not folded, their
    offsets are not offered for commit, and the partition is sought back to the position.
    Partition positions are also where faust's post-rebalance seek goes, instead of the
    group's committed offsets (see streams.kafka.membership.patch_consumers)."""

    #: Between two seek-backs of one partition: buffered records that were fetched before the
    #: first one land past the position too and must not trigger a seek each.
    RESEEK_S = 1.0

    def __init__(self, table: PartitionedTable, topic: str) -> None:
        self.table, self.topic = table, topic
        #: The table holds every assigned partition's state (faust's recovery after the last
        #: rebalance is complete). Until then nothing is read: a write made meanwhile would be
        #: overwritten in memory by the recovery yet stay last in the changelog, measured: a
        #: seek ran mid-recovery, before the moved partitions' positions were back.
        self.ready = False
        #: Where the last seek of this assignment put partitions without a recorded position.
        self.starts: dict[int, int] = {}
        self._sought: dict[int, float] = {}

    @property
    def view(self) -> StateView:
        return _TableView(self.table)  # faust creates the table's store lazily

    def recorded(self, partition: int) -> int | None:
        return read_position(self.view, partition)

    def forget(self) -> None:
        """A rebalance began: nothing is read until the table is recovered; seek starts
        belong to the old assignment."""
        self.ready = False
        self.starts.clear()

    async def recovered(self) -> None:
        self.ready = True

    async def seek(self, consumer: Any) -> None:
        """After faust's seek to the committed offsets: every assigned events partition to its
        recorded position, or to its earliest offset if it has none."""
        if not self.ready:
            return  # faust seeks again once its recovery completes
        tps = [tp for tp in consumer.assignment() if tp.topic == self.topic]
        recorded = {tp: self.recorded(tp.partition) for tp in tps}
        targets = {tp: offset for tp, offset in recorded.items() if offset is not None}
        fresh = [tp for tp, offset in recorded.items() if offset is None]
        if fresh:
            targets.update(await consumer.earliest_offsets(*fresh))
        if not targets:
            return
        await consumer.seek_wait(targets)
        self.starts.update({tp.partition: offset for tp, offset in targets.items()})
        # faust's gap check counts from here: it ignores acks below, never commits a hole above
        consumer._committed_offset.update({tp: offset or None for tp, offset in targets.items()})

    async def seek_back(self, consumer: Any, resume: dict[int, int]) -> None:
        now = time.monotonic()
        targets = {}
        for partition, offset in resume.items():
            if now - self._sought.get(partition, -self.RESEEK_S) >= self.RESEEK_S:
                self._sought[partition] = now
                targets[partition] = offset
        assigned = {tp.partition: tp for tp in consumer.assignment() if tp.topic == self.topic}
        seeks = {assigned[p]: offset for p, offset in targets.items() if p in assigned}
        if seeks:
            log.info("fold: records past the read position; seeking back %s", seeks)
            try:
                await consumer.seek_wait(seeks)
            except Exception:  # revoked meanwhile: the next owner seeks from the table anyway
                log.info("fold: seek back failed", exc_info=True)


async def fold_batch(producer: AIOKafkaProducer, topics: Topics, table: PartitionedTable,
                     processor: FoldProcessor, positions: FoldPositions,
                     events: Sequence[Any]) -> Delivery:
    """Fold a batch of faust events against the fold table (see `fold_messages`)."""
    if not positions.ready:
        processor.stats["unread"] += len(events)
        return Delivery(unread=[event.message for event in events])
    delivery = await fold_messages(producer, topics, positions.view, table.write, processor,
                                   [event.message for event in events], starts=positions.starts)
    if delivery.resume:
        await positions.seek_back(table.app.consumer, delivery.resume)
    return delivery


async def fold_messages(producer: AIOKafkaProducer, topics: Topics, view: StateView,
                        write: TableWrite, processor: FoldProcessor,
                        messages: Sequence[Any],
                        starts: Mapping[int, int] | None = None) -> Delivery:
    """Fold a batch of events-topic records (anything with topic, partition, offset, key and
    value), each partition strictly in offset order from its recorded position (or `starts`
    where none is recorded yet; with neither, nothing of that partition is read). Order of
    effects (at-least-once, no transactions):
    1. fold every record against the table plus the batch's pending writes;
    2. produce documents and dead letters to the source record's partition, await their acks;
    3. only then write the table (changelog): sessions, their meta records, then positions.
    A crash before 3 replays the batch (its documents are re-sent; the indexer upserts); a crash
    after 3 makes the redelivered records land before the position, skipped.
    The live agent and the reindex job (streams.kafka.rebuild) both fold through here."""
    overlays: dict[int, Overlay] = {}
    reading: dict[int, int | None] = {}
    began: dict[int, int | None] = {}
    delivery = Delivery()
    pending: list[Any] = []
    for msg in messages:
        partition = msg.partition
        overlay = overlays.get(partition)
        if overlay is None:
            overlay = overlays[partition] = Overlay(view)
            recorded = read_position(view, partition)
            reading[partition] = began[partition] = (
                recorded if recorded is not None else (starts or {}).get(partition))
        at = reading[partition]
        if at is None or msg.offset > at:
            delivery.unread.append(msg)
            if at is not None:
                delivery.resume.setdefault(partition, at)
            processor.stats["unread"] += 1
            continue
        if msg.offset < at:
            processor.stats["reread"] += 1
            continue
        reading[partition] = at + 1
        for line in processor.fold_record(overlay, msg.key, msg.value):
            out = line.outcome
            if out.rejection is not None:
                letter = DeadLetter.of(topic=msg.topic, partition=partition, offset=msg.offset,
                                       line=line.index, key=msg.key, value=line.raw,
                                       code=out.rejection.code, reason=out.rejection.message)
                pending.append(await producer.send(topics.dead_letter,
                                                   encode_dead_letter(letter),
                                                   key=dead_letter_key(letter),
                                                   partition=partition))
                continue
            for record in out.documents:
                pending.append(await producer.send(topics.documents, encode_document(record),
                                                   key=document_key(record),
                                                   partition=partition))
    if pending:
        await asyncio.gather(*pending)
    for partition, overlay in overlays.items():
        records = list(overlay.drain())
        moved = reading[partition]
        if moved is not None and moved != began[partition]:
            records.append((position_key(partition), encode_position(moved)))
        if records:
            await write(partition, records)
    return delivery


def release_unread(consumer: Any, message: Any) -> None:
    """Let go of a record without offering its offset for commit (it is read again)."""
    with ack_lock:
        message.acked = True  # every later ack of it is a no-op
    consumer._unacked_messages.discard(message)


async def fold_held(stream: Any, batch: Sequence[Any], work: Awaitable[Delivery]) -> None:
    """Run `work` on `batch` with the batch's offsets held back until it is done.

    take_events acks a batch when the generator resumes *or is closed*, so a batch interrupted
    by a stop (SIGTERM, a rebalance that cancels the agent) was acked, and its offsets committed,
    without its table writes: the next owner then folded the following events onto a state
    that missed the batch (INGEST_SEQ_GAP, measured in the add/remove-worker test). One extra
    reference per message means take_events' own ack cannot release it; ours does, after the
    writes. An interrupted batch stays uncommitted and is redelivered; records the fold left
    unread are released without being offered for commit."""
    for event in batch:
        event.message.incref()
    try:
        delivery = await work
    except asyncio.CancelledError:
        raise  # the hold stays: uncommitted, redelivered to the next owner
    except Exception:
        # Releasing would commit offsets whose effects failed; holding would stall every
        # rebalance (faust waits for in-flight messages). Exit and restart from the commits.
        log.critical("fold batch failed; exiting so the batch is redelivered", exc_info=True)
        os._exit(70)
    unread = {id(msg) for msg in delivery.unread}
    for event in batch:
        if id(event.message) in unread:
            release_unread(stream.app.consumer, event.message)
        else:
            await stream.ack(event)


def register_fold_agent(app: faust.App, settings: Settings, topics: Topics) -> FoldProcessor:
    """Register the fold table and agent on `app`; return the processor (its `stats` count)."""
    table = PartitionedTable(
        app, name=FOLD_TABLE, beacon=app.tables.beacon, partitions=settings.shards,
        key_type=str, value_type=bytes,
        # One record per producer batch means the tansu work-around is on (see streams.app).
        paced=app.conf.producer_max_batch_size == 1,
        help="per-session fold state: header, paged surface, recent digests")
    app.tables.add(table)
    source = app.topic(topics.events, key_type=bytes, value_type=bytes,
                       partitions=settings.shards)
    processor = FoldProcessor(max_event_bytes=settings.max_event_bytes)
    positions = FoldPositions(table, topics.events)
    app.fold_positions = positions  # type: ignore[attr-defined]  # read by the seek patch

    async def forget_starts(sender: Any, revoked: Any, **kwargs: Any) -> None:
        positions.forget()

    app.on_partitions_revoked.connect(forget_starts)  # type: ignore[arg-type]
    table.on_recover(positions.recovered)

    @app.agent(source, name="fold")
    async def fold(stream: faust.StreamT[bytes]) -> None:
        # Outputs get their own producer: faust's may be limited to one record per batch (the
        # tansu work-around, needed only by the changelog), which made awaiting a batch's
        # document acks cost one round trip per record.
        assert settings.broker is not None
        producer = batching_producer(bootstrap_servers(settings.broker),
                                     linger_ms=OUTPUT_LINGER_MS)
        await producer.start()
        try:
            # StreamT does not declare take_events; every concrete faust Stream has it.
            batches = stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S)  # type: ignore[attr-defined]
            async for batch in batches:
                await fold_held(stream, batch, fold_batch(producer, topics, table, processor,
                                                          positions, batch))
        finally:
            await producer.stop()

    return processor
