"""Storage and read side: apply index records to one shard inside the caller's transaction.

Idempotent by (session_id, seq): the same record twice is a no-op, so replaying a topic from an
older position is harmless; a different record under an existing key is a SourceConflict.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from indexer.blocks import BlockWriter, block_of, decode_block
from indexer.database import Conn
from indexer.errors import INDEX_FAILED, SourceConflict, query_error
from indexer.schema import (
    BLOCK_EVENTS,
    MAX_SESSIONS,
    SEQ_MASK,
    SHADOWED,
    SURFACE_CODES,
    document_id,
    event_id,
    session_range,
)
from projections.events import header_key_fields
from projections.extraction import extract_text
from projections.records import EventRecord, HeaderRecord, IndexRecord
from projections.surfaces import Surface

#: Han, kana, Hangul, CJK punctuation/compat and fullwidth forms: text unicode61 cannot split.
_CJK = re.compile("[\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff00-\uffef"
                  "\U00020000-\U0003ffff]")


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def text_of(raw: bytes) -> str:
    """The document text of a stored raw event (the index keeps no second copy of it)."""
    return extract_text(orjson.loads(raw))


class ShardWriter:
    """Writes into one shard (its writer connection), caching session numbers and type codes.

    The caches describe committed state plus the open transaction; `reset` after a rollback."""

    def __init__(self, conn: Conn, epoch: str, *, substring: bool) -> None:
        self.conn = conn
        self.epoch = epoch
        self.substring = substring
        self.blocks = BlockWriter(conn, epoch)
        self._sessions: dict[str, int] = {}
        self._types: dict[str, int] = {}
        self._next_doc: int | None = None

    def reset(self) -> None:
        self._sessions.clear()
        self._types.clear()
        self._next_doc = None
        self.blocks.reset()

    def next_document(self) -> int:
        """A new document number (dense: FTS5 stores rowid deltas)."""
        if self._next_doc is None:
            row = self.conn.execute("SELECT max(no) FROM docs").fetchone()
            self._next_doc = int(row[0] or 0) + 1
        number = self._next_doc
        self._next_doc += 1
        return number

    def session_no(self, session_id: str, *, create: bool = True) -> int | None:
        found = self._sessions.get(session_id)
        if found is not None:
            return found
        row = self.conn.execute("SELECT no FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            if not create:
                return None
            self.conn.execute("INSERT INTO sessions(id) VALUES (?)", (session_id,))
            number = int(self.conn.last_insert_rowid())
            if number >= MAX_SESSIONS:
                raise query_error(INDEX_FAILED, f"a shard holds at most {MAX_SESSIONS} sessions",
                                  hint="reindex with more shards (RECALL_SHARDS)")
        else:
            number = int(row[0])
        self._sessions[session_id] = number
        return number

    def type_code(self, name: str) -> int:
        found = self._types.get(name)
        if found is None:
            self.conn.execute("INSERT OR IGNORE INTO types(name) VALUES (?)", (name,))
            found = int(self.conn.execute("SELECT code FROM types WHERE name = ?",
                                          (name,)).fetchone()[0])
            self._types[name] = found
        return found

    def raw(self, event: int) -> bytes | None:
        return self.blocks.read(block_of(event)).get(event & (BLOCK_EVENTS - 1))


def _check_seq(record: EventRecord) -> None:
    if not 0 <= record.seq <= SEQ_MASK:
        raise query_error(INDEX_FAILED, f"seq {record.seq} of session {record.session_id!r} is "
                          f"outside the index's range 0..{SEQ_MASK}")


def apply_header(w: ShardWriter, record: HeaderRecord) -> bool:
    """Store a header; True if it changed the shard. Key-field disagreement is a SourceConflict."""
    header = dict(record.header)
    row = w.conn.execute("SELECT header FROM sessions WHERE id = ?",
                         (record.session_id,)).fetchone()
    if row is not None and row[0] is not None:
        if header_key_fields(orjson.loads(row[0])) != header_key_fields(header):
            raise SourceConflict(f"header of session {record.session_id!r} disagrees with the "
                                 "indexed header", session_id=record.session_id, seq=None)
        return False
    w.session_no(record.session_id)
    w.conn.execute(
        "UPDATE sessions SET header = ?, cwd = ?, created_at = ?, parent = ?, seed_length = ?,"
        " delegation_depth = ?, revision = revision + 1,"
        " last_event_time = COALESCE(last_event_time, ?) WHERE id = ?",
        (orjson.dumps(header, option=orjson.OPT_SORT_KEYS).decode("utf-8"), header.get("cwd"),
         header.get("createdAt"), header.get("parentSession"), header.get("seedLength"),
         header.get("delegationDepth") or 0, header.get("createdAt"), record.session_id))
    return True


def _start_order_key(w: ShardWriter, session: int, record: EventRecord,
                     pending: Callable[[int], Any] | None = None) -> int:
    """The surface position a replacement takes: its range start's (SPEC 2, step 5)."""
    rep = record.replacement
    assert rep is not None
    start = pending(rep.start) if pending is not None else None
    if start is None:
        row = w.conn.execute("SELECT order_key FROM events WHERE id = ?",
                             (event_id(session, rep.start),)).fetchone()
        start = None if row is None else row[0]
    if start is None:
        raise SourceConflict(f"replacement {record.seq} of session {record.session_id!r} starts "
                             f"at seq {rep.start}, which is not on the indexed surface",
                             session_id=record.session_id, seq=record.seq)
    return int(start)


