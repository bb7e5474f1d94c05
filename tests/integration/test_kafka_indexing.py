"""Integration: fold worker → documents topic → index consumer → shard files, and resume."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from factories import assistant, header, user

from indexer import IndexConfig, QueryService, ShardSet, shard_stats
from streams.kafka.indexing import DocumentIndexer, position_source
from streams.settings import Settings
from streams.topics import Topics, ensure_topics
from tests.integration.kafkaio import commit_group, produce, read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def wave(sid: str, seqs: range, *, with_header: bool) -> list[tuple[bytes, bytes]]:
    out = [(sid.encode(), orjson.dumps(header(sid)))] if with_header else []
    for seq in seqs:
        event = user(seq, f"{sid} asks about flaky pipeline {seq}") if seq % 2 == 0 else \
            assistant(seq, f"{sid} answers {seq}")
        out.append((sid.encode(), orjson.dumps(event)))
    return out


async def index_until(settings: Settings, shards: ShardSet, events: int,
                      timeout_s: float = 40.0) -> DocumentIndexer:
    indexer = DocumentIndexer(settings, shards)
    stop = asyncio.Event()
    task = asyncio.create_task(indexer.run(stop))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        while loop.time() < deadline and not task.done():
            if sum(s["events"] for s in shard_stats(shards)) >= events:
                await asyncio.sleep(0.5)  # anything extra would show up now
                break
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
    return indexer


def test_documents_are_indexed_per_shard_and_resume_from_the_shard_position(
        broker: Any, settings: Settings, worker_factory: Any, tmp_path: Path) -> None:
    topics = Topics.of(settings)
    asyncio.run(ensure_topics(broker.bootstrap, topics))
    worker = worker_factory(("fold",))  # this test runs the index consumer itself
    first = wave("ix-1", range(4), with_header=True) + wave("ix-2", range(3), with_header=True)
    asyncio.run(produce(broker.bootstrap, topics.events, first))

    shards = ShardSet(tmp_path / "index", IndexConfig(shards=settings.shards))
    try:
        asyncio.run(index_until(settings, shards, events=7))
        stats = shard_stats(shards)
        assert sum(s["events"] for s in stats) == 7, worker.log_tail()
        assert sum(s["sessions"] for s in stats) == 2
        hits = QueryService(shards).search_sessions({"query": "flaky pipeline"})
        assert {item["header"]["id"] for item in hits["items"]} == {"ix-1", "ix-2"}
        positions = {p: shards.tracking_position(position_source(topics.documents, p))
                     for p in range(settings.shards)}
        assert sum(v or 0 for v in positions.values()) == 9  # 2 headers + 7 events

        # A new consumer (same shards) resumes where the shards stopped: nothing twice.
        asyncio.run(produce(broker.bootstrap, topics.events,
                            wave("ix-1", range(4, 6), with_header=False)))
        again = asyncio.run(index_until(settings, shards, events=9))
        assert sum(s["events"] for s in shard_stats(shards)) == 9, worker.log_tail()
        assert again.stats["indexed"] == 2
    finally:
        shards.close()


def test_a_partition_new_to_a_worker_is_indexed_from_its_start_not_from_the_group_commit(
        broker: Any, settings: Settings, worker_factory: Any, tmp_path: Path) -> None:
    """aiokafka starts fetching a new assignment at the group's committed offsets before the
    assignment listener seeks; a worker without the shard must still index it from the start
    (measured on tansu: a moved partition indexed from the departed worker's commit, its
    sessions' headers missing)."""
    topics = Topics.of(settings)
    asyncio.run(ensure_topics(broker.bootstrap, topics))
    worker = worker_factory(("fold",))
    records = [r for i in range(8) for r in wave(f"mv-{i}", range(6), with_header=True)]
    asyncio.run(produce(broker.bootstrap, topics.events, records))
    docs = asyncio.run(read_topic(broker.bootstrap, topics.documents, expect=len(records),
                                  worker=worker))
    assert len(docs) == len(records), worker.log_tail()
    # another worker's commit: every partition's headers and most events behind it
    asyncio.run(commit_group(broker.bootstrap, topics.index_group, topics.documents,
                             topics.partitions, back=2))

    shards = ShardSet(tmp_path / "index", IndexConfig(shards=settings.shards))
    try:
        asyncio.run(index_until(settings, shards, events=8 * 6))
        stats = shard_stats(shards)
        assert sum(s["events"] for s in stats) == 8 * 6, worker.log_tail()
        listing = QueryService(shards).list_sessions()
        assert {item["header"]["id"] for item in listing} == {f"mv-{i}" for i in range(8)}
    finally:
        shards.close()
