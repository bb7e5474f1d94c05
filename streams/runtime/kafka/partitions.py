"""Transport: the shape every consumer loop shares — partitions read in order from a recorded
position, effects and positions made durable together, commits after them.

The three consumer loops (the live fold under faust, the reindex job's fold and the index
consumer) are each a `PartitionProcessor` on one input topic:
1. on assignment, each partition is placed at the position the processor's own state recorded
   (its durable effects reach exactly up to there), or at the partition's start if none; never
   at the group's committed offset, which can lag the state (a crash between the two commits)
   or lead it (faust can commit past records it never delivered);
2. `ReadPositions.admit` passes each partition's records strictly in offset order from there:
   a record before the position was applied already (a redelivery) and is skipped; a record
   past it means records before it were not delivered (fetched before a seek, delivered after
   it), so it is left unread and the partition is sought back to the position;
3. `process` applies the admitted records and records the new positions *with* their effects
   (the fold table, the shard transaction), so a crash anywhere replays at most the batch;
4. only then are offsets committed (the group's lag, which jobs watch; never a resume point).
`PartitionLoop` drives a processor from a plain aiokafka consumer; streams.runtime.kafka.seam drives the
fold's under faust.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

log = logging.getLogger("recall.partitions")

#: Lines processed (and positions recorded) at a time: a fetch of big segments is cut into runs
#: of about this many events.
CHUNK_LINES = 5000


class Record(Protocol):
    """An input record as aiokafka and faust hand it over."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class PartitionProcessor(Protocol):
    """The work of one consumer loop on the partitions of its input topic."""

    @property
    def topic(self) -> str: ...

    def recorded(self, partition: int) -> int | None:
        """The next offset to read on `partition` according to this processor's own durable
        state (None: nothing recorded, read from the partition's start)."""
        ...

    async def process(self, records: Sequence[Any], upto: Mapping[int, int]) -> None:
        """Apply `records` (per partition contiguous, in offset order) and make their effects
        durable together with `upto` (partition -> next offset) as the recorded positions."""
        ...


@dataclass(slots=True)
class Admitted:
    """What `ReadPositions.admit` made of a batch: `records` to process, `upto` the positions
    after them, `unread` records past a hole (not processed, not to be committed), `resume`
    partition -> offset to seek back to, `reread` how many redelivered records were skipped."""

    records: list[Any] = field(default_factory=list)
    upto: dict[int, int] = field(default_factory=dict)
    unread: list[Any] = field(default_factory=list)
    resume: dict[int, int] = field(default_factory=dict)
    reread: int = 0

    def chunks(self, max_lines: int) -> Iterator[tuple[list[Any], dict[int, int]]]:
        """The records in order, cut into runs of about `max_lines` lines (a record may be a
        segment of many), each with the positions after it: a batch of big segments is
        processed (and its positions recorded) a run at a time, so its outputs flow on and
        its memory stays bounded."""
        run: list[Any] = []
        upto: dict[int, int] = {}
        lines = 0
        for record in self.records:
            run.append(record)
            upto[record.partition] = record.offset + 1
            lines += 1 + (record.value.count(b"\n") if record.value else 0)
            if lines >= max_lines:
                yield run, upto
                run, upto, lines = [], {}, 0
        if run:
            yield run, upto


class ReadPositions:
    """Each assigned partition's next offset to read, so a processor sees its input in offset
    order whatever order the client delivers it in.

    `compacted`: the input may have holes of its own (a compacted topic): a hole that is still
    there after one seek back is the log's, and is read across. `reseek_s`: the least time
    between two seek-backs of one partition, for a client that keeps delivering records it
    fetched before a seek (faust's stream buffer: they land past the position too and must
    not trigger a seek each); aiokafka drops those itself."""

    def __init__(self, *, compacted: bool = False, reseek_s: float = 0.0) -> None:
        self.compacted = compacted
        self.reseek_s = reseek_s
        self.at: dict[int, int] = {}
        self._holes: dict[int, tuple[int, int]] = {}
        self._sought: dict[int, float] = {}

    def place(self, partition: int, offset: int) -> None:
        """Reading of `partition` starts (again) at `offset`."""
        self.at[partition] = offset
        self._holes.pop(partition, None)

    def forget(self, partitions: Iterable[int] | None = None) -> None:
        """These partitions (all by default) are no longer placed: nothing is read from them
        until they are placed again."""
        for partition in list(self.at) if partitions is None else partitions:
            self.at.pop(partition, None)
            self._holes.pop(partition, None)

    def admit(self, records: Iterable[Any]) -> Admitted:
        """Sort a batch into records to process now, in order, and records to read again."""
        out = Admitted()
        reading = dict(self.at)
        now = time.monotonic()
        for record in records:
            partition, offset = record.partition, record.offset
            at = reading.get(partition)
            if at is None:  # fetched before the partition was placed: it is fetched again
                out.unread.append(record)
                continue
            if offset < at:
                out.reread += 1
                continue
            if offset > at:
                if self.compacted and self._holes.get(partition) == (at, offset):
                    at = offset  # the same hole after a seek back: the log's own
                else:
                    out.unread.append(record)
                    self._holes[partition] = (at, offset)
                    if now - self._sought.get(partition, -self.reseek_s) >= self.reseek_s:
                        out.resume.setdefault(partition, at)
                    continue
            reading[partition] = at + 1
            out.upto[partition] = at + 1
            out.records.append(record)
        for partition in out.resume:
            self._sought[partition] = now
        return out

    def advance(self, upto: Mapping[int, int]) -> None:
        """The admitted records were processed: reading continues after them."""
        for partition, offset in upto.items():
            if partition in self.at:
                self.at[partition] = offset
                self._holes.pop(partition, None)


