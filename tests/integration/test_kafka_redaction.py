"""Integration (issue 18): the Kafka runtime redacts exactly like the embedded one — the same
redacted documents, reads, reference snapshot and index digest — and no secret reaches the
documents topic, the shard files or an answer (the events topic keeps the original)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from secretcorpus import planted_secrets, secret_fragments, secret_sessions, write_sessions

from streams.core.settings import Settings
from streams.facade import Recall
from streams.runtime.kafka.topics import Topics
from tests.integration.kafkaio import WorkerProcess, read_documents, read_topic
from tests.integration.test_kafka_contract import expected_counts, wait_indexed

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

FRAGMENTS = sorted({f for p in planted_secrets() for f in secret_fragments(p.value)})
KINDS = sorted({p.kind for p in planted_secrets()})
LEAKY = ["leak-prompts", "leak-results", "leak-calls", "leak-compacted"]


def leaked(value: Any) -> list[str]:
    text = value if isinstance(value, (str, bytes)) else orjson.dumps(value)
    data = text.encode() if isinstance(text, str) else text
    return [f for f in FRAGMENTS if f.encode() in data]


def answers(recall: Recall) -> dict[str, Any]:
    """What both runtimes must answer identically about the secret corpus."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        page = recall.search_sessions(f"[redacted:{kind}]", limit=10, now_ms=1)
        out[f"search:{kind}"] = page["items"]
    out["events:calls"] = recall.search_events("leak-calls", "redacted", limit=50)["items"]
    out["substring"] = recall.search_sessions("redacted:jwt", mode="substring", now_ms=1)["items"]
    for sid in LEAKY:
        out[f"session:{sid}"] = recall.read_session(sid)
        out[f"surface:{sid}"] = recall.read_surface(sid)
    out["event:compacted:3"] = recall.read_event("leak-compacted", 3, before=3, after=3)
    out["trace:compacted:4"] = recall.trace_event("leak-compacted", 4)
    out["reference"] = recall.prepare_reference(
        "clean-target", "what leaked?", dry_run=True, message_id="kafka-redaction",
        references=[{"sessionId": "leak-prompts"}, {"sessionId": "leak-compacted"}])
    return out


def test_kafka_redacts_exactly_like_embedded(
        broker: Any, settings: Settings, worker_factory: Callable[..., WorkerProcess],
        tmp_path: Path) -> None:
    files = write_sessions(tmp_path / "corpus", secret_sessions())
    # Substring (trigram) coverage from the start on both sides: this test is about redaction,
    # not about building that index on a first substring search.
    with Recall.open(tmp_path / "embedded", substring=True) as embedded:
        assert embedded.ingest(files).rejected == 0
        expected, expected_digest = answers(embedded), embedded.index_digest()
    assert leaked(expected) == []
    assert all(f"[redacted:{kind}]" in orjson.dumps(expected).decode() for kind in KINDS)

    # The suite's 4 KiB event limit would park the corpus's longest lines (PEM blocks, long
    # keys); both runtimes take them whole here, as the embedded one does by default.
    limit = 1024 * 1024
    worker = worker_factory(RECALL_SUBSTRING=1, RECALL_MAX_EVENT_BYTES=limit)
    settings = settings.model_copy(update={"max_event_bytes": limit})
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        report = recall.ingest(files)
        assert report.files == len(files) and report.rejected == 0, report.to_json()
        wait_indexed(recall, expected_counts(files), worker)
        result = answers(recall)
        assert orjson.dumps(result) == orjson.dumps(expected)
        assert recall.index_digest() == expected_digest
        for fragment in FRAGMENTS[::7]:
            for mode in ("token", "substring"):
                assert recall.search_sessions(fragment, mode=mode)["items"] == []

    topics = Topics.of(settings)
    events = sum(len(p.read_bytes().splitlines()) for p in files)
    documents = asyncio.run(read_documents(broker.bootstrap, topics.documents, expect=events,
                                           settle_s=0.5, partitions=settings.shards))
    assert len({d.key for d in documents}) == events
    assert leaked(b"".join(d.value or b"" for d in documents)) == []
    originals = asyncio.run(read_topic(broker.bootstrap, topics.events, expect=len(files),
                                       settle_s=0.5, partitions=settings.shards,
                                       distinct=False))
    assert leaked(b"".join(r.value or b"" for r in originals))  # the log keeps the original
    shard_files = list(Path(worker.env["RECALL_DATA_DIR"]).rglob("shard-*"))
    assert shard_files and not any(leaked(p.read_bytes()) for p in shard_files)
