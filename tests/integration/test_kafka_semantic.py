"""Integration: the Kafka runtime's index role writes the same semantic vectors as the embedded
runtime's ingest — byte for byte, event by event — and a search by meaning answers the same:
within one session (its shard's owner) and across sessions (the coordinator's rounds over every
shard owner, indexer/scatter.py), page by page through the cursors, with filters."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.core.settings import Settings
from streams.facade import Recall
from tests.integration.kafkaio import WorkerProcess
from tests.integration.test_kafka_contract import expected_counts, wait_indexed

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

VECTORS = ("SELECT s.id, x.seq + v.event - x.first, group_concat(hex(v.v), '') FROM vectors v"
           " JOIN extents x ON v.event >= x.first AND v.event < x.first + x.size"
           " JOIN sessions s ON s.no = x.session GROUP BY v.event")
QUERIES = ("the build keeps failing", "how do I get started with the docs")
SESSION = "ci-followup-2025-12-01"
NOW = 1_800_000_000_000
#: Searches across sessions by meaning: every page (limit 1 or 2: several pages each).
ACROSS = (
    {"query": QUERIES[0], "mode": "semantic", "limit": 1},
    {"query": QUERIES[1], "mode": "hybrid", "limit": 1},
    {"query": "the build keeps failing", "mode": "hybrid", "limit": 2},
    {"query": QUERIES[0], "mode": "hybrid", "limit": 1,
     "sessionFilters": [{"kind": "cwd", "values": ["/home/dev/shop"]}],
     "eventFilters": [{"kind": "type", "values": ["user/message"]}]},
    {"query": QUERIES[1], "mode": "semantic", "limit": 1,
     "eventFilters": [{"kind": "type", "values": ["assistant/message"]}]},
)


def shard_vectors(data_dir: Path) -> dict[tuple[str, int], str]:
    """(session id, seq) → the event's vectors (hex, chunk after chunk) in a data dir's shards."""
    found: dict[tuple[str, int], str] = {}
    for path in sorted(data_dir.rglob("shard-*.sqlite")):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            for sid, seq, blob in conn.execute(VECTORS):
                found[(str(sid), int(seq))] = str(blob)
        finally:
            conn.close()
    return found


def digest(vectors: dict[tuple[str, int], str]) -> str:
    return hashlib.sha256(orjson.dumps(sorted(vectors.items()))).hexdigest()


def answers(recall: Recall) -> list[Any]:
    """One session's events by meaning (answered by the shard that holds the session)."""
    return [recall.search_events(SESSION, q, mode=mode, limit=5)["items"]
            for q in QUERIES for mode in ("semantic", "hybrid")]


def pages_across(recall: Recall) -> list[list[list[Any]]]:
    """Every page of each search across sessions, following its cursors."""
    out = []
    for request in ACROSS:
        pages: list[list[Any]] = []
        cursor = None
        while len(pages) < 20:
            page = recall.search_sessions(request={**request, **({"cursor": cursor} if cursor
                                                                  else {})}, now_ms=NOW)
            pages.append(page["items"])
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        out.append(pages)
    return out


def test_kafka_index_role_writes_the_embedded_runtimes_vectors(
        settings: Settings, worker_factory: Callable[..., WorkerProcess], tmp_path: Path,
        samples_dir: Path) -> None:
    files = sorted(samples_dir.glob("*.jsonl"))
    with Recall.open(tmp_path / "embedded", semantic=True) as embedded:
        assert embedded.ingest(files).rejected == 0
        expected_answers = answers(embedded)
        expected_across = pages_across(embedded)
    expected = shard_vectors(tmp_path / "embedded")
    assert len(expected) >= 10 and expected_answers[0]
    # several pages each, and the filters leave some hits but not every session's
    assert all(len(pages) >= 2 for pages in expected_across)
    filtered = {i["bestMatch"]["sessionId"] for page in expected_across[3] for i in page}
    assert filtered and "infra-kafka-2025-11-26" not in filtered

    worker = worker_factory(RECALL_SEMANTIC=1)
    semantic = settings.model_copy(update={"semantic": True})
    with Recall.connect(str(semantic.broker), settings=semantic) as recall:
        report = recall.ingest(files)
        assert report.files == len(files) and report.rejected == 0, report.to_json()
        wait_indexed(recall, expected_counts(files), worker)
        built = shard_vectors(Path(worker.env["RECALL_DATA_DIR"]))
        assert set(built) == set(expected)
        assert digest(built) == digest(expected)
        assert orjson.dumps(answers(recall)) == orjson.dumps(expected_answers)
        # across sessions: the coordinator's rounds over every shard owner rank as one process
        assert orjson.dumps(pages_across(recall)) == orjson.dumps(expected_across)
