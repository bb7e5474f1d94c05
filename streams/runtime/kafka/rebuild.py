"""Transport: the fleet's replay and reindex jobs — a new index generation from `<p>.events`.

reindex (blue/green): the lineup names generation n+1 `building`; this job folds every event
  from the start into n+1's documents topic and fold changelog (committing n+1's fold-group
  offsets after each batch's writes are acked, so a killed job resumes where it stopped); then
  the lineup marks n+1 `folded` and every worker starts its fold of n+1 beside n's (a faust
  fold that recovers n+1's changelog and continues from the job's offsets; a job run again
  after that point does not fold). Index workers index n+1's documents into its shard files
  beside the live ones; once they have caught up and the workers' fold of n+1 has joined its
  group, the lineup makes n+1 live and each worker's fold of n+1 simply becomes its fold (n's
  is stopped). Queries are answered from n until the
  swap; n's cursors are STALE after it.
replay (in place): the lineup makes a fresh generation live at once: the fleet's own fold
  processors start over from the earliest offsets (a new consumer group is a rewound one) and
  the index workers rebuild every shard; this job follows their progress to the end.
Both are resumable: run the command again and it continues the generation in progress.
One job runs at a time: a job holds a lease in the lineup, renewed every few seconds; another
job is refused (STREAM_JOB_RUNNING) until the lease is released or, for a killed job, expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from indexer.pipeline import bulk_mode
from projections.errors import RecallError
from streams.core.detectors import build_redactor
from streams.core.settings import Settings
from streams.runtime.kafka.connection import Connect, client_options, connect_kwargs
from streams.runtime.kafka.fleet import (
    Lineup,
    ensure_fleet_topics,
    publish_lineup,
    read_lineup,
    replication_options,
)
from streams.runtime.kafka.folding import Fold
from streams.runtime.kafka.foldstep import FoldProcessor
from streams.runtime.kafka.partitions import PartitionLoop
from streams.runtime.kafka.producer import batching_producer
from streams.runtime.kafka.topics import Topics, ensure_topics

log = logging.getLogger("recall.jobs")

Progress = Callable[[int, int], None]
#: Records fetched at a time by the reindex job (segments: bounded by the fetch bytes too).
BATCH_MAX = 5000
#: Lines folded at a time (each run: its documents acked, then its table writes).
JOB_CHUNK_LINES = 20000
#: How often a job looks at a group's committed offsets while it waits for the group to catch
#: up (one OffsetFetch a look): the command returns about this much after the work is done
#: (a replay of 200k events returned 1.8 s after its last events were indexed with one request
#: per partition every 0.2 s and a 0.3 s look past the ends; 1.2 s with these).
CAUGHT_UP_POLL_S = 0.05
#: How often a reindex looks whether the workers' fold of the new generation has joined.
JOINED_POLL_S = 0.05


class JobRunning(RecallError):
    """Another reindex or replay holds the fleet's job lease.

    Operator action: wait for it to finish; if it was killed, run the command again once its
    lease has expired (the message says when). The new run resumes its generation."""

    code = "STREAM_JOB_RUNNING"


class JobStalled(RecallError):
    """The fleet stopped making progress on a replay or reindex.

    Operator action: start (or restart) `recall worker` processes with the index and fold
    roles, then run the same command again; it resumes the generation in progress."""

    code = "STREAM_JOB_STALLED"


def generation_name(generation: int) -> str:
    """The same names as the embedded runtime's generation directories."""
    return f"gen-{generation:06d}"


async def _read_table(bootstrap: Connect, topics: Topics) -> dict[str, bytes]:
    """The fold table of a generation, read back from its changelog (to resume a build)."""
    consumer = AIOKafkaConsumer(**connect_kwargs(bootstrap), group_id=None,
                                enable_auto_commit=False)
    await consumer.start()
    table: dict[str, bytes] = {}
    try:
        tps = [TopicPartition(topics.changelog, p) for p in range(topics.partitions)]
        ends = await consumer.end_offsets(tps)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while await _behind(consumer, ends):
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                for msg in messages:
                    key = bytes(msg.key or b"").decode("utf-8")
                    if msg.value is None:
                        table.pop(key, None)
                    else:
                        table[key] = bytes(msg.value)
        return table
    finally:
        await consumer.stop()


