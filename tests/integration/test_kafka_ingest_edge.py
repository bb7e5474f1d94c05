"""Integration: `recall ingest` over Kafka reads files at the embedded ingest's edge — capped
reading (a line over the cap parked as a bounded record, never published), a pending
unterminated last line, whole files parked (unsupported format, undecodable compression, an
importer that raised), the report's accounting balanced — and parks the same records there."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard
from datadirs import dead_letters
from factories import header, user

from streams.core.settings import Settings
from streams.facade import EmbeddedBackend, Recall
from streams.runtime.kafka.client import KafkaBackend
from streams.runtime.kafka.codec import decode_dead_letter
from streams.runtime.kafka.topics import Topics, bootstrap_servers
from tests.integration.kafkaio import read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def _boom(text: bytes, source: str) -> list[Any]:
    raise KeyError("a record this importer did not expect")


def _detect(path: Path, text: bytes) -> str | None:
    return "boom" if path.name.endswith(".boom.jsonl") else None


def _files(root: Path, limit: int) -> dict[str, Path]:
    root.mkdir(parents=True)
    lines = [header("edge", cwd="/w/edge"), user(0, "first"), user(1, "x" * (limit + 10)),
             user(2, "third")]
    native = root / "edge.jsonl"
    # the last line has no newline yet: a writer may still be appending it
    native.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n"
                       + orjson.dumps(user(3, "unterminated"))[:-1])
    unknown = root / "notes.jsonl"
    unknown.write_bytes(b"this is not a session log\n")
    whole = zstandard.ZstdCompressor().compress(b"\n".join(orjson.dumps(line)
                                                            for line in lines[:2]) + b"\n")
    broken = root / "cut.jsonl.zst"
    broken.write_bytes(whole[:len(whole) // 2])  # ends inside the frame, before any newline
    boom = root / "agent.boom.jsonl"
    boom.write_bytes(b'{"some": "record"}\n')
    return {"native": native, "unknown": unknown, "broken": broken, "boom": boom}


def _edge_letters(settings: Settings) -> list[Any]:
    topics = Topics.of(settings)
    records = asyncio.run(read_topic(bootstrap_servers(str(settings.broker)), topics.dead_letter,
                                     expect=4, timeout_s=10, settle_s=0.5,
                                     partitions=topics.partitions, distinct=False))
    return [decode_dead_letter(r.value or b"") for r in records]


def _published_lines(settings: Settings) -> list[bytes]:
    topics = Topics.of(settings)
    records = asyncio.run(read_topic(bootstrap_servers(str(settings.broker)), topics.events,
                                     expect=1, timeout_s=10, settle_s=0.5,
                                     partitions=topics.partitions, distinct=False))
    return [line for r in records for line in (r.value or b"").split(b"\n")]


def test_kafka_ingest_reads_files_at_the_embedded_edge(settings: Settings,
                                                        tmp_path: Path) -> None:
    limit = settings.max_event_bytes
    files = _files(tmp_path / "in", limit)
    importers = {"boom": _boom}
    backend = KafkaBackend(settings, importers=importers, detect=_detect)
    with Recall(backend, settings) as recall:
        report = recall.ingest([tmp_path / "in"]).to_json()
    # 4 native lines read + the pending one + 3 files parked whole
    assert report["accounting"] == {"linesRead": 8, "ingested": 3, "duplicatesSkipped": 0,
                                    "parked": 4, "pending": 1, "balanced": True}
    assert report["pendingSources"] == [str(files["native"].resolve())]
    assert report["rejectedByCode"] == {
        "INGEST_OVERSIZED_EVENT": 1, "INGEST_UNSUPPORTED_FORMAT": 1,
        "INGEST_CORRUPT_COMPRESSION": 1, "INGEST_IMPORTER_FAILED": 1}
    # published: the header and the lines under the cap, never the oversized or pending line
    published = _published_lines(settings)
    assert [orjson.loads(line).get("seq") for line in published] == [None, 0, 2]
    assert all(len(line) <= limit for line in published)
    letters = {letter.code: letter for letter in _edge_letters(settings)}
    assert set(letters) == set(report["rejectedByCode"])
    oversized = letters["INGEST_OVERSIZED_EVENT"]
    assert oversized.value is None and oversized.offset == 3  # line 3, kept bounded
    assert "blake2b-256" in oversized.reason and f"length {limit + 10}" not in oversized.reason
    for code, name in (("INGEST_UNSUPPORTED_FORMAT", "unknown"),
                       ("INGEST_CORRUPT_COMPRESSION", "broken"),
                       ("INGEST_IMPORTER_FAILED", "boom")):
        # parked whole: the file's bytes as on disk
        assert base64.b64decode(letters[code].value or "") == files[name].read_bytes(), code
        assert letters[code].topic == f"import:{files[name].resolve()}"
    # the importer's traceback is in the data dir's log, as with the embedded ingest
    assert "KeyError" in "".join(p.read_text() for p in (settings.data_dir / "log").iterdir())

    # the embedded ingest of the same files parks the same records at its edge
    local_settings = settings.model_copy(update={"broker": None,
                                                 "data_dir": tmp_path / "embedded"})
    with Recall(EmbeddedBackend(local_settings, importers=importers, detect=_detect),
                local_settings) as embedded:
        local = embedded.ingest([tmp_path / "in"]).to_json()
    assert local["pendingSources"] == report["pendingSources"]
    edge_codes = set(report["rejectedByCode"])
    assert {d["code"] for d in dead_letters(tmp_path / "embedded")} & edge_codes == edge_codes
