"""Transport: the thin faust agents; all per-record decisions live in streams.kafka.foldstep."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import faust
from aiokafka import AIOKafkaProducer

from projections.errors import INGEST_SEQ_GAP
from streams.codec import (
    DeadLetter,
    dead_letter_key,
    document_key,
    encode_dead_letter,
    encode_document,
)
from streams.kafka.foldstep import FoldProcessor, Overlay, StateView
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


async def fold_batch(producer: AIOKafkaProducer, topics: Topics, table: PartitionedTable,
                     processor: FoldProcessor, events: Sequence[Any]) -> None:
    """Fold a batch of faust events against the fold table (see `fold_messages`)."""

    def stale(msg: Any) -> bool:
        # Fetched before the latest rebalance: faust has sought its partition back to the
        # committed offset, so the record comes again, in order.
        fetched_in = getattr(msg, "generation_id", None)
        return fetched_in is not None and fetched_in != table.app.consumer_generation_id

    await fold_messages(producer, topics, _TableView(table), table.write, processor,
                        [event.message for event in events], stale=stale)


async def fold_messages(producer: AIOKafkaProducer, topics: Topics, view: StateView,
                        write: TableWrite, processor: FoldProcessor,
                        messages: Sequence[Any],
                        stale: Callable[[Any], bool] | None = None) -> None:
    """Fold a batch of events-topic records (anything with topic, partition, offset, key and
    value). Order of effects (at-least-once, no transactions):
    1. fold every record against the table plus the batch's pending writes;
    2. produce documents and dead letters to the source record's partition, await their acks;
    3. only then write the table (changelog), meta records last.
    A crash before 3 replays the batch (its documents are re-sent; the indexer upserts); a crash
    after 3 makes the redelivered records exact duplicates, whose documents are already acked.
    The live agent and the reindex job (streams.kafka.rebuild) both fold through here."""
    overlays: dict[int, Overlay] = {}
    pending: list[Any] = []
    for msg in messages:
        overlay = overlays.get(msg.partition)
        if overlay is None:
            overlay = overlays[msg.partition] = Overlay(view)
        out = processor.fold_record(overlay, msg.key, msg.value)
        if out.rejection is not None:
            if out.rejection.code == INGEST_SEQ_GAP and stale is not None and stale(msg):
                # Ahead of its predecessors only because a rebalance re-fetches them: not a gap
                # in the log, and it is redelivered after them.
                processor.stats["stale_ahead"] += 1
                continue
            letter = DeadLetter.of(topic=msg.topic, partition=msg.partition, offset=msg.offset,
                                   key=msg.key, value=msg.value, code=out.rejection.code,
                                   reason=out.rejection.message)
            pending.append(await producer.send(topics.dead_letter, encode_dead_letter(letter),
                                               key=dead_letter_key(letter),
                                               partition=msg.partition))
            continue
        overlay.put(out.writes)
        for record in out.documents:
            pending.append(await producer.send(topics.documents, encode_document(record),
                                               key=document_key(record),
                                               partition=msg.partition))
    if pending:
        await asyncio.gather(*pending)
    for partition, overlay in overlays.items():
        await write(partition, overlay.drain())


async def fold_held(stream: Any, batch: Sequence[Any], work: Awaitable[None]) -> None:
    """Run `work` on `batch` with the batch's offsets held back until it is done.

    take_events acks a batch when the generator resumes *or is closed*, so a batch interrupted
    by a stop (SIGTERM, a rebalance that cancels the agent) was acked, and its offsets committed,
    without its table writes: the next owner then folded the following events onto a state
    that missed the batch (INGEST_SEQ_GAP, measured in the add/remove-worker test). One extra
    reference per message means take_events' own ack cannot release it; ours does, after the
    writes. An interrupted batch stays uncommitted and is redelivered."""
    for event in batch:
        event.message.incref()
    try:
        await work
    except asyncio.CancelledError:
        raise  # the hold stays: uncommitted, redelivered to the next owner
    except Exception:
        # Releasing would commit offsets whose effects failed; holding would stall every
        # rebalance (faust waits for in-flight messages). Exit and restart from the commits.
        log.critical("fold batch failed; exiting so the batch is redelivered", exc_info=True)
        os._exit(70)
    for event in batch:
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

    @app.agent(source, name="fold")
    async def fold(stream: faust.StreamT[bytes]) -> None:
        # Outputs get their own producer: faust's may be limited to one record per batch (the
        # tansu work-around, needed only by the changelog), which made awaiting a batch's
        # document acks cost one round trip per record.
        assert settings.broker is not None
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers(settings.broker),
                                    linger_ms=OUTPUT_LINGER_MS)
        await producer.start()
        try:
            # StreamT does not declare take_events; every concrete faust Stream has it.
            batches = stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S)  # type: ignore[attr-defined]
            async for batch in batches:
                await fold_held(stream, batch, fold_batch(producer, topics, table, processor,
                                                          batch))
        finally:
            await producer.stop()

    return processor
