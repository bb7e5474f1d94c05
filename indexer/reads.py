"""Storage and read side: exact reads (SPEC 3.1) — listing, session, surface, event windows,
traces and metadata filters — answered from the stored rows without refolding the surface."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

import orjson

from indexer.config import IndexConfig
from indexer.digest import index_digest
from indexer.errors import (
    EVENT_NOT_FOUND,
    INVALID_FILTER,
    INVALID_WINDOW,
    SESSION_NOT_FOUND,
    query_error,
)
from indexer.filters import (
    check_budgets,
    compile_clauses,
    text_clauses,
    validate_filters,
)
from indexer.lineage import trace_lineage
from indexer.shardset import ShardSet
from projections.fold import fold_surface
from projections.trace import trace_event as trace_log_event


def sort_listing(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(items, key=lambda i: (-int(i["header"].get("createdAt") or 0),
                                        str(i["header"]["id"])))


class SessionReads:
    """The non-search half of the query service."""

    def __init__(self, shardset: ShardSet, config: IndexConfig, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.shardset = shardset
        self.config = config
        self.clock = clock

    def _now_ms(self, now_ms: int | None) -> int:
        return int(self.clock() * 1000) if now_ms is None else now_ms

    def _live(self, last_event_time: int | None, now_ms: int) -> bool:
        return last_event_time is not None and now_ms - last_event_time <= self.config.live_window_ms

    @staticmethod
    def _header_on(conn: sqlite3.Connection, session_id: str) -> dict[str, Any]:
        row = conn.execute("SELECT header FROM sessions WHERE id = ? AND header IS NOT NULL",
                           (session_id,)).fetchone()
        if row is None:
            raise query_error(SESSION_NOT_FOUND, f"session {session_id!r} not found")
        value: dict[str, Any] = orjson.loads(row[0])
        return value

    def _conn(self, session_id: str) -> sqlite3.Connection:
        return self.shardset.shard_for(session_id).conn

    def _raw_events(self, conn: sqlite3.Connection, sql: str, params: list[Any]) -> list[Any]:
        return [orjson.loads(r[0]) for r in conn.execute(sql, params)]

    def _listing(self, where: str, params: list[Any], now_ms: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for shard in self.shardset:
            rows = shard.conn.execute(
                "SELECT s.header, s.last_event_time FROM sessions s WHERE s.header IS NOT NULL"
                + (f" AND {where}" if where else ""), params).fetchall()
            items.extend({"header": orjson.loads(h), "live": self._live(t, now_ms),
                          "persisted": True} for h, t in rows)
        return sort_listing(items)

    def list_sessions(self, *, now_ms: int | None = None) -> list[dict[str, Any]]:
        """`[{header, live, persisted}]`, createdAt descending, then id ascending."""
        return self._listing("", [], self._now_ms(now_ms))

    def read_session(self, session_id: str) -> dict[str, Any]:
        """`{header, events}`; the log is validated by folding it (INVALID_SURFACE if broken)."""
        conn = self._conn(session_id)
        header = self._header_on(conn, session_id)
        events = self._raw_events(conn, "SELECT raw FROM events WHERE session_id = ? ORDER BY seq",
                                  [session_id])
        fold_surface(events)
        return {"header": header, "events": events}

    def read_surface(self, session_id: str) -> dict[str, Any]:
        """`{session, capturedThroughSeq, events}`: current-surface events in model order."""
        conn = self._conn(session_id)
        header = self._header_on(conn, session_id)
        last = conn.execute("SELECT max(seq) FROM events WHERE session_id = ?",
                            (session_id,)).fetchone()[0]
        events = self._raw_events(
            conn, "SELECT raw FROM events WHERE session_id = ? AND surface = 'current'"
            " ORDER BY order_key", [session_id])
        return {"session": header, "capturedThroughSeq": last, "events": events}

    def _window_value(self, request: dict[str, Any], key: str) -> int:
        value = request.get(key, 0)
        if value is None:
            value = 0
        if (isinstance(value, bool) or not isinstance(value, int)
                or not 0 <= value <= self.config.read_window_max):
            raise query_error(INVALID_WINDOW, f"{key} must be an integer from 0 to "
                              f"{self.config.read_window_max}")
        return value

    def read_event(self, request: dict[str, Any]) -> dict[str, Any]:
        """`{session, event, before, after}`; each entry `{event, surface, text}`, windows clamped."""
        session_id = request.get("sessionId")
        if not isinstance(session_id, str):
            raise query_error(INVALID_FILTER, "sessionId must be a string")
        before = self._window_value(request, "before")
        after = self._window_value(request, "after")
        seq = request.get("seq")
        conn = self._conn(session_id)
        header = self._header_on(conn, session_id)
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise query_error(EVENT_NOT_FOUND, f"event seq {seq!r} not found")
        rows = conn.execute(
            "SELECT seq, raw, surface, text FROM events WHERE session_id = ? AND seq BETWEEN ? AND ?"
            " ORDER BY seq", (session_id, seq - before, seq + after)).fetchall()
        entries = {int(r[0]): {"event": orjson.loads(r[1]), "surface": r[2], "text": r[3]}
                   for r in rows}
        if seq not in entries:
            raise query_error(EVENT_NOT_FOUND, f"event seq {seq} not found")
        return {"session": header, "event": entries[seq],
                "before": [entries[s] for s in sorted(entries) if s < seq],
                "after": [entries[s] for s in sorted(entries) if s > seq]}

    def trace_event(self, session_id: str, seq: int) -> dict[str, Any]:
        """`{session, seq, replacedBy, replacementChain, replacedEventSeqs, sourceEventSeqs,
        derivedEventSeqs}` (SPEC 2, traceEvent)."""
        conn = self._conn(session_id)
        header = self._header_on(conn, session_id)
        events = self._raw_events(conn, "SELECT raw FROM events WHERE session_id = ? ORDER BY seq",
                                  [session_id])
        return {"session": header, **trace_log_event(events, seq).to_json()}

    def trace_session(self, session_id: str) -> dict[str, Any]:
        """`{session, ancestors, complete, root | unresolvedParentId, descendants}`."""
        headers: dict[str, dict[str, Any]] = {}
        for shard in self.shardset:
            for (raw,) in shard.conn.execute("SELECT header FROM sessions WHERE header IS NOT NULL"):
                header = orjson.loads(raw)
                headers[str(header["id"])] = header
        return trace_lineage(headers, session_id)

    def filter_sessions(self, filters: Any, *, now_ms: int | None = None) -> list[dict[str, Any]]:
        """Sessions matching session filters (no full-text search), in listing order."""
        now = self._now_ms(now_ms)
        clauses = validate_filters(filters, "session")
        check_budgets(clauses, within_session=False)
        sql, params = compile_clauses(clauses, live_since=now - self.config.live_window_ms)
        return self._listing(" AND ".join(sql), params, now)

    def index_digest(self) -> dict[str, Any]:
        """Layout-independent digest of the whole index (indexer.digest)."""
        return index_digest(self.shardset)

    def filter_events(self, session_id: str, filters: Any) -> dict[str, Any]:
        """`{session, events: [{seq, type, time, surface, event}]}` in seq order; `text` clauses
        are a literal, case-insensitive, whitespace-flexible scan of the document text."""
        if not isinstance(session_id, str):
            raise query_error(INVALID_FILTER, "sessionId must be a string")
        clauses = validate_filters(filters, "event", allow_text=True)
        check_budgets(clauses, within_session=True)
        conn = self._conn(session_id)
        header = self._header_on(conn, session_id)
        sql, params = compile_clauses(clauses, live_since=0)
        where = " AND ".join(["e.session_id = ?", *sql])
        texts = text_clauses(clauses)
        events: list[dict[str, Any]] = []
        for seq, kind, t, surface, text, raw in conn.execute(
                "SELECT e.seq, e.type, e.time, e.surface, e.text, e.raw FROM events e"
                f" WHERE {where} ORDER BY e.seq", [session_id, *params]):
            if all(c.pattern.search(text) for c in texts):
                events.append({"seq": seq, "type": kind, "time": t, "surface": surface,
                               "event": orjson.loads(raw)})
        return {"session": header, "events": events}
