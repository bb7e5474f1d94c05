"""Transport: the index consumer — `<p>.documents` partition k → shard k, offsets after commit."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor

from indexer import QueryService, ShardSet, SourceConflict
from projections.errors import InputRejected, RecallError
from projections.records import IndexRecord
from streams.core.indexconfig import index_config
from streams.core.settings import Settings
from streams.runtime.kafka.codec import (
    DeadLetter,
    dead_letter_key,
    decode_documents,
    decode_request,
    encode_dead_letter,
    encode_reply,
    ok_reply,
)
from streams.runtime.kafka.connection import (
    FOLLOW_LEADERS,
    IDLE_TURN_MS,
    asked_again,
    client_options,
    connect_kwargs,
)
from streams.runtime.kafka.fleet import ensure_fleet_topics, fleet_cursor_key, replication_options
from streams.runtime.kafka.membership import instance_id
from streams.runtime.kafka.partitions import PartitionLoop
from streams.runtime.kafka.query import answer_shard_request
from streams.runtime.kafka.rpc import FirstSight, failure_reply, parse_reply_to
from streams.runtime.kafka.topics import Topics, ensure_topics

log = logging.getLogger("recall.indexing")

#: Records per shard transaction: FTS5 inserts are much cheaper in large transactions
#: (docs/ENGINE-NOTES.md §5).
BATCH_MAX = 1000
#: Shard requests answered in a thread (reader connections of their own, one WAL snapshot per
#: shard) while indexing goes on: a digest re-folds every session of the shard, and answered in
#: the loop it would hold the index role's writes up for seconds.
#: One at a time, in this process: the digest helpers (indexer/digester.py) would take both
#: cores from indexing (see streams.runtime.kafka.query.answer_shard_request).
IN_THREAD_OPS = frozenset({"shard.digest", "shard.substring_build"})
#: Shard requests that write (the explicit substring index build): while one runs, the loop's
#: own writes wait for the write lock in a thread, not on the loop.
WRITING_OPS = frozenset({"shard.substring_build"})
#: A generation being built is searched by no one until it goes live, so its indexer gathers
#: what arrives within this window (up to GATHER_MAX_RECORDS) into one write: each shard
#: transaction has a fixed cost beyond its rows (FTS5 writes a segment per commit), so one
#: write per documents record, as a job produces them, would cost far more CPU.
GATHER_S = 0.3
GATHER_MAX_RECORDS = 100


def position_source(topic: str, partition: int) -> str:
    """The tracking source under which a shard stores how far it consumed a partition."""
    return f"{topic}:{partition}"


class _ShardRequestsFromNow(ConsumerRebalanceListener):  # type: ignore[misc]
    """Shard requests older than an assignment were for the previous owner, past caring."""

    def __init__(self, indexer: DocumentIndexer) -> None:
        self.indexer = indexer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        for tp in assigned:
            if tp.topic == self.indexer.shard_topic:
                await self.indexer.consumer.seek_to_end(tp)


#: A worker merges its shards' FTS segments once its fetches have come back empty this long
#: (a rebuild's index role goes idle for moments while the fold catches up: merging then, again
#: and again, would slow the reindex down).
MERGE_QUIET_S = 2.0


class DocumentIndexer:
    """Consumes the documents topic into a ShardSet, as a partition processor
    (streams.runtime.kafka.partitions): each documents partition k is read in order from the position
    shard k's tracking table recorded (from the partition's start when this worker has none,
    never from the group's committed offset, which is another worker's after a partition
    moved). For each fetched batch:
    1. decode documents (undecodable ones are parked in the dead letters);
    2. `write_batch` the records with positions `<topic>:<partition>` = next offset, in the
       shards' own SQLite transaction (a replay below that position changes nothing);
    3. only then commit the Kafka offsets.
    The documents topic is compacted: a hole that persists after one seek back is read across.

    The same consumer reads `<p>.shard-requests` with the range assignor, so whoever owns
    documents partition k (and so shard k) also owns shard-requests partition k and answers the
    query coordinators' requests for shard k."""

    def __init__(self, settings: Settings, shards: ShardSet, *, group_id: str | None = None,
                 fetch_max_wait_ms: int = 200, generation: int = 1,
                 fleet_set_up: bool = False) -> None:
        if not settings.broker:
            raise ValueError("the index consumer needs RECALL_BROKER")
        if len(shards.shards) != settings.shards:
            raise ValueError(f"the index has {len(shards.shards)} shards; RECALL_SHARDS is "
                             f"{settings.shards}: shard k must follow partition k")
        self.topics = Topics.of(settings, generation)
        self.shards = shards
        self.stats: Counter[str] = Counter()
        bootstrap = client_options(settings)
        self.consumer = AIOKafkaConsumer(
            **connect_kwargs(bootstrap), group_id=group_id or self.topics.index_group,
            group_instance_id=instance_id(settings, f"index.g{generation}"),
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=int(settings.session_timeout_s * 1000),
            heartbeat_interval_ms=int(settings.heartbeat_s * 1000),
            # the longest pause after an empty fetch noida-db answered at once (on Kafka, the
            # worker's idle fetches long-poll: seam.long_polls)
            fetch_max_wait_ms=fetch_max_wait_ms, max_poll_records=BATCH_MAX,
            consumer_timeout_ms=IDLE_TURN_MS, **FOLLOW_LEADERS,
            partition_assignment_strategy=(RangePartitionAssignor,))
        self.producer = AIOKafkaProducer(**connect_kwargs(bootstrap))
        self.settings = settings
        self.bootstrap = bootstrap
        #: The fleet's control topic (where the cursor key is) is known to exist: the set-up
        #: ensures only this generation's topics. Else (an indexer on its own, a fresh cluster)
        #: it ensures the control topic too.
        self.fleet_set_up = fleet_set_up
        self.shard_topic = self.topics.shard_requests
        self.query: QueryService | None = None
        self._taken = FirstSight()
        #: Answers running in a thread (IN_THREAD_OPS), one at a time.
        self._answering: set[asyncio.Task[None]] = set()
        self._thread_slot = asyncio.Semaphore(1)
        #: WRITING_OPS running in a thread: the shards' write lock may be held for long.
        self._writing = 0
        self.loop = PartitionLoop(self.consumer, self, compacted=True)
        #: Seconds to gather fetched records into one write (`GATHER_S` while the generation
        #: is being built, 0 once it is live: then each fetch is written at once).
        self.gather_s = 0.0

    @classmethod
    def for_generation(cls, settings: Settings, generation: int) -> DocumentIndexer:
        """This worker's indexer of one generation: shard k follows partition k of the
        generation's documents topic, in files of its own (`Topics.index_dir`). Shard files of
        an older schema start over empty: their partitions are re-read from the topic. Its
        role read the lineup from the fleet's control topic before (the supervisor ensured
        that topic), so its set-up ensures only the generation's own topics."""
        root = Topics.of(settings, generation).index_dir(settings.data_dir)
        return cls(settings, ShardSet(root, index_config(settings), key_dir=root,
                                      reset_outdated=True), generation=generation,
                   fleet_set_up=True)

    @property
    def topic(self) -> str:
        return self.topics.documents

    def recorded(self, partition: int) -> int | None:
        return self.shards.tracking_position(position_source(self.topic, partition))

    async def _set_up(self) -> None:
        """The generation's topics and the fleet's cursor key (its control topic too unless
        `fleet_set_up`), asked again while a broker is lost (an admin request goes to any
        broker, the dead one too until it is fenced): a generation's indexer starts beside the
        live one's, and its failure would restart the whole index role, the live shards'
        answers with it."""
        async def attempt() -> None:
            if not self.fleet_set_up:
                await ensure_fleet_topics(self.bootstrap, self.settings.topic_prefix,
                                          **replication_options(self.settings))
            await ensure_topics(self.bootstrap, self.topics,
                                names=[self.topics.documents, self.topics.shard_requests])
            # Cursors must verify on any owner: sign with the fleet's key, not a local one.
            self.shards.key = await fleet_cursor_key(self.bootstrap, self.settings.topic_prefix)

        await asked_again(f"setting up {self.topics.documents}", attempt)

    async def run(self, stop: asyncio.Event) -> None:
        """Index until `stop` is set."""
        await self._set_up()
        # A search never builds the substring index here: `shard.substring_build` does.
        self.query = QueryService(self.shards, build_substring=False)
        await self.producer.start()
        await self.consumer.start()
        try:
            self.consumer.subscribe([self.topics.documents, self.shard_topic],
                                    listener=self.loop.listener(_ShardRequestsFromNow(self)))
            baseline = self.shards.structures()
            indexed = self.stats["indexed"]
            loop = asyncio.get_running_loop()
            fed = loop.time()
            while not stop.is_set():
                batches = await self.consumer.getmany(timeout_ms=IDLE_TURN_MS,
                                                      max_records=BATCH_MAX)
                if batches and self.gather_s > 0:
                    batches = await self._gather(batches)
                if batches:
                    fed = loop.time()
                elif self.stats["indexed"] != indexed and loop.time() - fed >= MERGE_QUIET_S:
                    # Quiet after writing: merge what the writes grew a good part of
                    # (indexer/segments.py), off the loop so heartbeats and answers go on.
                    indexed = self.stats["indexed"]
                    baseline = await asyncio.to_thread(self.shards.merge_grown, baseline)
                await self.loop.step(batches)
                for tp, messages in batches.items():
                    if tp.topic == self.shard_topic:
                        for msg in messages:
                            await self.answer(msg.value or b"")
        finally:
            for task in list(self._answering):
                task.cancel()
            await self.consumer.stop()
            await self.producer.stop()

    async def _gather(self, batches: Mapping[Any, Sequence[Any]]) -> dict[Any, list[Any]]:
        """`batches` and whatever more arrives within `gather_s` (ended early by a fetch that
        brings nothing), up to GATHER_MAX_RECORDS, merged in each partition's order."""
        merged = {tp: list(records) for tp, records in batches.items()}
        count = sum(map(len, merged.values()))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.gather_s
        while count < GATHER_MAX_RECORDS and (left := deadline - loop.time()) > 0:
            more = await self.consumer.getmany(timeout_ms=max(1, int(left * 1000)),
                                               max_records=BATCH_MAX)
            if not more:
                break
            for tp, records in more.items():
                merged.setdefault(tp, []).extend(records)
                count += len(records)
        return merged

    async def process(self, records: Sequence[Any], upto: Mapping[int, int]) -> None:
        decoded: list[IndexRecord] = []
        for msg in records:
            for index, line, document in decode_documents(msg.value):
                if isinstance(document, InputRejected):
                    await self.park(msg, index, line, document.code, document.message)
                else:
                    decoded.append(document)
        positions = {position_source(self.topic, p): offset for p, offset in upto.items()}
        self.stats["indexed"] += len(decoded)
        try:
            await self._write_batch(decoded, positions)
        except SourceConflict:
            # One document disagrees with the shard; find it by writing one at a time.
            await self._write_one_by_one(records)

    async def _write_one_by_one(self, records: Sequence[Any]) -> None:
        for msg in records:
            for index, line, document in decode_documents(msg.value):
                if isinstance(document, InputRejected):
                    continue  # parked already
                try:
                    await self._write_batch([document], {})
                except SourceConflict as exc:
                    await self.park(msg, index, line, exc.code, exc.message)
            await self._write_batch([], {position_source(msg.topic, msg.partition):
                                         msg.offset + 1})

    async def _write_batch(self, records: Sequence[IndexRecord],
                           positions: Mapping[str, int]) -> None:
        if self._writing:
            # A substring build holds the write lock in a thread: wait for it off the loop,
            # so heartbeats and shard answers go on meanwhile.
            await asyncio.to_thread(self.shards.write_batch, records, positions)
        else:
            self.shards.write_batch(records, positions)

    async def answer(self, value: bytes) -> None:
        """Answer one shard request from the local shard; errors become error replies."""
        try:
            request = decode_request(value)
        except RecallError as exc:
            log.warning("unreadable shard request ignored: %s", exc)
            return
        if time.time() * 1000 > request.deadline_ms or not self._taken.first(request.id):
            return  # the coordinator has given up on it, or this is a copy of one answered
        if request.op in IN_THREAD_OPS:
            task = asyncio.create_task(self._reply(request, in_thread=True))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)
        else:
            await self._reply(request, in_thread=False)

    async def _reply(self, request: Any, *, in_thread: bool) -> None:
        assert self.query is not None
        try:
            if in_thread:
                async with self._thread_slot:
                    writing = request.op in WRITING_OPS
                    self._writing += writing
                    try:
                        result = await asyncio.to_thread(answer_shard_request, self.shards,
                                                         self.query, request.op, request.args)
                    finally:
                        self._writing -= writing
            else:
                result = answer_shard_request(self.shards, self.query, request.op, request.args)
            reply = ok_reply(request.id, result)
        except Exception as exc:
            reply = failure_reply(request.id, exc, self.settings.data_dir)
        topic, partition = parse_reply_to(request.reply_to)
        await self.producer.send_and_wait(topic, encode_reply(reply), partition=partition)

    async def park(self, msg: Any, line: int, value: bytes | None, code: str,
                   reason: str) -> None:
        letter = DeadLetter.of(topic=msg.topic, partition=msg.partition, offset=msg.offset,
                               line=line, key=msg.key, value=value, code=code, reason=reason)
        await self.producer.send_and_wait(self.topics.dead_letter, encode_dead_letter(letter),
                                          key=dead_letter_key(letter), partition=msg.partition)
        self.stats[f"parked:{code}"] += 1