def _insert_documents(w: ShardWriter, docs: list[tuple[int, int, str, bool]]) -> None:
    """Document rows and FTS entries for (document number, event id, text, cjk) of new events
    with text."""
    if not docs:
        return
    w.conn.executemany("INSERT INTO docs(no, event) VALUES (?, ?)", [(n, e) for n, e, _, _ in docs])
    w.conn.executemany("INSERT INTO events_fts(rowid, text) VALUES (?, ?)",
                       [(document_id(n, len(t)), t) for n, _, t, _ in docs])
    tri = [(document_id(n, len(t)), t) for n, _, t, cjk in docs if cjk or w.substring]
    if tri:
        w.conn.executemany("INSERT INTO events_tri(rowid, text) VALUES (?, ?)", tri)


def apply_event(w: ShardWriter, record: EventRecord) -> bool:
    """Store one event (its row, block entry and FTS entries); True if it changed the shard."""
    _check_seq(record)
    sid, seq = record.session_id, record.seq
    session = w.session_no(sid)
    assert session is not None
    eid = event_id(session, seq)
    stored = w.raw(eid)
    if stored is not None:
        if orjson.loads(stored) != orjson.loads(record.raw):
            raise SourceConflict(f"event {seq} of session {sid!r} differs from the indexed one",
                                 session_id=sid, seq=seq)
        return False
    order_key: int | None = seq if record.surface is Surface.CURRENT else None
    rep = record.replacement
    if rep is not None:
        order_key = _start_order_key(w, session, record)
        w.conn.executemany("UPDATE events SET surface = ? WHERE id = ?",
                           [(SHADOWED, event_id(session, s)) for s in rep.shadowed_seqs])
    cjk = has_cjk(record.text)
    doc = w.next_document() if record.text else None
    w.conn.execute("INSERT INTO events(id, type, time, surface, order_key, len, doc, cjk)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (eid, w.type_code(record.type), record.time, SURFACE_CODES[record.surface.value],
                    order_key, len(record.text), doc, int(cjk)))
    entries = w.blocks.read(block_of(eid))
    entries[eid & (BLOCK_EVENTS - 1)] = record.raw
    w.blocks.write({block_of(eid): entries})
    if doc is not None:
        _insert_documents(w, [(doc, eid, record.text, cjk)])
    w.conn.execute("UPDATE sessions SET event_count = event_count + 1, revision = revision + 1,"
                   " last_event_time = max(COALESCE(last_event_time, ?), ?) WHERE no = ?",
                   (record.time, record.time, session))
    return True


