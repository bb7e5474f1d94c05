"""Storage and read side: apply index records to one shard inside the caller's transaction.

Idempotent by (session_id, seq): the same record twice is a no-op, so replaying a topic from an
older position is harmless; a different record under an existing key is a SourceConflict.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable

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


def apply_records(conn: sqlite3.Connection, records: Iterable[IndexRecord], *,
                  substring: bool) -> bool:
    """Apply records in order; True if anything changed."""
    changed = False
    for record in records:
        if isinstance(record, HeaderRecord):
            changed = apply_header(conn, record) or changed
        else:
            changed = apply_event(conn, record, substring=substring) or changed
    return changed


def apply_positions(conn: sqlite3.Connection, positions: dict[str, int]) -> None:
    """Tracking moves forward only, so an older replay never rewinds it."""
    conn.executemany(
        "INSERT INTO tracking(source, position) VALUES (?, ?) ON CONFLICT(source) DO UPDATE"
        " SET position = max(position, excluded.position)", sorted(positions.items()))


def bump_generation(conn: sqlite3.Connection) -> None:
    conn.execute("UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
                 " WHERE key = 'generation'")
