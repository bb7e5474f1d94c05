"""Transport: fleet-wide facts kept in the `<p>.control` topic.

- The cursor key (first record wins). Query workers must accept each other's cursors, so they
  sign them with one key. The first worker that finds no key produces one; everybody (that one
  included) then uses the *first* key record in the topic, so two workers racing at start-up
  still agree.
- The generation lineup (last record wins): which index generation is live, which one a
  reindex is building, and when older ones were retired. Every worker obeys it: it serves and
  maintains the live generation, index workers also build the building one, and a change of
  the live generation makes each worker restart itself into the new one.
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from projections.codec import dumps, loads
from streams.core.settings import Settings
from streams.runtime.kafka.connection import Connect, connect_kwargs

CURSOR_KEY = b"cursor-key"
LINEUP_KEY = b"generations"


def control_topic(prefix: str) -> str:
    return f"{prefix}.control"


def replication_options(settings: Settings) -> dict[str, Any]:
    """`ensure_fleet_topics`' replication keywords from RECALL_KAFKA_REPLICATION_FACTOR and
    RECALL_KAFKA_MIN_INSYNC_REPLICAS."""
    return {"replication": settings.kafka_replication_factor,
            "min_insync_replicas": settings.kafka_min_insync_replicas}


async def ensure_fleet_topics(bootstrap: Connect, prefix: str, *, replication: int = 1,
                              min_insync_replicas: int | None = None) -> None:
    """Create `<p>.control` (1 partition, kept forever; replicated like the other topics, as
    every worker and job reads the lineup from it)."""
    configs = {"retention.ms": "-1"}
    if min_insync_replicas is not None:
        configs["min.insync.replicas"] = str(min_insync_replicas)
    admin = AIOKafkaAdminClient(**connect_kwargs(bootstrap))
    await admin.start()
    try:
        if control_topic(prefix) not in set(await admin.list_topics()):
            # Not compacted: compaction keeps the *last* record of a key, and the first cursor
            # key must win.
            with contextlib.suppress(Exception):  # a racing worker created it: fine
                await admin.create_topics([NewTopic(control_topic(prefix), 1, replication,
                                                    topic_configs=configs)])
    finally:
        await admin.close()


async def _control_records(bootstrap: Connect, topic: str, key: bytes, *,
                           first: bool) -> bytes | None:
    """The first (or last) value of `key` in the control topic, reading it to its end."""
    consumer = AIOKafkaConsumer(**connect_kwargs(bootstrap), group_id=None,
                                enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    found: bytes | None = None
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            for record in batch.get(tp, []):
                if record.key == key and record.value:
                    found = bytes(record.value)
                    if first:
                        return found
        return found
    finally:
        await consumer.stop()


async def _first_key(bootstrap: Connect, topic: str) -> bytes | None:
    return await _control_records(bootstrap, topic, CURSOR_KEY, first=True)


async def fleet_cursor_key(bootstrap: Connect, prefix: str) -> bytes:
    """The fleet's cursor-signing key, created on first use."""
    topic = control_topic(prefix)
    key = await _first_key(bootstrap, topic)
    if key is not None:
        return key
    producer = AIOKafkaProducer(**connect_kwargs(bootstrap), acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, secrets.token_bytes(32), key=CURSOR_KEY, partition=0)
    finally:
        await producer.stop()
    key = await _first_key(bootstrap, topic)
    assert key is not None
    return key


@dataclass(frozen=True, slots=True)
class Lineup:
    """The fleet's index generations: `live` serves queries; `building` is being built by a
    reindex (index workers consume its documents topic too); `replaying` marks a live
    generation that a replay is still rebuilding; `retired` maps old generations to when they
    stopped serving (their topics and shard files are deleted after the retention window).
    `folded`: the reindex job has folded `building` up to the log's end, and the workers' fold
    processors continue it from there (beside the live one), so that the swap finds it
    running."""

    live: int = 1
    building: int | None = None
    replaying: bool = False
    folded: bool = False
    retired: tuple[tuple[int, int], ...] = ()
    #: The lease of the running reindex/replay job: (job id, kind, valid until ms), or None.
    job: tuple[str, str, int] | None = None

    def newest(self) -> int:
        return max([self.live, self.building or 0, *(g for g, _ in self.retired)])

    def upcoming(self) -> int:
        """The generation the index roles prepare beside the live one: the one being built,
        else the one the next reindex or replay will build."""
        return self.building or self.newest() + 1

    def to_json(self) -> bytes:
        return dumps({"live": self.live, "building": self.building,
                      "replaying": self.replaying, "folded": self.folded,
                      "retired": [[g, at] for g, at in self.retired],
                      "job": list(self.job) if self.job else None})

    @classmethod
    def from_json(cls, raw: bytes) -> Lineup:
        data = loads(raw)
        return cls(live=int(data["live"]), building=data.get("building"),
                   replaying=bool(data.get("replaying")), folded=bool(data.get("folded")),
                   retired=tuple((int(g), int(at)) for g, at in data.get("retired", [])),
                   job=(str(job[0]), str(job[1]), int(job[2])) if (job := data.get("job"))
                   else None)


async def read_lineup(bootstrap: Connect, prefix: str) -> Lineup:
    """The latest lineup; generation 1 alone when none was ever published."""
    raw = await _control_records(bootstrap, control_topic(prefix), LINEUP_KEY, first=False)
    return Lineup.from_json(raw) if raw else Lineup()


async def publish_lineup(bootstrap: Connect, prefix: str, lineup: Lineup) -> None:
    producer = AIOKafkaProducer(**connect_kwargs(bootstrap), acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(control_topic(prefix), lineup.to_json(), key=LINEUP_KEY,
                                     partition=0)
    finally:
        await producer.stop()
