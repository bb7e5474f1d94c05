"""Unit: streams.runtime.kafka.foldstep, the per-record decisions of the Kafka fold agent (a dict as table)."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from factories import assistant, checkpoint, header, log_only, tool_result, user

from projections.errors import (
    INGEST_DUPLICATE_CONFLICT,
    INGEST_HEADER_CONFLICT,
    INGEST_INVALID_SURFACE,
    INGEST_MISSING_HEADER,
    INGEST_SCHEMA_VIOLATION,
    INGEST_SEQ_GAP,
    INGEST_UNKNOWN_EVENT_TYPE,
)
from projections.fold import SurfaceState, fold_surface
from projections.records import EventRecord, HeaderRecord, fold_records
from projections.redaction import KeyRule, Redactor, Rule
from streams.runtime.kafka.foldstep import (
    DIGEST_WINDOW,
    SEP,
    FoldOutcome,
    FoldProcessor,
    Overlay,
    digest,
    table_key,
)

SID = b"s1"


class Harness:
    """A processor over a dict table; `feed` applies writes exactly as the agent does."""

    def __init__(self) -> None:
        self.table: dict[str, bytes] = {}
        self.processor = FoldProcessor(max_event_bytes=4096)

    def feed(self, value: dict[str, Any] | bytes, key: bytes | None = SID) -> FoldOutcome:
        raw = value if isinstance(value, bytes) else orjson.dumps(value)
        out = self.processor.fold_line(self.table, key, raw)
        for k, v in out.writes.items():
            if v is None:
                self.table.pop(k, None)
            else:
                self.table[k] = v
        return out

    def code(self, value: dict[str, Any] | bytes, key: bytes | None = SID) -> str:
        before = dict(self.table)
        out = self.feed(value, key)
        assert out.rejection is not None and not out.writes and not out.documents
        assert self.table == before
        return out.rejection.code


def started(events: int = 0) -> Harness:
    h = Harness()
    h.feed(header("s1"))
    for seq in range(events):
        assert h.feed(user(seq, f"q{seq}")).documents
    return h


def test_header_then_events_become_records_in_order() -> None:
    h = Harness()
    out = h.feed(header("s1"))
    assert out.documents == [HeaderRecord("s1", header("s1"))]
    for seq in range(3):
        (doc,) = h.feed(user(seq, f"q{seq}") if seq != 1 else assistant(1, "a1")).documents
        assert isinstance(doc, EventRecord) and doc.seq == seq and doc.session_id == "s1"
    assert h.processor.stats["events"] == 3 and h.processor.stats["headers"] == 1


def test_compaction_is_one_record_carrying_its_replacement() -> None:
    h = started()
    events = [user(0, "a"), assistant(1, "b"), tool_result(2, "c"),
              log_only(3, "compaction/start"), log_only(4, "compaction/summary"),
              checkpoint(5, "summary", 0, 2, [3, 4, 0, 1, 2])]
    docs = [d for e in events for d in h.feed(e).documents]
    assert [d.replacement for d in docs[:5]] == [None] * 5
    assert docs[5].replacement is not None and docs[5].replacement.shadowed_seqs == (0, 1, 2)
    # The table's state equals the pure fold of the same log.
    state = h.processor._load(h.table, "s1")
    assert state is not None and state.state.nodes == fold_surface(events).nodes == [5]


def test_exact_duplicates_are_ignored_and_conflicts_parked() -> None:
    h = started(4)
    assert h.feed(user(2, "q2")).duplicates == 1
    assert h.feed(header("s1")).duplicates == 1
    assert h.code(user(2, "other text")) == INGEST_DUPLICATE_CONFLICT
    assert h.code(header("s1", cwd="/else")) == INGEST_HEADER_CONFLICT
    assert h.feed(user(4, "q4")).documents  # the session goes on


def test_duplicates_older_than_the_window_are_ignored_unverified() -> None:
    h = started(DIGEST_WINDOW + 2)
    assert h.feed(user(0, "changed")).duplicates == 1
    assert h.processor.stats["duplicates_unverified"] == 1


@pytest.mark.parametrize(("value", "code"), [
    (user(5, "gap"), INGEST_SEQ_GAP),
    (user(2, "bad op", op="prepend"), INGEST_INVALID_SURFACE),
    (log_only(2, "turn/start", surfaceOp="append"), INGEST_INVALID_SURFACE),
    (log_only(2, "made/up"), INGEST_UNKNOWN_EVENT_TYPE),
    ({"type": "user/message", "seq": 2}, INGEST_SCHEMA_VIOLATION),
    (header("other"), INGEST_SCHEMA_VIOLATION),
])
def test_bad_records_change_nothing(value: dict[str, Any], code: str) -> None:
    h = started(2)
    assert h.code(value) == code
    assert h.feed(user(2, "q2")).documents


def test_unknown_types_marked_ignorable_are_log_only() -> None:
    h = started(1)
    (doc,) = h.feed(log_only(1, "made/up", ignorable=True)).documents
    assert doc.surface.value == "log-only"


def test_keys_must_name_the_session() -> None:
    h = Harness()
    assert h.code(header("s1"), key=None) == INGEST_SCHEMA_VIOLATION
    assert h.code(header("s1"), key=b"\xff") == INGEST_SCHEMA_VIOLATION
    assert h.code(user(0, "x"), key=b"nobody") == INGEST_MISSING_HEADER


def test_packed_chunk_rows_fold_each_member_and_replay_as_duplicates() -> None:
    h = started(1)
    row = {"type": "text-chunks", "seq0": 1, "time0": 5,
           "members": [{"dt": 0, "data": {"d": "a"}}, {"dt": 1, "data": {"d": "b"}}]}
    assert [d.seq for d in h.feed(row).documents] == [1, 2]
    assert h.feed(row).duplicates == 2


def test_per_event_writes_stay_flat_as_the_session_grows() -> None:
    h = started()
    sizes = []
    for seq in range(300):
        out = h.feed(user(seq, "same length text"))
        sizes.append(sum(len(k) + len(v or b"") for k, v in out.writes.items()))
        assert len(out.writes) <= 3  # meta, tail page, digest slot
        assert list(out.writes)[-1] == table_key("s1", "m")  # meta last: the commit point
    assert max(sizes[200:]) <= max(sizes[:100]) + 8


def test_a_torn_append_is_undone_on_load() -> None:
    h = started(3)
    meta_before = h.table[table_key("s1", "m")]
    out = h.processor.fold_line(h.table, SID, orjson.dumps(user(3, "q3")))
    # Crash after the page was written, before the meta: the page has a node the meta lacks.
    for k, v in out.writes.items():
        if not k.endswith(SEP + "m"):
            h.table[k] = v  # type: ignore[assignment]
    assert h.table[table_key("s1", "m")] == meta_before
    fresh = Harness()
    fresh.table = h.table  # a new worker: empty cache, state from the table only
    assert [d.seq for d in fresh.feed(user(3, "q3")).documents] == [3]
    state = fresh.processor._load(fresh.table, "s1")
    assert state is not None and state.state.nodes == [0, 1, 2, 3]


def test_cache_follows_the_table_not_its_own_memory() -> None:
    h = started(2)
    other = Harness()
    other.table = h.table
    other.feed(user(2, "q2"))  # another worker advanced the session (after a rebalance)
    assert h.code(user(2, "stale view")) == INGEST_DUPLICATE_CONFLICT
    assert h.feed(user(3, "q3")).documents


def test_overlay_reads_pending_writes_and_drains_meta_last() -> None:
    table = {"a\x00m": b"old", "a\x00p0": b"p"}
    overlay = Overlay(table)
    overlay.put({"a\x00m": b"new", "a\x00d1": b"1:x", "a\x00p1": None})
    assert overlay.get("a\x00m") == b"new" and overlay.get("a\x00p0") == b"p"
    assert overlay.get("a\x00p1") is None
    drained = list(overlay.drain())
    assert drained[-1] == ("a\x00m", b"new")
    assert dict(drained) == {"a\x00m": b"new", "a\x00d1": b"1:x", "a\x00p1": None}
    assert overlay.pending == {}


# -- segments: a record carries one session's run of lines -----------------------------------

def _segment(*lines: dict[str, Any] | bytes) -> bytes:
    return b"\n".join(x if isinstance(x, bytes) else orjson.dumps(x) for x in lines)


def test_a_segment_folds_exactly_as_its_lines_sent_one_per_record() -> None:
    log = [header("s1"), user(0, "a"), assistant(1, "b"), tool_result(2, "c"),
           log_only(3, "compaction/start"), log_only(4, "compaction/summary"),
           checkpoint(5, "summary", 0, 2, [3, 4, 0, 1, 2]), user(6, "after")]
    singles = Harness()
    single_docs = [d for line in log for d in singles.feed(line).documents]
    table: dict[str, bytes] = {}
    overlay = Overlay(table)
    processor = FoldProcessor(max_event_bytes=4096)
    lines = processor.fold_record(overlay, SID, _segment(*log[:3]))
    lines += processor.fold_record(overlay, SID, _segment(*log[3:]))
    assert [line.number for line in lines] == [0, 1, 2, 0, 1, 2, 3, 4]
    assert [d for line in lines for d in line.outcome.documents] == single_docs
    table.update({k: v for k, v in overlay.drain() if v is not None})
    assert table == singles.table


def test_a_bad_line_inside_a_segment_is_rejected_alone_with_its_index() -> None:
    h = started(2)
    overlay = Overlay(h.table)
    lines = h.processor.fold_record(overlay, SID, _segment(
        user(2, "q2"), b"{not json", user(2, "conflicting q2"), user(3, "q3")))
    assert [(line.number, line.outcome.rejection.code if line.outcome.rejection else None)
            for line in lines] == [(0, None), (1, "INGEST_MALFORMED_JSON"),
                                   (2, INGEST_DUPLICATE_CONFLICT), (3, None)]
    assert lines[1].raw == b"{not json"
    assert [d.seq for line in lines for d in line.outcome.documents] == [2, 3]


def test_a_segment_redelivered_is_all_duplicates() -> None:
    h = started(1)
    segment = _segment(user(1, "q1"), assistant(2, "a2"))
    overlay = Overlay(h.table)
    assert [d.seq for line in h.processor.fold_record(overlay, SID, segment)
            for d in line.outcome.documents] == [1, 2]
    h.table.update({k: v for k, v in overlay.drain() if v is not None})
    again = h.processor.fold_record(Overlay(h.table), SID, segment)
    assert [line.outcome.duplicates for line in again] == [1, 1]
    assert not any(line.outcome.documents for line in again)


def test_a_long_segment_digests_only_its_window_yet_stores_what_single_records_store() -> None:
    # Digests are taken lazily (only for the events still in the window when the record's
    # writes are encoded); the stored window must be exactly the eager one.
    events = [user(seq, f"q{seq}") for seq in range(DIGEST_WINDOW * 3)]
    singles = started()
    for event in events:
        singles.feed(event)
    h = started()
    overlay = Overlay(h.table)
    h.processor.fold_record(overlay, SID, _segment(*events))
    h.table.update({k: v for k, v in overlay.drain() if v is not None})
    assert h.table == singles.table
    stored = orjson.loads(h.table[table_key("s1", "d")])
    assert stored == [2 * DIGEST_WINDOW, *(digest(orjson.dumps(e)) for e in events[-DIGEST_WINDOW:])]
    cached = h.processor._cache["s1"]
    assert all(isinstance(mark, str) for mark in cached.digests)  # no record bytes kept
    # a redelivery of the last event verifies against the stored digest; a changed one fails
    assert h.feed(events[-1]).duplicates == 1
    assert h.code(user(len(events) - 1, "changed")) == INGEST_DUPLICATE_CONFLICT


def test_a_segment_scanned_once_for_redaction_hints_redacts_as_event_by_event_does() -> None:
    # The fold skips redaction for the lines a single scan of the segment finds no hint in;
    # its documents must equal the embedded path's, which redacts every event on its own.
    token = Rule("demo-token", re.compile(r"tok_[a-z0-9]{12}"), hints=("tok_",), bounded=True)
    redactor = Redactor((token,), KeyRule("demo-key", re.compile(r"(?i).*secret"),
                                          lambda v: len(v) >= 6, hints=("secret", "Secret")))
    events = [user(0, "plain"), user(1, "key tok_abcdef123456 here"), assistant(2, "no hint"),
              tool_result(3, "tok_ but short"), user(4, "after")]
    spaced = orjson.dumps(user(5, "tok_zzzzzz999999")).replace(b'","', b'", "')
    quiet_spaced = orjson.dumps(user(6, "still plain")).replace(b'","', b'", "')
    processor = FoldProcessor(max_event_bytes=4096, redactor=redactor)
    table: dict[str, bytes] = {}
    overlay = Overlay(table)
    processor.fold_record(overlay, SID, orjson.dumps(header("s1")))
    lines = processor.fold_record(overlay, SID, _segment(*events, spaced, quiet_spaced))
    documents = [d for line in lines for d in line.outcome.documents]
    _, expected = fold_records("s1", SurfaceState(), [*events, orjson.loads(spaced),
                                                      orjson.loads(quiet_spaced)],
                               redactor=redactor)
    assert documents == expected
    assert [b"tok_abcdef123456" in d.raw or b"tok_zzzzzz999999" in d.raw
            for d in documents] == [False] * 7
    assert sum(b"[redacted:demo-token]" in d.raw for d in documents) == 2


def test_line_digests_keep_their_stored_form() -> None:
    # Fold tables in changelogs hold these digests: a change of form would turn every
    # redelivered line into a duplicate conflict.
    assert digest(b'{"type":"user/message","seq":0}') == "GTH9YJpe0xas"


def test_every_document_carries_the_events_compact_json_whatever_line_it_came_from() -> None:
    # a canonical line lends its own bytes, a packed member its own dump; any other line
    # (spaces, an exponent orjson writes differently) is dumped: the same bytes every way
    h = started(0)
    spaced = orjson.dumps(user(0, "a"), option=orjson.OPT_INDENT_2).replace(b"\n", b"")
    exponent = orjson.dumps(user(1, "b")).replace(b'"data":{', b'"data":{"n":1.0e3,')
    canonical = orjson.dumps(user(2, "c"))
    row = {"type": "text-chunks", "seq0": 3, "time0": 5,
           "members": [{"dt": 0, "data": {"d": "x"}}, {"dt": 1, "data": {"d": "y"}}]}
    docs = [d for line in (spaced, exponent, canonical, orjson.dumps(row))
            for d in h.feed(line).documents]
    assert [d.seq for d in docs] == [0, 1, 2, 3, 4]
    for doc in docs:
        assert isinstance(doc, EventRecord)
        assert doc.raw == orjson.dumps(orjson.loads(doc.raw))
    assert b" " not in docs[0].raw and b'"n":1000.0' in docs[1].raw
    assert docs[2].raw == canonical
