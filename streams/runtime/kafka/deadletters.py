"""Kafka runtime, dead letters for people: read `<p>.dead-letter` from its start to its end and
show each parked line the way the embedded dead-letter file does (`recall dead-letters`, the
web page's dead-letter list).

Letters are keyed per source line (`topic:partition:offset:line`), and a redelivered line is
parked again under the same key, so the list keeps one letter per key (the first). A letter from
a client-side import names its file and line (`import:<file>`, offset = line); one from the fold
names the events topic, partition and offset, and its line index inside the segment record.
"""

from __future__ import annotations

import base64
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.runtime.kafka.codec import dead_letter_key, decode_dead_letter
from streams.runtime.kafka.connection import Connect, connect_kwargs
from streams.runtime.kafka.topics import Topics

IMPORT_PREFIX = "import:"


def as_record(letter_bytes: bytes, timestamp_ms: int) -> dict[str, Any]:
    """One dead-letter record in the embedded file's shape (`source`, `line`, `code`, `reason`,
    `length`, `bytes` base64, `at`), plus where it lies in Kafka."""
    letter = decode_dead_letter(letter_bytes)
    original = letter.original_value()
    key = letter.original_key()
    if letter.topic.startswith(IMPORT_PREFIX):
        source, line = letter.topic[len(IMPORT_PREFIX):], letter.offset
    else:
        source, line = f"{letter.topic}[{letter.partition}]@{letter.offset}", letter.line
    return {"key": dead_letter_key(letter).decode("utf-8"), "source": source, "line": line,
            "sessionId": key.decode("utf-8", "replace") if key else None,
            "code": letter.code, "reason": letter.reason, "at": timestamp_ms,
            "length": None if original is None else len(original),
            "bytes": None if original is None else base64.b64encode(original).decode("ascii")}


async def read_dead_letters(bootstrap: Connect, topics: Topics) -> list[dict[str, Any]]:
    """Every letter on the dead-letter topic now, oldest first per partition, one per key."""
    consumer = AIOKafkaConsumer(**connect_kwargs(bootstrap), enable_auto_commit=False,
                                fetch_max_wait_ms=100, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topics.dead_letter, p) for p in range(topics.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        seen: set[str] = set()
        out: list[dict[str, Any]] = []
        while True:
            batches = await consumer.getmany(timeout_ms=300)
            for messages in batches.values():
                for message in messages:
                    if message.value is None:
                        continue
                    record = as_record(message.value, message.timestamp)
                    if record["key"] not in seen:
                        seen.add(record["key"])
                        out.append(record)
            if await _reached(consumer, ends):
                return out
    finally:
        await consumer.stop()


async def _reached(consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> bool:
    for tp, end in ends.items():
        if await consumer.position(tp) < end:
            return False
    return True