async def _positions(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> dict[Any, int]:
    return {tp: await consumer.position(tp) for tp in tps}


async def _behind(consumer: AIOKafkaConsumer, ends: dict[Any, int]) -> bool:
    positions = await _positions(consumer, list(ends))
    return any(positions[tp] < end for tp, end in ends.items())


class _ChangelogTable:
    """The job's fold table: a dict, each write also sent to the changelog partition.

    A partition's read position (the last record of each of its writes) goes to the same
    changelog partition after the writes it vouches for, so a reader never finds it without
    them (a producer keeps one partition's batches in order)."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, data: dict[str, bytes]) -> None:
        self.producer, self.topic, self.data = producer, topic, data

    def get(self, key: str, default: None = None) -> bytes | None:
        return self.data.get(key)

    async def write(self, partition: int,
                    records: Iterable[tuple[str, bytes | None]]) -> list[Any]:
        futures = []
        for key, value in records:
            futures.append(await self.producer.send(self.topic, value, key=key.encode("utf-8"),
                                                    partition=partition))
            if value is None:
                self.data.pop(key, None)
            else:
                self.data[key] = value
        return futures


async def fold_generation(settings: Settings, generation: int,
                          progress: Progress | None = None) -> int:
    """Fold `<p>.events` from the positions recorded in the generation's fold table (read back
    from its changelog; else its committed offsets; else the start) to its end into the
    generation's documents topic and changelog; returns the lines folded."""
    bootstrap = client_options(settings)
    topics = Topics.of(settings, generation)
    table = _ChangelogTable(batching_producer(bootstrap, acks="all", linger_ms=5),
                            topics.changelog, await _read_table(bootstrap, topics))
    fold = Fold(topics, table, table.write,
                FoldProcessor(max_event_bytes=settings.max_event_bytes,
                              redactor=build_redactor(settings)), table.producer)
    # The group's commits follow the table's positions: the lag a reader of the group sees.
    consumer = AIOKafkaConsumer(**connect_kwargs(bootstrap), group_id=topics.fold_app_id,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                fetch_max_wait_ms=50, max_partition_fetch_bytes=8 << 20)
    # commits follow the changelog's acks (flushed below), never run ahead of the table
    loop = PartitionLoop(consumer, fold, commit=False, max_lines=JOB_CHUNK_LINES)
    await table.producer.start()
    await consumer.start()
    try:
        tps = [TopicPartition(topics.events, p) for p in range(topics.partitions)]
        consumer.assign(tps)
        committed = {tp.partition: offset for tp in tps
                     if (offset := await consumer.committed(tp)) is not None}
        placed = await loop.place(tps, starts=committed)
        starts = {tp: placed[tp.partition] for tp in tps}
        ends = await consumer.end_offsets(tps)
        total = _span(starts, ends)
        log.info("fold of generation %s: reading %s records", generation, total)
        while True:
            positions = await _positions(consumer, tps)  # (one read: the test and the progress)
            if progress is not None:
                progress(min(total, sum(positions[tp] - starts[tp] for tp in tps)), total)
            if not any(positions[tp] < ends[tp] for tp in tps):
                later = await consumer.end_offsets(tps)
                if later == ends:
                    break
                ends = later  # events kept arriving: chase them
                total = _span(starts, ends)
            batches = await consumer.getmany(timeout_ms=300, max_records=BATCH_MAX)
            if await loop.step(batches):
                await table.producer.flush()  # every table write acked before the commit
                await _commit_recorded(consumer, fold, batches)
        log.info("fold of generation %s: %s lines folded", generation, fold.lines)
        return fold.lines
    finally:
        await consumer.stop()
        await table.producer.stop()


def _span(starts: Mapping[Any, int], ends: Mapping[Any, int]) -> int:
    """Records from the starts to the ends, over the partitions."""
    return sum(max(0, ends[tp] - start) for tp, start in starts.items())


async def _commit_recorded(consumer: AIOKafkaConsumer, fold: Fold,
                           batches: Mapping[TopicPartition, Any]) -> None:
    """The table's positions (now acked) as the job group's commits."""
    await consumer.commit({tp: OffsetAndMetadata(position, "") for tp in batches
                           if (position := fold.recorded(tp.partition)) is not None})