class _Appends:
    """A run of fresh appends — each event's seq above everything stored or already batched for
    its session — written with a few set-based statements instead of several per event.

    The rows, block entries, FTS entries, surfaces, order keys and session totals are exactly
    what `apply_event` one record at a time produces; replays and conflicts never enter a batch
    (the caller flushes and takes the per-row path for them)."""

    def __init__(self, w: ShardWriter) -> None:
        self.w = w
        self.rows: list[list[Any]] = []
        self.at: dict[int, int] = {}  # event id → index in rows
        self.raws: dict[int, dict[int, bytes]] = {}  # block → index in block → raw
        self.docs: list[tuple[int, int, str, bool]] = []
        self.totals: dict[int, list[int]] = {}  # session number → [events, latest time]
        self.top: dict[str, int] = {}  # session → highest seq stored or batched (-1: none)

    def is_fresh(self, record: EventRecord) -> bool:
        sid = record.session_id
        top = self.top.get(sid)
        if top is None:
            session = self.w.session_no(sid, create=False)
            stored = None
            if session is not None:
                lo, hi = session_range(session)
                stored = self.w.conn.execute("SELECT max(id) FROM events WHERE id BETWEEN ? AND ?",
                                             (lo, hi)).fetchone()[0]
            top = self.top[sid] = -1 if stored is None else int(stored) & SEQ_MASK
        return record.seq > top

    def add(self, record: EventRecord) -> None:
        _check_seq(record)
        w = self.w
        sid, seq = record.session_id, record.seq
        session = w.session_no(sid)
        assert session is not None
        eid = event_id(session, seq)
        order_key: int | None = seq if record.surface is Surface.CURRENT else None
        rep = record.replacement
        if rep is not None:
            def pending(start: int) -> Any:
                at = self.at.get(event_id(session, start))
                return None if at is None else self.rows[at][4]
            order_key = _start_order_key(w, session, record, pending)
            stored = []
            for shadowed in rep.shadowed_seqs:
                at = self.at.get(event_id(session, shadowed))
                if at is not None:
                    self.rows[at][3] = SHADOWED
                else:
                    stored.append((SHADOWED, event_id(session, shadowed)))
            w.conn.executemany("UPDATE events SET surface = ? WHERE id = ?", stored)
        text = record.text
        cjk = has_cjk(text) if text else False
        doc = w.next_document() if text else None
        self.at[eid] = len(self.rows)
        self.rows.append([eid, w.type_code(record.type), record.time,
                          SURFACE_CODES[record.surface.value], order_key, len(text), doc, int(cjk)])
        block = block_of(eid)
        entries = self.raws.get(block)
        if entries is None:
            entries = self.raws[block] = {}
            if self.top[sid] >= 0 and block_of(event_id(session, self.top[sid])) == block:
                entries.update(w.blocks.read(block))  # the session's last, partly filled block
        entries[eid & (BLOCK_EVENTS - 1)] = record.raw
        if doc is not None:
            self.docs.append((doc, eid, text, cjk))
        self.top[sid] = seq
        totals = self.totals.get(session)
        if totals is None:
            self.totals[session] = [1, record.time]
        else:
            totals[0] += 1
            totals[1] = max(totals[1], record.time)

    def flush(self) -> None:
        if not self.rows:
            return
        conn = self.w.conn
        conn.executemany("INSERT INTO events(id, type, time, surface, order_key, len, doc, cjk)"
                         " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", self.rows)
        self.w.blocks.write(self.raws)
        _insert_documents(self.w, self.docs)
        # max(COALESCE(t0, a), a, b, …) one event at a time == max(COALESCE(t0, m), m), m = max.
        conn.executemany("UPDATE sessions SET event_count = event_count + ?,"
                         " revision = revision + ?,"
                         " last_event_time = max(COALESCE(last_event_time, ?), ?) WHERE no = ?",
                         [(n, n, t, t, no) for no, (n, t) in self.totals.items()])
        self.rows, self.at, self.raws, self.docs, self.totals = [], {}, {}, [], {}


def apply_records(w: ShardWriter, records: Iterable[IndexRecord], *,
                  batched: bool = True) -> bool:
    """Apply records in order; True if anything changed.

    Runs of fresh appends go through `_Appends` (set-based; `batched=False` turns that off, for
    tests); headers, replays and conflicts are applied one at a time, after the run before them
    is written, so the order of effects is the per-record one."""
    changed = False
    appends = _Appends(w)
    for record in records:
        if batched and isinstance(record, EventRecord) and appends.is_fresh(record):
            appends.add(record)
            changed = True
            continue
        appends.flush()
        if isinstance(record, HeaderRecord):
            changed = apply_header(w, record) or changed
        else:
            changed = apply_event(w, record) or changed
    appends.flush()
    return changed


def apply_positions(conn: Conn, positions: dict[str, int]) -> None:
    """Tracking moves forward only, so an older replay never rewinds it."""
    conn.executemany(
        "INSERT INTO tracking(source, position) VALUES (?, ?) ON CONFLICT(source) DO UPDATE"
        " SET position = max(position, excluded.position)", sorted(positions.items()))


def bump_generation(conn: Conn) -> None:
    conn.execute("UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
                 " WHERE key = 'generation'")


def build_trigram(w: ShardWriter, progress: Callable[[int, int], None] | None = None,
                  batch: int = 5000) -> int:
    """Put every document not yet in the trigram index into it (substring mode on an index built
    without it) and mark the shard covered, in one transaction (a crash leaves it as it was).
    Returns the number of documents added. The caller holds the write lock."""
    conn = w.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        total = conn.execute("SELECT count(*) FROM events WHERE doc IS NOT NULL AND cjk = 0"
                             ).fetchone()[0]
        added = 0
        last = -1
        while True:
            rows = conn.execute("SELECT id, doc, len FROM events WHERE doc IS NOT NULL AND cjk = 0"
                                " AND id > ? ORDER BY id LIMIT ?", (last, batch)).fetchall()
            if not rows:
                break
            raws = _raws_by_block(w, [int(r[0]) for r in rows])
            conn.executemany("INSERT INTO events_tri(rowid, text) VALUES (?, ?)",
                             [(document_id(int(d), int(n)), text_of(raws[int(i)]))
                              for i, d, n in rows])
            last = int(rows[-1][0])
            added += len(rows)
            if progress is not None:
                progress(added, total)
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'substring'")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    w.substring = True
    return added


def _raws_by_block(w: ShardWriter, events: list[int]) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for block in sorted({block_of(e) for e in events}):
        row = w.conn.execute("SELECT data FROM blocks WHERE id = ?", (block,)).fetchone()
        if row is None:
            continue
        base = block << 4
        for index, raw in decode_block(w.conn, w.epoch, bytes(row[0])).items():
            out[base | index] = raw
    return out

