"""Transport: the fold as a partition processor — events records → documents, dead letters and
fold-table writes. The live fold (faust) and the reindex job's fold both run `Fold`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer

from streams.runtime.kafka.codec import (
    DeadLetter,
    dead_letter_key,
    encode_dead_letter,
    pack_documents,
)
from streams.runtime.kafka.foldstep import (
    FoldProcessor,
    Overlay,
    StateView,
    encode_position,
    position_key,
    read_position,
)
from streams.runtime.kafka.topics import Topics

#: Bound of one documents record (a session's documents of one batch, JSON lines); a fold
#: batch of segments produces a few records instead of one per event (on noida-db the broker's
#: per-record cost is the pipeline's largest).
DOCUMENTS_MAX_BYTES = 512 * 1024
#: Writes a partition's drained table records (in order); returns the send futures.
TableWrite = Callable[[int, Iterable[tuple[str, bytes | None]]], Awaitable[list[Awaitable[Any]]]]


class Fold:
    """Folds a batch of events records against the fold table. Order of effects
    (at-least-once, no transactions):
    1. fold every line of every record against the table plus the batch's pending writes;
    2. produce documents and dead letters to the source record's partition, await their acks
       (documents: per session of the batch, a few records of JSON lines, in seq order);
    3. only then write the table (changelog): per partition its sessions' records (each key
       once, meta records last), then the partition's read position `upto`.
    A crash before 3 replays the batch (its documents are re-sent; the indexer upserts); a crash
    after 3 makes the redelivered records land before the position, skipped. The table writes'
    acks are the caller's to await before it commits offsets (faust flushes its producer before
    every commit; the reindex job flushes once per fetch)."""

    def __init__(self, topics: Topics, view: StateView, write: TableWrite,
                 processor: FoldProcessor, producer: AIOKafkaProducer | None = None) -> None:
        self.topics = topics
        self.view = view
        self.write = write
        self.processor = processor
        self.producer = producer
        #: Lines folded so far (a record carries one or more).
        self.lines = 0

    @property
    def topic(self) -> str:
        return self.topics.events

    def recorded(self, partition: int) -> int | None:
        return read_position(self.view, partition)

    async def process(self, records: Sequence[Any], upto: Mapping[int, int]) -> None:
        producer = self.producer
        assert producer is not None, "the fold's output producer is not started"
        topics = self.topics
        overlays: dict[int, Overlay] = {}
        documents: dict[tuple[int, str], list[Any]] = {}
        pending: list[Any] = []
        for msg in records:
            partition = msg.partition
            overlay = overlays.get(partition)
            if overlay is None:
                overlay = overlays[partition] = Overlay(self.view)
            lines = self.processor.fold_record(overlay, msg.key, msg.value)
            self.lines += len(lines)
            for line in lines:
                out = line.outcome
                if out.rejection is not None:
                    letter = DeadLetter.of(topic=msg.topic, partition=partition,
                                           offset=msg.offset, line=line.number, key=msg.key,
                                           value=line.raw, code=out.rejection.code,
                                           reason=out.rejection.message)
                    pending.append(await producer.send(topics.dead_letter,
                                                       encode_dead_letter(letter),
                                                       key=dead_letter_key(letter),
                                                       partition=partition))
                    continue
                for record in out.documents:
                    documents.setdefault((partition, record.session_id), []).append(record)
        for (partition, _), records_of_session in documents.items():
            for key, value in pack_documents(records_of_session, DOCUMENTS_MAX_BYTES):
                pending.append(await producer.send(topics.documents, value, key=key,
                                                   partition=partition))
        if pending:
            await asyncio.gather(*pending)
        for partition, offset in upto.items():
            overlay = overlays.get(partition)
            writes = list(overlay.drain()) if overlay is not None else []
            writes.append((position_key(partition), encode_position(offset)))
            await self.write(partition, writes)
