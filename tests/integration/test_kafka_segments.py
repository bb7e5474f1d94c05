"""Integration: the events topic carries segments (a session's run of lines per record) — records
of mixed sizes, one event per record, and a bad line inside a segment — on a real broker."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from factories import fleet, header, user, write_fleet

from projections.errors import INGEST_MALFORMED_JSON, INGEST_SCHEMA_VIOLATION
from streams.core.settings import Settings
from streams.facade import Recall
from streams.runtime.kafka.codec import decode_dead_letter, encode_segment
from streams.runtime.kafka.topics import Topics, ensure_topics
from tests.integration.kafkaio import WorkerProcess, produce, read_topic
from tests.integration.test_kafka_contract import wait_indexed

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def _embedded_digest(tmp_path: Path, logs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    with Recall.open(tmp_path / "embedded", shards=4) as embedded:
        embedded.ingest(write_fleet(tmp_path / "logs", logs))
        return embedded.index_digest()


def _mixed_records(logs: dict[str, list[dict[str, Any]]],
                   rng: random.Random) -> list[tuple[bytes, bytes]]:
    """Every session cut at random points into runs of 1 to 12 lines, each run one record; half
    the sessions are sent one line per record (as a producer in another language would)."""
    records = []
    for n, (sid, lines) in enumerate(logs.items()):
        raw = [orjson.dumps(line) for line in lines]
        i = 0
        while i < len(raw):
            size = 1 if n % 2 else rng.randint(1, 12)
            records.append((sid.encode(), encode_segment(raw[i:i + size])))
            i += size
    return records


def test_segments_of_mixed_sizes_and_single_records_fold_like_the_embedded_runtime(
        broker: Any, settings: Settings, worker_factory: Callable[..., WorkerProcess],
        tmp_path: Path) -> None:
    logs = fleet(12, 30, prefix="seg")
    expected = _embedded_digest(tmp_path, logs)
    topics = Topics.of(settings)
    asyncio.run(ensure_topics(broker.bootstrap, topics))
    records = _mixed_records(logs, random.Random(17))
    sizes = {value.count(b"\n") + 1 for _, value in records}
    assert 1 in sizes and max(sizes) >= 8, sizes  # really mixed
    worker = worker_factory()
    asyncio.run(produce(broker.bootstrap, topics.events, records))
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        wait_indexed(recall, {sid: len(lines) - 1 for sid, lines in logs.items()}, worker)
        assert recall.index_digest() == expected
        # the same lines again, cut differently: every one is a duplicate, nothing changes
        again = _mixed_records(logs, random.Random(18))
        asyncio.run(produce(broker.bootstrap, topics.events, again))
        wait_indexed(recall, {sid: len(lines) - 1 for sid, lines in logs.items()}, worker)
        assert recall.index_digest() == expected
    assert asyncio.run(read_topic(broker.bootstrap, topics.dead_letter, expect=1,
                                  timeout_s=2.0)) == []


def test_a_bad_line_inside_a_segment_is_parked_alone_with_its_index(
        broker: Any, settings: Settings, worker_factory: Callable[..., WorkerProcess],
        tmp_path: Path) -> None:
    topics = Topics.of(settings)
    asyncio.run(ensure_topics(broker.bootstrap, topics))
    good = [header("bad-1"), user(0, "first"), user(1, "second"), user(2, "third")]
    lines = [orjson.dumps(good[0]), orjson.dumps(good[1]), b"{not json",
             orjson.dumps(good[2]), orjson.dumps({"type": "user/message", "seq": 3}),
             orjson.dumps(good[3])]
    worker = worker_factory()
    asyncio.run(produce(broker.bootstrap, topics.events, [(b"bad-1", encode_segment(lines))]))
    letters = asyncio.run(read_topic(broker.bootstrap, topics.dead_letter, expect=2,
                                     settle_s=1.0, worker=worker))
    # at least once: a redelivered record parks its line again under the same key
    parked = sorted({r.key: decode_dead_letter(r.value or b"") for r in letters}.values(),
                    key=lambda letter: letter.line)
    assert [(p.line, p.code) for p in parked] == [(2, INGEST_MALFORMED_JSON),
                                                  (4, INGEST_SCHEMA_VIOLATION)]
    assert [p.original_value() for p in parked] == [lines[2], lines[4]]
    assert [p.original_key() for p in parked] == [b"bad-1", b"bad-1"]
    assert {(p.topic, p.offset) for p in parked} == {(topics.events, 0)}
    assert {r.key for r in letters} == {
        f"{topics.events}:{p.partition}:0:{p.line}".encode() for p in parked}
    # the lines around them folded as if they had come alone
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        wait_indexed(recall, {"bad-1": 3}, worker)
        events = recall.read_session("bad-1")["events"]
        assert [e["seq"] for e in events] == [0, 1, 2]