class PartitionLoop:
    """Drives a PartitionProcessor from a plain aiokafka consumer (subscribed with
    `listener()`, or assigned by hand and placed with `place`)."""

    def __init__(self, consumer: AIOKafkaConsumer, processor: PartitionProcessor, *,
                 compacted: bool = False, commit: bool = True,
                 max_lines: int = CHUNK_LINES) -> None:
        self.consumer = consumer
        self.processor = processor
        self.max_lines = max_lines
        self.positions = ReadPositions(compacted=compacted)
        self.commit = commit
        self.stats: dict[str, int] = {"processed": 0, "reread": 0, "unread": 0, "resought": 0}
        #: Positions to commit with the next `step` (`commit_later`: placed by a rebalance).
        self._placed: dict[int, int] = {}

    def listener(self, also: ConsumerRebalanceListener | None = None) -> ConsumerRebalanceListener:
        """A rebalance listener placing the processor's partitions (then calling `also`)."""
        return _Placing(self, also)

    async def place(self, tps: Iterable[TopicPartition],
                    starts: Mapping[int, int] | None = None) -> dict[int, int]:
        """Seek each of the processor's partitions among `tps` to its recorded position, else
        to `starts`, else to its beginning; returns partition -> offset."""
        mine = [tp for tp in tps if tp.topic == self.processor.topic]
        targets: dict[TopicPartition, int] = {}
        missing = []
        for tp in mine:
            offset = self.processor.recorded(tp.partition)
            if offset is None and starts is not None:
                offset = starts.get(tp.partition)
            if offset is None:
                missing.append(tp)
            else:
                targets[tp] = offset
        if missing:
            targets.update(await self.consumer.beginning_offsets(missing))
        for tp, offset in targets.items():
            self.consumer.seek(tp, offset)
            self.positions.place(tp.partition, offset)
        return {tp.partition: offset for tp, offset in targets.items()}

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        partitions = [tp.partition for tp in tps if tp.topic == self.processor.topic]
        self.positions.forget(partitions)
        for partition in partitions:
            self._placed.pop(partition, None)

    def commit_later(self, positions: Mapping[int, int]) -> None:
        """Commit these positions (partition -> offset) with the next `step`, records or not."""
        self._placed.update(positions)

    async def step(self, batches: Mapping[TopicPartition, Sequence[Any]]) -> int:
        """Process the processor's records of one `getmany` result; returns how many."""
        topic = self.processor.topic
        records = [r for tp in sorted(batches) if tp.topic == topic for r in batches[tp]]
        if not records:
            if self._placed and self.commit:
                await self._commit(self._placed)
            return 0
        admitted = self.positions.admit(records)
        self.stats["reread"] += admitted.reread
        self.stats["unread"] += len(admitted.unread)
        for partition, offset in admitted.resume.items():
            log.info("%s:%s fetched past the read position; seeking back to %s",
                     topic, partition, offset)
            self.consumer.seek(TopicPartition(topic, partition), offset)
            self.stats["resought"] += 1
        for records, upto in admitted.chunks(self.max_lines):
            await self.processor.process(records, upto)
            self.positions.advance(upto)
            # The index consumer's shard writes do not yield: a fetch of a whole backlog
            # written in one go held its loop for longer than the session timeout on a busy
            # machine (no heartbeat went out; the group expelled the member mid-build). Between
            # runs the consumer's heartbeats and fetches go on.
            await asyncio.sleep(0)
        self.stats["processed"] += len(admitted.records)
        if self.commit and (admitted.upto or self._placed):
            await self._commit({**self._placed, **admitted.upto})
        return len(admitted.records)

    async def _commit(self, upto: Mapping[int, int]) -> None:
        topic = self.processor.topic
        try:
            await self.consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "")
                                        for p, o in upto.items()})
        except KafkaError as exc:
            # The processor's recorded positions are the resume point; a commit lost to a
            # rebalance only delays the group's lag metric (the placing after it commits
            # the positions again).
            log.info("offset commit skipped: %s", exc)
            return
        for partition in list(upto):
            self._placed.pop(partition, None)


class _Placing(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka fetches a new assignment from the committed offsets *before* it calls this
    listener (so a partition that moved back would be indexed from the departed worker's
    commit); records of a partition not placed yet are therefore left unread."""

    def __init__(self, loop: PartitionLoop, also: ConsumerRebalanceListener | None) -> None:
        self.loop, self.also = loop, also

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.loop.forget(revoked)
        if self.also is not None:
            await self.also.on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        placed = await self.loop.place(assigned)
        # The group's commits may lag the recorded positions (commits lost to the rebalance
        # that led here): the next step commits them even when nothing more arrives, or a
        # job waiting for the group to reach the log's end would wait for ever.
        self.loop.commit_later(placed)
        # rare and worth seeing in a worker's output: which partitions this member now reads
        log.warning("%s: reading partitions %s (from %s)", self.loop.processor.topic,
                    sorted(placed), [placed[p] for p in sorted(placed)])
        if self.also is not None:
            await self.also.on_partitions_assigned(assigned)
