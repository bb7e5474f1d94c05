"""Storage and read side: apply index records to one shard inside the caller's transaction.

Idempotent by (session_id, seq): the same record twice is a no-op, so replaying a topic from an
older position is harmless; a different record under an existing key is a SourceConflict.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from indexer.blocks import BlockWriter, read_raws
from indexer.database import Conn
from indexer.errors import INDEX_FAILED, SourceConflict, query_error
from indexer.schema import (
    BLOCK_EVENTS,
    CJK,
    EVENT_JOINS,
    FIRST_EXTENT,
    MAX_EXTENT,
    MAX_SESSIONS,
    SEQ,
    SEQ_MASK,
    SHADOWED,
    SURFACE_CODES,
    block_id,
    document_id,
    kind,
)
from projections.events import header_key_fields
from projections.extraction import extract_text
from projections.records import EventRecord, HeaderRecord, IndexRecord
from projections.surfaces import Surface

#: Han, kana, Hangul, CJK punctuation/compat and fullwidth forms: text unicode61 cannot split.
_CJK = re.compile("[\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff00-\uffef"
                  "\U00020000-\U0003ffff]")


def has_cjk(text: str) -> bool:
    return not text.isascii() and _CJK.search(text) is not None


def text_of(raw: bytes) -> str:
    """The document text of a stored raw event (the index keeps no second copy of it)."""
    return extract_text(orjson.loads(raw))


class ShardWriter:
    """Writes into one shard (its writer connection), caching session numbers, type codes and
    extents. The caches describe committed state plus the open transaction; `reset` after a
    rollback."""

    def __init__(self, conn: Conn, epoch: str, *, substring: bool) -> None:
        self.conn = conn
        self.epoch = epoch
        self.substring = substring
        self.blocks = BlockWriter(conn, epoch)
        self._sessions: dict[str, int] = {}
        self._types: dict[str, int] = {}
        self._extents: dict[int, list[tuple[int, int, int]]] = {}  # no → [(seq, first, size)]
        self._next_id: int | None = None

    def reset(self) -> None:
        self._sessions.clear()
        self._types.clear()
        self._extents.clear()
        self._next_id = None
        self.blocks.reset()

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

    def _session_extents(self, session: int) -> list[tuple[int, int, int]]:
        found = self._extents.get(session)
        if found is None:
            found = self._extents[session] = [
                (int(a), int(b), int(c)) for a, b, c in self.conn.execute(
                    "SELECT seq, first, size FROM extents WHERE session = ? ORDER BY seq",
                    (session,))]
        return found

    def event_id(self, session: int, seq: int, *, allocate: bool = False) -> int | None:
        """The id of (session, seq): from its extent, or (`allocate`) from a new extent."""
        extents = self._session_extents(session)
        at = bisect.bisect_right(extents, (seq, 1 << 62, 0)) - 1
        if at >= 0:
            start, first, size = extents[at]
            if seq < start + size:
                return first + seq - start
        if not allocate:
            return None
        size = FIRST_EXTENT if not extents else min(MAX_EXTENT, 2 * extents[-1][2])
        if at + 1 < len(extents):  # filling a gap: never overlap the next extent
            size = min(size, extents[at + 1][0] - seq)
        if self._next_id is None:
            row = self.conn.execute("SELECT max(first + size) FROM extents").fetchone()
            self._next_id = int(row[0] or 1)
        first = self._next_id
        self._next_id += size
        self.conn.execute("INSERT INTO extents(first, session, seq, size) VALUES (?, ?, ?, ?)",
                          (first, session, seq, size))
        extents.insert(at + 1, (seq, first, size))
        return first

    def raw(self, session: int, seq: int) -> bytes | None:
        return self.blocks.read(block_id(session, seq)).get(seq & (BLOCK_EVENTS - 1))


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
        eid = w.event_id(session, rep.start)
        row = None if eid is None else w.conn.execute(
            "SELECT order_key FROM events WHERE id = ?", (eid,)).fetchone()
        start = None if row is None else row[0]
    if start is None:
        raise SourceConflict(f"replacement {record.seq} of session {record.session_id!r} starts "
                             f"at seq {rep.start}, which is not on the indexed surface",
                             session_id=record.session_id, seq=record.seq)
    return int(start)


def _shadow(w: ShardWriter, session: int, seqs: Iterable[int]) -> None:
    ids = [(eid,) for eid in (w.event_id(session, s) for s in seqs) if eid is not None]
    w.conn.executemany(f"UPDATE events SET kind = (kind & ~3) | {SHADOWED} WHERE id = ?", ids)


def _insert_documents(w: ShardWriter, docs: list[tuple[int, str, bool]]) -> None:
    """FTS entries for (event id, text, cjk) of new events with text."""
    if not docs:
        return
    w.conn.executemany("INSERT INTO events_fts(rowid, text) VALUES (?, ?)",
                       [(document_id(e, len(t)), t) for e, t, _ in docs])
    tri = [(document_id(e, len(t)), t) for e, t, cjk in docs if cjk or w.substring]
    if tri:
        w.conn.executemany("INSERT INTO events_tri(rowid, text) VALUES (?, ?)", tri)


_INSERT_EVENT = "INSERT INTO events(id, kind, time, order_key, len) VALUES (?, ?, ?, ?, ?)"
_TOTALS = ("UPDATE sessions SET event_count = event_count + ?, revision = revision + ?,"
           " last_event_time = max(COALESCE(last_event_time, ?), ?), top_seq = max(top_seq, ?)"
           " WHERE no = ?")


def apply_event(w: ShardWriter, record: EventRecord) -> bool:
    """Store one event (its row, block entry and FTS entries); True if it changed the shard."""
    _check_seq(record)
    sid, seq = record.session_id, record.seq
    session = w.session_no(sid)
    assert session is not None
    stored = w.raw(session, seq)
    if stored is not None:
        if orjson.loads(stored) != orjson.loads(record.raw):
            raise SourceConflict(f"event {seq} of session {sid!r} differs from the indexed one",
                                 session_id=sid, seq=seq)
        return False
    order_key: int | None = seq if record.surface is Surface.CURRENT else None
    rep = record.replacement
    if rep is not None:
        order_key = _start_order_key(w, session, record)
        _shadow(w, session, rep.shadowed_seqs)
    cjk = has_cjk(record.text)
    eid = w.event_id(session, seq, allocate=True)
    assert eid is not None
    w.conn.execute(_INSERT_EVENT, (eid, kind(w.type_code(record.type), cjk,
                                             SURFACE_CODES[record.surface.value]),
                                   record.time, order_key, len(record.text)))
    block = block_id(session, seq)
    entries = w.blocks.read(block)
    entries[seq & (BLOCK_EVENTS - 1)] = record.raw
    w.blocks.write({block: entries})
    if record.text:
        _insert_documents(w, [(eid, record.text, cjk)])
    w.conn.execute(_TOTALS, (1, 1, record.time, record.time, seq, session))
    return True


class _Appends:
    """A run of fresh appends — each event's seq above everything stored or already batched for
    its session — written with a few set-based statements instead of several per event.

    The rows, block entries, FTS entries, surfaces, order keys and session totals are exactly
    what `apply_event` one record at a time produces; replays and conflicts never enter a batch
    (the caller flushes and takes the per-row path for them)."""

    def __init__(self, w: ShardWriter) -> None:
        self.w = w
        self.rows: list[list[Any]] = []  # [id, type code, cjk, surface, time, order key, len]
        self.at: dict[tuple[int, int], int] = {}  # (session, seq) → index in rows
        self.raws: dict[int, dict[int, bytes]] = {}  # block → index in block → raw
        self.docs: list[tuple[int, str, bool]] = []
        self.totals: dict[int, list[int]] = {}  # session → [events, latest time, top seq]
        self.top: dict[str, int] = {}  # session → highest seq stored or batched (-1: none)

    def is_fresh(self, record: EventRecord) -> bool:
        sid = record.session_id
        top = self.top.get(sid)
        if top is None:
            row = self.w.conn.execute("SELECT top_seq FROM sessions WHERE id = ?",
                                      (sid,)).fetchone()
            top = self.top[sid] = -1 if row is None else int(row[0])
        return record.seq > top

    def add(self, record: EventRecord) -> None:
        _check_seq(record)
        w = self.w
        sid, seq = record.session_id, record.seq
        session = w.session_no(sid)
        assert session is not None
        order_key: int | None = seq if record.surface is Surface.CURRENT else None
        rep = record.replacement
        if rep is not None:
            def pending(start: int) -> Any:
                at = self.at.get((session, start))
                return None if at is None else self.rows[at][5]
            order_key = _start_order_key(w, session, record, pending)
            stored = []
            for shadowed in rep.shadowed_seqs:
                at = self.at.get((session, shadowed))
                if at is not None:
                    self.rows[at][3] = SHADOWED
                else:
                    stored.append(shadowed)
            _shadow(w, session, stored)
        text = record.text
        cjk = has_cjk(text) if text else False
        eid = w.event_id(session, seq, allocate=True)
        assert eid is not None
        self.at[(session, seq)] = len(self.rows)
        self.rows.append([eid, w.type_code(record.type), cjk,
                          SURFACE_CODES[record.surface.value], record.time, order_key, len(text)])
        block = block_id(session, seq)
        entries = self.raws.get(block)
        if entries is None:
            entries = self.raws[block] = {}
            top = self.top[sid]
            if top >= 0 and block_id(session, top) == block:
                entries.update(w.blocks.read(block))  # the session's last, partly filled block
        entries[seq & (BLOCK_EVENTS - 1)] = record.raw
        if text:
            self.docs.append((eid, text, cjk))
        self.top[sid] = seq
        totals = self.totals.get(session)
        if totals is None:
            self.totals[session] = [1, record.time, seq]
        else:
            totals[0] += 1
            totals[1] = max(totals[1], record.time)
            totals[2] = seq

    def flush(self) -> None:
        if not self.rows:
            return
        conn = self.w.conn
        conn.executemany(_INSERT_EVENT, [(r[0], kind(r[1], r[2], r[3]), r[4], r[5], r[6])
                                         for r in self.rows])
        self.w.blocks.write(self.raws)
        _insert_documents(self.w, self.docs)
        # max(COALESCE(t0, a), a, b, …) one event at a time == max(COALESCE(t0, m), m), m = max.
        conn.executemany(_TOTALS, [(n, n, t, t, top, no)
                                   for no, (n, t, top) in self.totals.items()])
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
    select = (f"SELECT e.id, x.session, {SEQ}, e.len FROM events e{EVENT_JOINS}"
              f" WHERE e.len > 0 AND {CJK} = 0")
    conn.execute("BEGIN IMMEDIATE")
    try:
        total = conn.execute(f"SELECT count(*) FROM events e WHERE e.len > 0 AND {CJK} = 0"
                             ).fetchone()[0]
        added = 0
        last = -1
        while True:
            rows = conn.execute(f"{select} AND e.id > ? ORDER BY e.id LIMIT ?",
                                (last, batch)).fetchall()
            if not rows:
                break
            raws = read_raws(conn, w.epoch, ((int(r[1]), int(r[2])) for r in rows))
            conn.executemany("INSERT INTO events_tri(rowid, text) VALUES (?, ?)",
                             [(document_id(int(e), int(n)), text_of(raws[(int(s), int(q))]))
                              for e, s, q, n in rows])
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
