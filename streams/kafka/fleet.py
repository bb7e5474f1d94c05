"""Transport: fleet-wide facts kept in the `<p>.control` topic (first record wins).

Query workers must accept each other's cursors, so they sign them with one key. The first
worker that finds no key produces one; everybody (that one included) then uses the *first* key
record in the topic, so two workers racing at start-up still agree.
"""

from __future__ import annotations

import contextlib
import secrets

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

CURSOR_KEY = b"cursor-key"


def control_topic(prefix: str) -> str:
    return f"{prefix}.control"


def shard_requests_topic(prefix: str) -> str:
    return f"{prefix}.shard-requests"


async def ensure_fleet_topics(bootstrap: str, prefix: str, partitions: int) -> None:
    """Create `<p>.control` (1 partition, compacted) and `<p>.shard-requests` (N partitions)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        # Not compacted: compaction keeps the *last* record of a key, and the first must win.
        wanted = [NewTopic(control_topic(prefix), 1, 1, topic_configs={"retention.ms": "-1"}),
                  NewTopic(shard_requests_topic(prefix), partitions, 1,
                           topic_configs={"retention.ms": str(3_600_000)})]
        missing = [t for t in wanted if t.name not in existing]
        if missing:
            with contextlib.suppress(Exception):  # a racing worker created it: fine
                await admin.create_topics(missing)
    finally:
        await admin.close()


async def _first_key(bootstrap: str, topic: str) -> bytes | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            for record in batch.get(tp, []):
                if record.key == CURSOR_KEY and record.value:
                    return bytes(record.value)
        return None
    finally:
        await consumer.stop()


async def fleet_cursor_key(bootstrap: str, prefix: str) -> bytes:
    """The fleet's cursor-signing key, created on first use."""
    topic = control_topic(prefix)
    key = await _first_key(bootstrap, topic)
    if key is not None:
        return key
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, secrets.token_bytes(32), key=CURSOR_KEY, partition=0)
    finally:
        await producer.stop()
    key = await _first_key(bootstrap, topic)
    assert key is not None
    return key