class _CommittedOffsets:
    """A group's committed offsets, all partitions in one OffsetFetch (the consumer's
    `committed()` asks the coordinator once per partition); the coordinator is looked up again
    after an error."""

    def __init__(self, admin: AIOKafkaAdminClient, group: str) -> None:
        self.admin, self.group = admin, group
        self._coordinator: int | None = None

    async def read(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        try:
            if self._coordinator is None:
                self._coordinator = await self.admin.find_coordinator(self.group)
            found = await self.admin.list_consumer_group_offsets(
                self.group, group_coordinator_id=self._coordinator, partitions=tps)
        except Exception:
            self._coordinator = None
            raise
        return {tp: max(0, found[tp].offset) if tp in found else 0 for tp in tps}


async def wait_caught_up(bootstrap: Connect, group: str, topic: str, partitions: int,
                         progress: Progress | None = None, *, poll_s: float = CAUGHT_UP_POLL_S,
                         what: str = "", stall_s: float = 120.0) -> int:
    """Until `group` has committed `topic`'s end offsets as of the call; returns the records
    it consumed. Raises JobStalled after `stall_s` without progress. One consumer (outside
    the group: it only reads the topic's ends) and one admin client serve every look."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = AIOKafkaConsumer(**connect_kwargs(bootstrap), group_id=None,
                                enable_auto_commit=False)
    admin = AIOKafkaAdminClient(**connect_kwargs(bootstrap))
    async with contextlib.AsyncExitStack() as clients:
        await consumer.start()
        clients.push_async_callback(consumer.stop)
        await admin.start()
        clients.push_async_callback(admin.close)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        offsets = _CommittedOffsets(admin, group)
        total = sum(ends.values())
        last, last_change = -1, time.monotonic()
        while True:
            with contextlib.suppress(KafkaError):  # a failed look is retried at the next poll
                committed = await offsets.read(tps)
                done = sum(min(committed[tp], ends[tp]) for tp in tps)
                if progress is not None:
                    progress(done, total)
                if done >= total:
                    return total
                if done != last:
                    last, last_change = done, time.monotonic()
            if time.monotonic() - last_change > stall_s:
                raise JobStalled(f"{what or group} made no progress for {stall_s:.0f} s "
                                 f"({max(last, 0)}/{total} records)")
            await asyncio.sleep(poll_s)


async def wait_joined(bootstrap: Connect, group: str, *, what: str, stall_s: float,
                      poll_s: float = JOINED_POLL_S) -> None:
    """Until consumer group `group` is stable with at least one member (its partitions
    assigned). Raises JobStalled after `stall_s`."""
    admin = AIOKafkaAdminClient(**connect_kwargs(bootstrap))
    await admin.start()
    try:
        deadline = time.monotonic() + stall_s
        while True:
            with contextlib.suppress(KafkaError):  # a failed look is retried at the next poll
                # raw DescribeGroups: (error, group id, state, protocol type, protocol,
                # members, ...) per group
                for response in await admin.describe_consumer_groups([group]):
                    if any(described[2] == "Stable" and described[5]
                           for described in response.groups):
                        return
            if time.monotonic() > deadline:
                raise JobStalled(f"{what} did not join its consumer group {group} within "
                                 f"{stall_s:.0f} s")
            await asyncio.sleep(poll_s)
    finally:
        await admin.close()


class _Lease:
    """The job lease: every lineup change of a job is published through it, lease attached."""

    def __init__(self, bootstrap: Connect, prefix: str, kind: str, lineup: Lineup, *,
                 lease_s: float) -> None:
        self.lease_s = lease_s
        self.bootstrap, self.prefix, self.kind = bootstrap, prefix, kind
        self.id = uuid.uuid4().hex
        self.lineup = lineup
        self._lock = asyncio.Lock()
        self._renewer: asyncio.Task[None] | None = None
        self._released = asyncio.Event()

    async def acquire(self) -> Lineup:
        held = self.lineup.job
        now_ms = int(time.time() * 1000)
        if held is not None and held[2] > now_ms:
            raise JobRunning(f"a {held[1]} job holds the fleet's job lease for "
                             f"{(held[2] - now_ms) / 1000:.0f} s more")
        await self.publish(self.lineup)
        # Two jobs claiming at once: the later record wins, the other backs off.
        winner = (await read_lineup(self.bootstrap, self.prefix)).job
        if winner is None or winner[0] != self.id:
            raise JobRunning(f"another {winner[1] if winner else 'job'} claimed the lease first")
        self._renewer = asyncio.create_task(self._renew())
        return self.lineup

    async def publish(self, lineup: Lineup) -> None:
        async with self._lock:
            self.lineup = replace(lineup, job=(self.id, self.kind,
                                               int((time.time() + self.lease_s) * 1000)))
            await publish_lineup(self.bootstrap, self.prefix, self.lineup)

    async def _renew(self) -> None:
        # Stopped by an event, never cancelled: a cancellation that lands while a renewal's
        # producer closes is swallowed by aiokafka (`AIOKafkaClient.close` suppresses the
        # CancelledError of the task it awaits), the renewer went on renewing, and the job
        # waiting for it hung forever after its swap (seen once in a reindex on noida-db).
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._released.wait(), self.lease_s / 3)
                return
            await self.publish(self.lineup)

    async def release(self, lineup: Lineup) -> None:
        self._released.set()
        if self._renewer is not None:
            await self._renewer  # at most one renewal in flight to finish
        async with self._lock:
            self.lineup = replace(lineup, job=None)
            await publish_lineup(self.bootstrap, self.prefix, self.lineup)

    async def abandon(self) -> None:
        """On failure: stop renewing and hand the lease back (the lineup stays as it is)."""
        await self.release(self.lineup)


async def _prepare(settings: Settings) -> tuple[Connect, Lineup]:
    bootstrap = client_options(settings)
    await ensure_fleet_topics(bootstrap, settings.topic_prefix,
                              **replication_options(settings))
    return bootstrap, await read_lineup(bootstrap, settings.topic_prefix)


def _retire(lineup: Lineup, generation: int) -> tuple[tuple[int, int], ...]:
    kept = tuple((g, at) for g, at in lineup.retired if g != generation)
    return (*kept, (generation, int(time.time() * 1000)))


async def reindex(settings: Settings, progress: Progress | None = None) -> dict[str, Any]:
    """Build generation n+1 beside the live n, then swap (resumes a build in progress)."""
    bootstrap, lineup = await _prepare(settings)
    lease = _Lease(bootstrap, settings.topic_prefix, "reindex", lineup,
                   lease_s=settings.job_lease_s)
    lineup = await lease.acquire()
    started = time.monotonic()
    try:
        target = lineup.upcoming()  # the index roles joined its group ahead
        topics = Topics.of(settings, target)
        await ensure_topics(bootstrap, topics)
        if lineup.building != target:
            await lease.publish(replace(lineup, building=target, folded=False))
        log.info("reindex: building generation %s (%.2f s)", target, time.monotonic() - started)
        folded = 0  # events this run folded
        if not lease.lineup.folded:  # else a run before this one handed the fold to the fleet
            with bulk_mode():  # the fold allocates like an ingest (indexer/pipeline.py)
                folded = await fold_generation(settings, target, progress)
            log.info("reindex: folded %s lines (%.2f s)", folded, time.monotonic() - started)
            # the workers' folds of `target` start now and continue from the job's offsets and
            # changelog; the swap then finds them running (no start, no changelog recovery)
            await lease.publish(replace(lease.lineup, folded=True))
        await wait_caught_up(bootstrap, topics.index_group, topics.documents, topics.partitions,
                             progress, what="the index workers of the new generation",
                             stall_s=settings.job_stall_s)
        log.info("reindex: indexed (%.2f s)", time.monotonic() - started)
        # The swap waits for the workers' fold of `target` too (a process started when the
        # lineup said `folded`: on a busy machine its start takes seconds): swapped before it
        # runs, the new generation would hold back every event appended meanwhile.
        await wait_joined(bootstrap, topics.fold_app_id, stall_s=settings.job_stall_s,
                          what=f"the workers' fold of generation {target} (the fold role)")
        log.info("reindex: the fold of generation %s runs (%.2f s)", target,
                 time.monotonic() - started)
    except BaseException:
        await asyncio.shield(lease.abandon())
        raise
    previous = lease.lineup.live
    await lease.release(Lineup(live=target, building=None, replaying=False,
                               retired=_retire(lease.lineup, previous)))
    log.info("reindex: generation %s live (%.2f s)", target, time.monotonic() - started)
    return {"generation": generation_name(target), "previous": generation_name(previous),
            "eventsIndexed": folded}


async def replay(settings: Settings, progress: Progress | None = None) -> dict[str, Any]:
    """Make a fresh generation live and follow the fleet rebuilding it from the earliest
    offsets (resumes following a replay in progress)."""
    bootstrap, lineup = await _prepare(settings)
    lease = _Lease(bootstrap, settings.topic_prefix, "replay", lineup,
                   lease_s=settings.job_lease_s)
    lineup = await lease.acquire()
    try:
        previous = lineup.live
        if lineup.replaying:
            target = lineup.live
            previous = max((g for g, _ in lineup.retired), default=previous)
        else:
            target = lineup.newest() + 1
            await ensure_topics(bootstrap, Topics.of(settings, target))
            await lease.publish(Lineup(live=target, building=None, replaying=True,
                                       retired=_retire(lineup, previous)))
        topics = Topics.of(settings, target)
        await wait_caught_up(
            bootstrap, topics.fold_app_id, topics.events, topics.partitions, progress,
            what="the fold processors (rewound to the earliest offsets)",
            stall_s=settings.job_stall_s)
        await wait_caught_up(bootstrap, topics.index_group, topics.documents, topics.partitions,
                             progress, what="the index workers", stall_s=settings.job_stall_s)
    except BaseException:
        await asyncio.shield(lease.abandon())
        raise
    await lease.release(replace(lease.lineup, replaying=False))
    # The fleet folded it (the job only watched offsets): the caller counts the index's events.
    return {"generation": generation_name(target), "previous": generation_name(previous)}
