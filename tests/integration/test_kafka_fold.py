"""Integration: the fold worker on a real broker — documents, dead letters, duplicates, restart."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import defaultdict
from typing import Any

import orjson
import pytest
from factories import assistant, checkpoint, header, log_only, tool_result, user

from projections.errors import (
    INGEST_DUPLICATE_CONFLICT,
    INGEST_INVALID_SURFACE,
    INGEST_MALFORMED_JSON,
    INGEST_MISSING_HEADER,
    INGEST_OVERSIZED_EVENT,
    INGEST_SCHEMA_VIOLATION,
    INGEST_SEQ_GAP,
)
from projections.records import EventRecord, HeaderRecord
from streams.core.settings import Settings
from streams.runtime.kafka.codec import decode_dead_letter, decode_document
from streams.runtime.kafka.topics import Topics, ensure_topics
from tests.integration.kafkaio import (
    Record,
    commit_group,
    produce,
    read_documents,
    read_topic,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def line(value: dict[str, Any]) -> bytes:
    return orjson.dumps(value)


def session(sid: str, count: int) -> list[tuple[bytes, bytes]]:
    """A valid session: header, then `count` events alternating user/assistant messages."""
    out = [(sid.encode(), line(header(sid)))]
    for seq in range(count):
        event = user(seq, f"{sid} question {seq}") if seq % 2 == 0 else assistant(
            seq, f"{sid} answer {seq}")
        out.append((sid.encode(), line(event)))
    return out


def documents_by_session(records: list[Record]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = defaultdict(list)
    for record in records:
        assert record.value is not None
        doc = decode_document(record.value)
        out[doc.session_id].append(doc)
    return out


def unique(records: list[Record]) -> dict[bytes | None, Record]:
    """Records by key; a key seen twice must carry the same value (replays are idempotent)."""
    out: dict[bytes | None, Record] = {}
    for record in records:
        if record.key in out:
            assert out[record.key].value == record.value, record.key
        out[record.key] = record
    return out


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_sessions_fold_to_documents_and_bad_records_to_dead_letters(
        broker: Any, settings: Settings, worker_factory: Any) -> None:
    topics = Topics.of(settings)
    bootstrap = broker.bootstrap
    # Topics exist before anyone produces: auto-creation would make 1-partition topics.
    run(ensure_topics(bootstrap, topics))
    started = time.monotonic()
    worker = worker_factory(("fold",))
    good = session("s-a", 6) + session("s-b", 3)
    # A compaction: 3 surface events, then compaction/start, summary, the checkpoint, end.
    compacted = [(b"s-c", line(header("s-c"))),
                 (b"s-c", line(user(0, "the CI failure stack trace"))),
                 (b"s-c", line(assistant(1, "looking at the traceback"))),
                 (b"s-c", line(tool_result(2, "Traceback: boom"))),
                 (b"s-c", line(log_only(3, "compaction/start", {"compactionId": "c1"}))),
                 (b"s-c", line(log_only(4, "compaction/summary", {"compactionId": "c1"}))),
                 (b"s-c", line(checkpoint(5, "summary of the CI failure", 0, 2, [3, 4, 0, 1, 2]))),
                 (b"s-c", line(log_only(6, "compaction/end", {"compactionId": "c1"})))]
    bad_surface = user(3, "bad op", op="prepend")
    run(produce(bootstrap, topics.events, good + compacted))
    # Records that must be parked, each after the good ones of its session.
    bad = [
        (b"s-a", b"{not json", INGEST_MALFORMED_JSON),
        (b"s-a", line({"type": "user/message", "seq": 6, "data": {}}), INGEST_SCHEMA_VIOLATION),
        (b"s-a", line(user(9, "a gap")), INGEST_SEQ_GAP),
        (b"s-a", line(user(2, "rewritten history")), INGEST_DUPLICATE_CONFLICT),
        (b"s-b", line(user(3, "x" * 5000)), INGEST_OVERSIZED_EVENT),
        (b"s-b", line(bad_surface), INGEST_INVALID_SURFACE),
        (b"s-z", line(user(0, "no header")), INGEST_MISSING_HEADER),
    ]
    exact_duplicates = [good[3], compacted[0], compacted[6]]
    run(produce(bootstrap, topics.events, [(k, v) for k, v, _ in bad] + exact_duplicates))
    # The worker keeps going after all of that: one more valid event is accepted.
    run(produce(bootstrap, topics.events, [(b"s-a", line(user(6, "s-a still alive")))]))

    expected_docs = len(good) + len(compacted) + 1
    docs = run(read_documents(bootstrap, topics.documents, expect=expected_docs, settle_s=1.5,
                          worker=worker))
    first_doc_s = time.monotonic() - started
    letters = run(read_topic(bootstrap, topics.dead_letter, expect=len(bad), settle_s=0.5))
    # Output is at-least-once: a replayed record yields a byte-identical document (same key).
    assert len(unique(docs)) == expected_docs, worker.log_tail()
    assert len(unique(letters)) == len(bad), worker.log_tail()
    docs = list(unique(docs).values())
    letters = list(unique(letters).values())

    by_session = documents_by_session(docs)
    for sid, count in (("s-a", 7), ("s-b", 3), ("s-c", 7)):
        got = by_session[sid]
        assert isinstance(got[0], HeaderRecord) and got[0].header["id"] == sid
        assert [d.seq for d in got[1:]] == list(range(count)), sid
    # One partition per session, the session's own: documents follow their source partition.
    source_partition = {}
    for record in run(read_topic(bootstrap, topics.events, expect=len(good) + len(compacted),
                                        distinct=False)):
        source_partition.setdefault(record.key, record.partition)
    for record in docs:
        sid = decode_document(record.value or b"").session_id
        assert record.partition == source_partition[sid.encode()]
        assert record.key is not None and record.key.startswith(f"{sid}:".encode())

    replacement_docs = [d for d in by_session["s-c"]
                        if isinstance(d, EventRecord) and d.replacement is not None]
    assert len(replacement_docs) == 1
    assert replacement_docs[0].seq == 5
    assert replacement_docs[0].replacement.shadowed_seqs == (0, 1, 2)
    assert "summary of the CI failure" in replacement_docs[0].text
    assert by_session["s-a"][-1].text.endswith("s-a still alive")

    parked = [decode_dead_letter(r.value or b"") for r in letters]
    assert sorted(p.code for p in parked) == sorted(code for _, _, code in bad)
    originals = {(k, v) for k, v, _ in bad}
    for letter in parked:
        assert (letter.original_key(), letter.original_value()) in originals
        assert letter.topic == topics.events and letter.reason
        assert letter.partition == source_partition.get(letter.original_key(), letter.partition)
    # Startup on this machine: spawn → every document of the first wave readable.
    print(f"\n{broker.name}: {expected_docs} documents readable {first_doc_s:.1f} s after spawn")


def test_restart_recovers_fold_state_from_the_changelog(
        broker: Any, settings: Settings, worker_factory: Any) -> None:
    topics = Topics.of(settings)
    bootstrap = broker.bootstrap
    run(ensure_topics(bootstrap, topics))
    first = worker_factory(("fold",))  # this file tests the fold role alone
    wave1 = session("r-1", 5) + session("r-2", 4)
    run(produce(bootstrap, topics.events, wave1))
    docs = run(read_documents(bootstrap, topics.documents, expect=len(wave1), worker=first))
    assert len(docs) == len(wave1), first.log_tail()
    time.sleep(1.0)  # let the changelog writes after the document acks reach the broker
    assert first.stop(signal.SIGTERM) == 0, first.log_tail()

    second = worker_factory(("fold",))
    # A fresh table would park these as "no header"; a recovered one takes seq 5 and 4, knows
    # seq 2 of r-1 (conflict) and sees the gap at r-2 seq 9.
    wave2 = [(b"r-1", line(assistant(5, "after restart"))),
             (b"r-2", line(user(4, "after restart too"))),
             (b"r-1", line(user(2, "different content for seq 2"))),
             (b"r-2", line(user(9, "a gap")))]
    run(produce(bootstrap, topics.events, wave2))
    docs = run(read_documents(bootstrap, topics.documents, expect=len(wave1) + 2, settle_s=1.0,
                          worker=second))
    letters = run(read_topic(bootstrap, topics.dead_letter, expect=2, settle_s=0.5))
    new = [decode_document(r.value or b"") for r in docs]
    assert len(unique(docs)) == len(wave1) + 2, second.log_tail()
    seqs = {(d.session_id, d.seq) for d in new if isinstance(d, EventRecord)}
    assert ("r-1", 5) in seqs and ("r-2", 4) in seqs
    # Dead letters are at-least-once like everything else (a rebalance may replay a record);
    # their key is the source position, so readers dedupe by it.
    parked = {r.key: decode_dead_letter(r.value or b"") for r in letters}
    assert sorted(p.code for p in parked.values()) == sorted(
        [INGEST_DUPLICATE_CONFLICT, INGEST_SEQ_GAP]), second.log_tail()
    assert {p.original_value() for p in parked.values()} == {wave2[2][1], wave2[3][1]}



def test_the_fold_resumes_at_its_table_positions_when_commits_ran_ahead(
        broker: Any, settings: Settings, worker_factory: Any) -> None:
    """faust was measured committing past records it never delivered (around rebalances). The
    fold resumes at the read positions kept in its table, not at the group's commits, so such a
    commit loses nothing."""
    topics = Topics.of(settings)
    bootstrap = broker.bootstrap
    run(ensure_topics(bootstrap, topics))
    first = worker_factory(("fold",))
    wave1 = session("c-1", 3) + session("c-2", 3) + session("c-3", 3)
    run(produce(bootstrap, topics.events, wave1))
    docs = run(read_documents(bootstrap, topics.documents, expect=len(wave1), worker=first))
    assert len(docs) == len(wave1), first.log_tail()
    time.sleep(1.0)  # let the changelog writes after the document acks reach the broker
    assert first.stop(signal.SIGTERM) == 0, first.log_tail()

    wave2 = [(sid, line(assistant(3, f"{sid.decode()} while stopped")))
             for sid in (b"c-1", b"c-2", b"c-3")]
    run(produce(bootstrap, topics.events, wave2))
    # the hole such a commit leaves: every partition committed at its end, past wave 2
    log = run(read_topic(bootstrap, topics.events, expect=len(wave1) + len(wave2),
                         distinct=False))
    ends = {p: 1 + max((r.offset for r in log if r.partition == p), default=-1)
            for p in range(topics.partitions)}
    committed = run(commit_group(bootstrap, topics.fold_app_id, topics.events, ends))
    assert sum(committed.values()) == len(wave1) + len(wave2)

    second = worker_factory(("fold",))
    docs = run(read_documents(bootstrap, topics.documents, expect=len(wave1) + len(wave2),
                          settle_s=1.0, worker=second))
    seqs = {(d.session_id, d.seq) for d in (decode_document(r.value or b"") for r in docs)
            if isinstance(d, EventRecord)}
    assert {(sid, 3) for sid in ("c-1", "c-2", "c-3")} <= seqs, second.log_tail()
    assert len(unique(docs)) == len(wave1) + len(wave2)
    assert run(read_topic(bootstrap, topics.dead_letter, expect=1, timeout_s=1.0)) == []
