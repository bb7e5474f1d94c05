"""Integration: fold worker → documents topic → index consumer → shard files, and resume."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from factories import assistant, header, user

from indexer import IndexConfig, QueryService, ShardSet, shard_stats
from indexer.digest import index_digest
from streams.core.settings import Settings
from streams.runtime.kafka.codec import pack_documents
from streams.runtime.kafka.foldstep import FoldProcessor, Overlay
from streams.runtime.kafka.indexing import GATHER_S, DocumentIndexer, position_source
from streams.runtime.kafka.topics import Topics, ensure_topics
from tests.integration.kafkaio import produce, read_topic

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
        # every documents record (a session's documents of a fold batch) is behind its shard
        records = asyncio.run(read_topic(broker.bootstrap, topics.documents, expect=1,
                                         timeout_s=2.0, distinct=False))
        ends = {p: 1 + max((r.offset for r in records if r.partition == p), default=-1)
                for p in range(settings.shards)}
        assert {p: v or 0 for p, v in positions.items()} == ends

        # A new consumer (same shards) resumes where the shards stopped: nothing twice.
        asyncio.run(produce(broker.bootstrap, topics.events,
                            wave("ix-1", range(4, 6), with_header=False)))
        again = asyncio.run(index_until(settings, shards, events=9))
        assert sum(s["events"] for s in shard_stats(shards)) == 9, worker.log_tail()
        assert again.stats["indexed"] == 2  # documents, not records
    finally:
        shards.close()


def test_a_partition_new_to_a_worker_is_indexed_from_its_start_not_from_the_group_commit(
        broker: Any, settings: Settings, worker_factory: Any, tmp_path: Path) -> None:
    """aiokafka starts fetching a new assignment at the group's committed offsets before the
    assignment listener seeks; a worker without the shard must still index it from the start
    (not from the departed worker's commit, which would leave its sessions' headers out)."""
    topics = Topics.of(settings)
    asyncio.run(ensure_topics(broker.bootstrap, topics))
    worker = worker_factory(("fold",))
    sids = [f"mv-{i}" for i in range(8)]
    first = [r for sid in sids for r in wave(sid, range(3), with_header=True)]
    asyncio.run(produce(broker.bootstrap, topics.events, first))
    earlier = ShardSet(tmp_path / "earlier", IndexConfig(shards=settings.shards))
    try:  # the previous owner: indexes the first wave and commits the group's offsets
        asyncio.run(index_until(settings, earlier, events=len(sids) * 3))
        assert sum(s["events"] for s in shard_stats(earlier)) == len(sids) * 3
    finally:
        earlier.close()
    second = [r for sid in sids for r in wave(sid, range(3, 6), with_header=False)]
    asyncio.run(produce(broker.bootstrap, topics.events, second))

    shards = ShardSet(tmp_path / "index", IndexConfig(shards=settings.shards))
    try:  # a new owner without those shards: the group's commits point past every header
        asyncio.run(index_until(settings, shards, events=len(sids) * 6))
        assert sum(s["events"] for s in shard_stats(shards)) == len(sids) * 6, worker.log_tail()
        listing = QueryService(shards).list_sessions()
        assert {item["header"]["id"] for item in listing} == set(sids)
    finally:
        shards.close()


def test_a_caught_up_index_worker_merges_the_segments_its_writes_grew(
        broker: Any, settings: Settings, worker_factory: Any, tmp_path: Path) -> None:
    """Two rounds of documents, the second indexed in a transaction of its own: the shard's
    token index holds two segments until the worker, idle again, merges them (every term lookup
    probes every segment; indexer/segments.py). Answers stay the same. Each round is one
    segment record, so the fold folds it in one batch whenever it arrives (single records could
    be split across batches by their arrival, and each batch's documents are a transaction)."""
    from indexer.segments import read_structure

    topics = Topics.of(settings)
    asyncio.run(ensure_topics(broker.bootstrap, topics))
    worker = worker_factory(("fold",))
    shards = ShardSet(tmp_path / "index", IndexConfig(shards=settings.shards))
    shard = shards.shard_for("mg-1")

    def segments() -> int:
        with shard.reader() as conn:
            return read_structure(conn, "events_fts").segments

    async def scenario() -> list[int]:
        indexer = DocumentIndexer(settings, shards)
        stop = asyncio.Event()
        task = asyncio.create_task(indexer.run(stop))
        seen = []
        try:
            for n, (seqs, first) in enumerate(((range(0, 20), True), (range(20, 40), False))):
                lines = [value for _, value in wave("mg-1", seqs, with_header=first)]
                await produce(broker.bootstrap, topics.events, [(b"mg-1", b"\n".join(lines))])
                for _ in range(400):
                    if sum(s["events"] for s in shard_stats(shards)) >= 20 * (n + 1):
                        break
                    await asyncio.sleep(0.1)
                seen.append(segments())
            for _ in range(100):  # the merge runs once a fetch comes back empty
                if segments() == 1:
                    break
                await asyncio.sleep(0.1)
            seen.append(segments())
        finally:
            stop.set()
            await asyncio.wait_for(task, 20)
        return seen

    try:
        seen = asyncio.run(scenario())
        assert seen[0] == 1 and seen[-1] == 1, (seen, worker.log_tail())
        assert sum(s["events"] for s in shard_stats(shards)) == 40
        hits = QueryService(shards).search_events({"sessionId": "mg-1", "query": "flaky pipeline",
                                                   "limit": 50})
        assert sorted(h["seq"] for h in hits["items"]) == list(range(0, 40, 2))
    finally:
        shards.close()


def _documents(sid: str, events: int) -> list[bytes]:
    """A session's documents-topic values, as the fold writes them (header + events)."""
    lines = [orjson.dumps(header(sid))] + [
        orjson.dumps(user(seq, f"{sid} gathers flaky pipeline {seq}") if seq % 2 == 0 else
                     assistant(seq, f"{sid} answers {seq}")) for seq in range(events)]
    processor = FoldProcessor(max_event_bytes=1 << 20)
    lines_out = processor.fold_record(Overlay({}), sid.encode(), b"\n".join(lines))
    records = [doc for line in lines_out for doc in line.outcome.documents]
    return [value for _, value in pack_documents(records, 4096)]


def test_a_generation_being_built_is_written_in_fewer_larger_transactions(
        broker: Any, settings: Settings, tmp_path: Path) -> None:
    sessions = {f"gather-{n}": _documents(f"gather-{n}", 30) for n in range(16)}
    built: dict[str, Any] = {}
    for name, gather_s in (("at-once", 0.0), ("gathered", GATHER_S)):
        mine = settings.model_copy(update={"topic_prefix": f"{settings.topic_prefix}-{name}"})
        topics = Topics.of(mine)
        asyncio.run(ensure_topics(broker.bootstrap, topics))
        shards = ShardSet(tmp_path / name, IndexConfig(shards=settings.shards))
        writes: list[int] = []
        write_batch = shards.write_batch

        def counted(docs: Any, positions: Any, write_batch: Any = write_batch,
                    writes: list[int] = writes) -> bool:
            writes.append(len(docs))
            return bool(write_batch(docs, positions))

        shards.write_batch = counted  # type: ignore[method-assign]

        async def run(mine: Settings = mine, shards: ShardSet = shards,
                      gather_s: float = gather_s) -> None:
            indexer = DocumentIndexer(mine, shards)
            indexer.gather_s = gather_s
            stop = asyncio.Event()
            task = asyncio.create_task(indexer.run(stop))
            while not indexer.consumer.assignment():
                await asyncio.sleep(0.05)
            # documents arrive as a job produces them: one session every 40 ms
            # (keyed by session, aiokafka's default partitioner puts each session's documents
            # on the partition of its shard, as indexer.routing.shard_of computes it)
            for sid, values in sessions.items():
                await produce(broker.bootstrap, Topics.of(mine).documents,
                              [(sid.encode(), value) for value in values])
                await asyncio.sleep(0.04)
            for _ in range(400):
                if sum(s["events"] for s in shard_stats(shards)) >= 16 * 30:
                    break
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.wait_for(task, 20)

        try:
            asyncio.run(run())
            built[name] = (index_digest(shards.shards), [n for n in writes if n])
        finally:
            shards.close()
    (at_once, at_once_writes), (gathered, gathered_writes) = built["at-once"], built["gathered"]
    assert gathered == at_once and gathered["events"] == 16 * 30
    assert sum(at_once_writes) == sum(gathered_writes) == 16 * 31  # headers and events
    # written at once, each fetch is a write; gathered, what arrives within GATHER_S is one
    assert len(gathered_writes) < len(at_once_writes) / 2, (gathered_writes, at_once_writes)
