"""Transport: the index consumer — `<p>.documents` partition k → shard k, offsets after commit."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from indexer import ShardSet, SourceConflict
from projections.errors import InputRejected
from projections.records import IndexRecord
from streams.codec import DeadLetter, dead_letter_key, decode_document, encode_dead_letter
from streams.settings import Settings
from streams.topics import Topics, bootstrap_servers

log = logging.getLogger("recall.indexing")

#: Records per shard transaction; ENGINE.md measured FTS5 at ~33k rows/s with 1000-row batches.
BATCH_MAX = 1000


def position_source(topic: str, partition: int) -> str:
    """The tracking source under which a shard stores how far it consumed a partition."""
    return f"{topic}:{partition}"


class _ResumeFromShards(ConsumerRebalanceListener):  # type: ignore[misc]
    """On assignment, seek each partition to the offset its shard recorded (not the group's
    committed offset, which may lag the shard after a crash between the two commits)."""

    def __init__(self, indexer: DocumentIndexer) -> None:
        self.indexer = indexer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        return None

    async def on_partitions_assigned(self, assigned: Any) -> None:
        for tp in assigned:
            position = self.indexer.shards.tracking_position(position_source(tp.topic,
                                                                             tp.partition))
            if position is not None:
                self.indexer.consumer.seek(tp, position)


class DocumentIndexer:
    """Consumes the documents topic into a ShardSet. For each fetched batch:
    1. decode documents (undecodable ones are parked in the dead letters);
    2. `write_batch` the records with positions `<topic>:<partition>` = next offset, in the
       shards' own SQLite transaction (a replay below that position changes nothing);
    3. only then commit the Kafka offsets."""

    def __init__(self, settings: Settings, shards: ShardSet, *, group_id: str | None = None,
                 fetch_max_wait_ms: int = 100) -> None:
        if not settings.broker:
            raise ValueError("the index consumer needs RECALL_BROKER")
        if len(shards.shards) != settings.shards:
            raise ValueError(f"the index has {len(shards.shards)} shards; RECALL_SHARDS is "
                             f"{settings.shards}: shard k must follow partition k")
        self.topics = Topics.of(settings)
        self.shards = shards
        self.stats: Counter[str] = Counter()
        bootstrap = bootstrap_servers(settings.broker)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group_id or f"{settings.topic_prefix}.index",
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=int(settings.session_timeout_s * 1000),
            heartbeat_interval_ms=int(settings.heartbeat_s * 1000),
            # tansu does not wake a long poll when data arrives; keep the wait short.
            fetch_max_wait_ms=fetch_max_wait_ms, max_poll_records=BATCH_MAX)
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap)

    async def run(self, stop: asyncio.Event) -> None:
        """Index until `stop` is set."""
        await self.producer.start()
        await self.consumer.start()
        try:
            self.consumer.subscribe([self.topics.documents], listener=_ResumeFromShards(self))
            while not stop.is_set():
                batches = await self.consumer.getmany(timeout_ms=200, max_records=BATCH_MAX)
                if batches:
                    await self.index(batches)
        finally:
            await self.consumer.stop()
            await self.producer.stop()

    async def index(self, batches: dict[TopicPartition, Sequence[Any]]) -> None:
        records: list[IndexRecord] = []
        positions: dict[str, int] = {}
        commits: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, messages in batches.items():
            for msg in messages:
                try:
                    records.append(decode_document(msg.value))
                except InputRejected as exc:
                    await self.park(msg, exc.code, exc.message)
            next_offset = messages[-1].offset + 1
            positions[position_source(tp.topic, tp.partition)] = next_offset
            commits[tp] = OffsetAndMetadata(next_offset, "")
        try:
            self.shards.write_batch(records, positions)
        except SourceConflict:
            # One record disagrees with the shard; find it by writing one at a time.
            await self._write_one_by_one(batches)
        self.stats["indexed"] += len(records)
        await self.consumer.commit(commits)

    async def _write_one_by_one(self, batches: dict[TopicPartition, Sequence[Any]]) -> None:
        for tp, messages in batches.items():
            for msg in messages:
                position = {position_source(tp.topic, tp.partition): msg.offset + 1}
                try:
                    record = decode_document(msg.value)
                    self.shards.write_batch([record], position)
                except InputRejected:
                    self.shards.write_batch([], position)  # already parked above
                except SourceConflict as exc:
                    await self.park(msg, exc.code, exc.message)
                    self.shards.write_batch([], position)

    async def park(self, msg: Any, code: str, reason: str) -> None:
        letter = DeadLetter.of(topic=msg.topic, partition=msg.partition, offset=msg.offset,
                               key=msg.key, value=msg.value, code=code, reason=reason)
        await self.producer.send_and_wait(self.topics.dead_letter, encode_dead_letter(letter),
                                          key=dead_letter_key(letter), partition=msg.partition)
        self.stats[f"parked:{code}"] += 1
