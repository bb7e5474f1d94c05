"""Storage and read side: apply index records to one shard inside the caller's transaction.

Idempotent by (session_id, seq): the same record twice is a no-op, so replaying a topic from an
older position is harmless; a different record under an existing key is a SourceConflict.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from typing import Any

import orjson

from indexer.errors import SourceConflict
from projections.events import header_key_fields
from projections.records import EventRecord, HeaderRecord, IndexRecord
from projections.surfaces import Surface

#: Han, kana, Hangul, CJK punctuation/compat and fullwidth forms: text unicode61 cannot split.
_CJK = re.compile("[\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff00-\uffef"
                  "\U00020000-\U0003ffff]")


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def _ensure_session(conn: sqlite3.Connection, session_id: str) -> None:
    conn.execute("INSERT OR IGNORE INTO sessions(id) VALUES (?)", (session_id,))


def apply_header(conn: sqlite3.Connection, record: HeaderRecord) -> bool:
    """Store a header; True if it changed the shard. Key-field disagreement is a SourceConflict."""
    header = dict(record.header)
    row = conn.execute("SELECT header FROM sessions WHERE id = ?", (record.session_id,)).fetchone()
    if row is not None and row[0] is not None:
        if header_key_fields(orjson.loads(row[0])) != header_key_fields(header):
            raise SourceConflict(f"header of session {record.session_id!r} disagrees with the "
                                 "indexed header", session_id=record.session_id, seq=None)
        return False
    _ensure_session(conn, record.session_id)
    conn.execute(
        "UPDATE sessions SET header = ?, cwd = ?, created_at = ?, parent = ?, seed_length = ?,"
        " delegation_depth = ?, revision = revision + 1,"
        " last_event_time = COALESCE(last_event_time, ?) WHERE id = ?",
        (orjson.dumps(header, option=orjson.OPT_SORT_KEYS).decode("utf-8"), header.get("cwd"),
         header.get("createdAt"), header.get("parentSession"), header.get("seedLength"),
         header.get("delegationDepth") or 0, header.get("createdAt"), record.session_id))
    return True


def apply_event(conn: sqlite3.Connection, record: EventRecord, *, substring: bool) -> bool:
    """Store an event row (and its FTS entries); True if it changed the shard."""
    sid, seq = record.session_id, record.seq
    row = conn.execute("SELECT raw FROM events WHERE session_id = ? AND seq = ?", (sid, seq)).fetchone()
    if row is not None:
        if orjson.loads(row[0]) != orjson.loads(record.raw):
            raise SourceConflict(f"event {seq} of session {sid!r} differs from the indexed one",
                                 session_id=sid, seq=seq)
        return False
    order_key: int | None = seq if record.surface is Surface.CURRENT else None
    rep = record.replacement
    if rep is not None:
        # The replacement takes the surface position of its range start (SPEC 2, step 5).
        start = conn.execute("SELECT order_key FROM events WHERE session_id = ? AND seq = ?",
                             (sid, rep.start)).fetchone()
        if start is None or start[0] is None:
            raise SourceConflict(f"replacement {seq} of session {sid!r} starts at seq {rep.start}, "
                                 "which is not on the indexed surface", session_id=sid, seq=seq)
        order_key = int(start[0])
        conn.executemany("UPDATE events SET surface = 'shadowed' WHERE session_id = ? AND seq = ?",
                         [(sid, s) for s in rep.shadowed_seqs])
    cjk = has_cjk(record.text)
    cur = conn.execute(
        "INSERT INTO events(session_id, seq, type, time, surface, order_key, text, text_len, cjk,"
        " raw) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (sid, seq, record.type, record.time, record.surface.value, order_key, record.text,
         len(record.text), int(cjk), record.raw))
    rowid = cur.lastrowid
    if record.text:
        conn.execute("INSERT INTO events_fts(rowid, text) VALUES (?, ?)", (rowid, record.text))
        if cjk or substring:
            conn.execute("INSERT INTO events_tri(rowid, text) VALUES (?, ?)", (rowid, record.text))
    _ensure_session(conn, sid)
    conn.execute("UPDATE sessions SET event_count = event_count + 1, revision = revision + 1,"
                 " last_event_time = max(COALESCE(last_event_time, ?), ?) WHERE id = ?",
                 (record.time, record.time, sid))
    return True


_INSERT_EVENT = ("INSERT INTO events(session_id, seq, type, time, surface, order_key, text,"
                 " text_len, cjk, raw) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


class _Appends:
    """A run of fresh appends — each event's seq above everything stored or already batched for
    its session — written with a few set-based statements instead of five per event.

    The rows, their rowids (inserted in record order), FTS entries, surfaces, order keys and
    session totals are exactly what `apply_event` one record at a time produces; replays and
    conflicts never enter a batch (the caller flushes and takes the per-row path for them)."""

    def __init__(self, conn: sqlite3.Connection, substring: bool) -> None:
        self.conn = conn
        self.substring = substring
        self.rows: list[list[Any]] = []
        self.at: dict[tuple[str, int], int] = {}  # (session, seq) → index in rows
        self.totals: dict[str, list[int]] = {}  # session → [events, latest time]
        self.top: dict[str, int] = {}  # session → highest seq stored or batched (-1: none)
        self.text = self.cjk = False

    def is_fresh(self, record: EventRecord) -> bool:
        sid = record.session_id
        top = self.top.get(sid)
        if top is None:
            stored = self.conn.execute("SELECT max(seq) FROM events WHERE session_id = ?",
                                       (sid,)).fetchone()[0]
            top = self.top[sid] = -1 if stored is None else int(stored)
        return record.seq > top

    def add(self, record: EventRecord) -> None:
        sid, seq = record.session_id, record.seq
        order_key: int | None = seq if record.surface is Surface.CURRENT else None
        rep = record.replacement
        if rep is not None:
            # The replacement takes the surface position of its range start (SPEC 2, step 5).
            at = self.at.get((sid, rep.start))
            if at is not None:
                start = self.rows[at][5]
            else:
                row = self.conn.execute("SELECT order_key FROM events WHERE session_id = ?"
                                        " AND seq = ?", (sid, rep.start)).fetchone()
                start = None if row is None else row[0]
            if start is None:
                raise SourceConflict(f"replacement {seq} of session {sid!r} starts at seq "
                                     f"{rep.start}, which is not on the indexed surface",
                                     session_id=sid, seq=seq)
            order_key = int(start)
            stored = []
            for shadowed in rep.shadowed_seqs:
                at = self.at.get((sid, shadowed))
                if at is not None:
                    self.rows[at][4] = "shadowed"
                else:
                    stored.append((sid, shadowed))
            self.conn.executemany("UPDATE events SET surface = 'shadowed' WHERE session_id = ?"
                                  " AND seq = ?", stored)
        cjk = has_cjk(record.text)
        self.at[(sid, seq)] = len(self.rows)
        self.rows.append([sid, seq, record.type, record.time, record.surface.value, order_key,
                          record.text, len(record.text), int(cjk), record.raw])
        self.top[sid] = seq
        self.text = self.text or bool(record.text)
        self.cjk = self.cjk or (cjk and bool(record.text))
        totals = self.totals.get(sid)
        if totals is None:
            self.totals[sid] = [1, record.time]
        else:
            totals[0] += 1
            totals[1] = max(totals[1], record.time)

    def flush(self) -> None:
        if not self.rows:
            return
        conn = self.conn
        # New rows get rowids above every existing one, in insertion (= record) order.
        last = conn.execute("SELECT max(rowid) FROM events").fetchone()[0] or 0
        conn.executemany(_INSERT_EVENT, self.rows)
        if self.text:
            conn.execute("INSERT INTO events_fts(rowid, text) SELECT rowid, text FROM events"
                         " WHERE rowid > ? AND text_len > 0 ORDER BY rowid", (last,))
        if self.substring or self.cjk:
            only_cjk = "" if self.substring else " AND cjk = 1"
            conn.execute("INSERT INTO events_tri(rowid, text) SELECT rowid, text FROM events"
                         f" WHERE rowid > ? AND text_len > 0{only_cjk} ORDER BY rowid", (last,))
        conn.executemany("INSERT OR IGNORE INTO sessions(id) VALUES (?)",
                         [(sid,) for sid in self.totals])
        # max(COALESCE(t0, a), a, b, …) one event at a time == max(COALESCE(t0, m), m), m = max.
        conn.executemany("UPDATE sessions SET event_count = event_count + ?,"
                         " revision = revision + ?,"
                         " last_event_time = max(COALESCE(last_event_time, ?), ?) WHERE id = ?",
                         [(n, n, t, t, sid) for sid, (n, t) in self.totals.items()])
        self.rows, self.at, self.totals = [], {}, {}
        self.text = self.cjk = False


def apply_records(conn: sqlite3.Connection, records: Iterable[IndexRecord], *,
                  substring: bool, batched: bool = True) -> bool:
    """Apply records in order; True if anything changed.

    Runs of fresh appends go through `_Appends` (set-based; `batched=False` turns that off, for
    tests); headers, replays and conflicts are applied one at a time, after the run before them
    is written, so the order of effects is the per-record one."""
    changed = False
    appends = _Appends(conn, substring)
    for record in records:
        if batched and isinstance(record, EventRecord) and appends.is_fresh(record):
            appends.add(record)
            changed = True
            continue
        appends.flush()
        if isinstance(record, HeaderRecord):
            changed = apply_header(conn, record) or changed
        else:
            changed = apply_event(conn, record, substring=substring) or changed
    appends.flush()
    return changed


def apply_positions(conn: sqlite3.Connection, positions: dict[str, int]) -> None:
    """Tracking moves forward only, so an older replay never rewinds it."""
    conn.executemany(
        "INSERT INTO tracking(source, position) VALUES (?, ?) ON CONFLICT(source) DO UPDATE"
        " SET position = max(position, excluded.position)", sorted(positions.items()))


def bump_generation(conn: sqlite3.Connection) -> None:
    conn.execute("UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
                 " WHERE key = 'generation'")
