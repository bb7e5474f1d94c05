"""Transport: the index consumer — `<p>.documents` partition k → shard k, offsets after commit."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from indexer import QueryService, ShardSet, SourceConflict
from projections.errors import InputRejected, RecallError
from projections.records import IndexRecord
from streams.codec import (
    DeadLetter,
    dead_letter_key,
    decode_document,
    decode_request,
    encode_dead_letter,
    encode_reply,
    error_reply,
    ok_reply,
)
from streams.embedded import index_config
from streams.kafka.fleet import ensure_fleet_topics, fleet_cursor_key
from streams.kafka.membership import instance_id
from streams.kafka.query import answer_shard_request
from streams.kafka.rpc import parse_reply_to
from streams.settings import Settings
from streams.topics import Topics, bootstrap_servers, ensure_topics

log = logging.getLogger("recall.indexing")

#: Records per shard transaction; ENGINE.md measured FTS5 at ~33k rows/s with 1000-row batches.
BATCH_MAX = 1000


def position_source(topic: str, partition: int) -> str:
    """The tracking source under which a shard stores how far it consumed a partition."""
    return f"{topic}:{partition}"


class _ResumeFromShards(ConsumerRebalanceListener):  # type: ignore[misc]
    """On assignment, seek each partition to the offset its shard recorded (not the group's
    committed offset, which may lag the shard after a crash between the two commits, and is
    another worker's after a partition moved here).

    aiokafka starts fetching a new assignment from the committed offsets *before* it calls this
    listener, so the index loop could index records fetched from there before the seek:
    measured on tansu, a partition that moved back to a worker was indexed from the departed
    worker's commit, past the sessions' headers. The loop therefore indexes a partition only
    once this listener has named its resume point (`resume_at`)."""

    def __init__(self, indexer: DocumentIndexer) -> None:
        self.indexer = indexer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        for tp in revoked:
            self.indexer.resume_at.pop(tp, None)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        consumer = self.indexer.consumer
        for tp in assigned:
            if tp.topic == self.indexer.shard_topic:
                continue
            position = self.indexer.shards.tracking_position(position_source(tp.topic,
                                                                             tp.partition))
            if position is None:
                # No local shard for this partition (a new worker, or a partition that moved
                # here): rebuild it from the start of the compacted documents topic, not from
                # the previous owner's committed offset.
                position = (await consumer.beginning_offsets([tp]))[tp]
            consumer.seek(tp, position)
            self.indexer.resume_at[tp] = position
        for tp in assigned:
            if tp.topic == self.indexer.shard_topic:
                # Requests older than now were for the previous owner and are past caring.
                await consumer.seek_to_end(tp)


class DocumentIndexer:
    """Consumes the documents topic into a ShardSet. For each fetched batch:
    1. decode documents (undecodable ones are parked in the dead letters);
    2. `write_batch` the records with positions `<topic>:<partition>` = next offset, in the
       shards' own SQLite transaction (a replay below that position changes nothing);
    3. only then commit the Kafka offsets.

    The same consumer reads `<p>.shard-requests` with the range assignor, so whoever owns
    documents partition k (and so shard k) also owns shard-requests partition k and answers the
    query coordinators' requests for shard k."""

    def __init__(self, settings: Settings, shards: ShardSet, *, group_id: str | None = None,
                 fetch_max_wait_ms: int = 100, generation: int = 1) -> None:
        if not settings.broker:
            raise ValueError("the index consumer needs RECALL_BROKER")
        if len(shards.shards) != settings.shards:
            raise ValueError(f"the index has {len(shards.shards)} shards; RECALL_SHARDS is "
                             f"{settings.shards}: shard k must follow partition k")
        self.topics = Topics.of(settings, generation)
        self.shards = shards
        self.stats: Counter[str] = Counter()
        bootstrap = bootstrap_servers(settings.broker)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group_id or self.topics.index_group,
            group_instance_id=instance_id(settings, f"index.g{generation}"),
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=int(settings.session_timeout_s * 1000),
            heartbeat_interval_ms=int(settings.heartbeat_s * 1000),
            # tansu does not wake a long poll when data arrives; keep the wait short.
            fetch_max_wait_ms=fetch_max_wait_ms, max_poll_records=BATCH_MAX,
            partition_assignment_strategy=(RangePartitionAssignor,))
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        self.settings = settings
        self.bootstrap = bootstrap
        self.shard_topic = self.topics.shard_requests
        self.query: QueryService | None = None
        #: Per assigned documents partition, the offset the shards hold up to (set on
        #: assignment from their tracking tables, then advanced by each written batch).
        self.resume_at: dict[TopicPartition, int] = {}
        self._resought: dict[TopicPartition, tuple[int, int]] = {}

    @classmethod
    def for_generation(cls, settings: Settings, generation: int) -> DocumentIndexer:
        """This worker's indexer of one generation: shard k follows partition k of the
        generation's documents topic, in files of its own (`Topics.index_dir`). Shard files of
        an older schema start over empty: their partitions are re-read from the topic."""
        root = Topics.of(settings, generation).index_dir(settings.data_dir)
        return cls(settings, ShardSet(root, index_config(settings), key_dir=root,
                                      reset_outdated=True), generation=generation)

    async def run(self, stop: asyncio.Event) -> None:
        """Index until `stop` is set."""
        await ensure_fleet_topics(self.bootstrap, self.settings.topic_prefix)
        await ensure_topics(self.bootstrap, self.topics,
                            names=[self.topics.documents, self.topics.shard_requests])
        # Cursors must verify on any owner: sign with the fleet's key, not a local one.
        self.shards.key = await fleet_cursor_key(self.bootstrap, self.settings.topic_prefix)
        self.query = QueryService(self.shards)
        await self.producer.start()
        await self.consumer.start()
        try:
            self.consumer.subscribe([self.topics.documents, self.shard_topic],
                                    listener=_ResumeFromShards(self))
            while not stop.is_set():
                batches = await self.consumer.getmany(timeout_ms=200, max_records=BATCH_MAX)
                requests = {tp: b for tp, b in batches.items() if tp.topic == self.shard_topic}
                documents = {tp: b for tp, b in batches.items() if tp.topic != self.shard_topic}
                if documents:
                    await self.index(documents)
                for messages in requests.values():
                    for msg in messages:
                        await self.answer(msg.value or b"")
        finally:
            await self.consumer.stop()
            await self.producer.stop()

    def _skips_ahead(self, tp: TopicPartition, messages: Sequence[Any]) -> bool:
        """True (and the partition sought back) when a batch starts past the position the shard
        recorded: indexing it would leave a hole (records fetched from the group's committed
        offset before the listener's seek took effect). A jump that persists after one seek
        back is compaction (those offsets no longer exist), and is accepted."""
        recorded = self.resume_at[tp]
        first = messages[0].offset
        if first <= recorded:
            self._resought.pop(tp, None)
            return False
        if self._resought.get(tp) == (recorded, first):
            return False
        self._resought[tp] = (recorded, first)
        log.warning("%s:%s fetched from %s but the shard holds up to %s; seeking back",
                    tp.topic, tp.partition, first, recorded)
        self.consumer.seek(tp, recorded)
        self.stats["resought"] += 1
        return True

    async def index(self, batches: dict[TopicPartition, Sequence[Any]]) -> None:
        # A partition without a resume point was fetched before the assignment listener ran;
        # its seek fetches these records again.
        unplaced = [tp for tp in batches if tp not in self.resume_at]
        self.stats["unplaced"] += sum(len(batches[tp]) for tp in unplaced)
        batches = {tp: m for tp, m in batches.items()
                   if tp in self.resume_at and not self._skips_ahead(tp, m)}
        if not batches:
            return
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
        for tp, messages in batches.items():
            self.resume_at[tp] = messages[-1].offset + 1
        self.stats["indexed"] += len(records)
        try:
            await self.consumer.commit(commits)
        except KafkaError as exc:
            # The shard's tracking table is the resume point; a commit lost to a rebalance
            # only delays the group's lag metric, so keep indexing.
            log.info("offset commit skipped: %s", exc)

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

    async def answer(self, value: bytes) -> None:
        """Answer one shard request from the local shard; errors become error replies."""
        try:
            request = decode_request(value)
        except RecallError as exc:
            log.warning("unreadable shard request ignored: %s", exc)
            return
        if time.time() * 1000 > request.deadline_ms:
            return  # the coordinator has given up on it already
        assert self.query is not None
        try:
            reply = ok_reply(request.id, answer_shard_request(self.shards, self.query, request.op,
                                                               request.args))
        except RecallError as exc:
            reply = error_reply(request.id, exc.code, exc.to_json()["message"])
        except Exception as exc:
            log.exception("shard request %s failed", request.op)
            reply = error_reply(request.id, "RECALL_INTERNAL_ERROR",
                                f"{request.op} failed on the shard owner ({type(exc).__name__})")
        topic, partition = parse_reply_to(request.reply_to)
        await self.producer.send_and_wait(topic, encode_reply(reply), partition=partition)

    async def park(self, msg: Any, code: str, reason: str) -> None:
        letter = DeadLetter.of(topic=msg.topic, partition=msg.partition, offset=msg.offset,
                               key=msg.key, value=msg.value, code=code, reason=reason)
        await self.producer.send_and_wait(self.topics.dead_letter, encode_dead_letter(letter),
                                          key=dead_letter_key(letter), partition=msg.partition)
        self.stats[f"parked:{code}"] += 1
