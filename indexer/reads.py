"""Storage and read side: exact reads (PROTOCOL §3.1) — listing, session, surface, event windows,
traces and metadata filters — answered from the stored rows without refolding the surface."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from indexer.config import IndexConfig
from indexer.database import Conn
from indexer.errors import (
    EVENT_NOT_FOUND,
    INVALID_FILTER,
    INVALID_WINDOW,
    SESSION_NOT_FOUND,
    query_error,
)
from indexer.listing import (
    SummaryTitles,
    answer_shard_leaves,
    answer_shard_summaries,
    checked_limit,
    describe,
    listing_title,
    needs_summary,
    rows_by_id,
    shard_rows,
    sort_listing,
    title_parts,
    title_pattern,
)
from indexer.schema import SEQ, SURFACE, SURFACE_NAMES, TYPE
from indexer.shard import Shard
from indexer.shardset import ShardSet
from projections.codec import dumps, loads

# The event, filter, fold, transcript, lineage and digest reads import their modules (the
# block codec, filters, text extraction, ...) when first run: a listing (a short `recall`
# process) loads none of them.
if TYPE_CHECKING:
    from indexer.foldcache import FoldCache, FoldedLog

__all__ = ["SessionReads", "sort_listing"]

#: The largest page number, seq or page size a transcript read takes.
MAX_TRANSCRIPT_INT = (1 << 31) - 1


class SessionReads:
    """The non-search half of the query service."""

    def __init__(self, shardset: ShardSet, config: IndexConfig, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.shardset = shardset
        self.config = config
        self.clock = clock
        self.summary_titles = SummaryTitles()
        self._fold_cache: FoldCache | None = None

    @property
    def folded(self) -> FoldCache:
        """Folded logs kept per revision (a race at worst makes a second, unused cache)."""
        if self._fold_cache is None:
            from indexer.foldcache import FoldCache

            self._fold_cache = FoldCache()
        return self._fold_cache

    def _now_ms(self, now_ms: int | None) -> int:
        return int(self.clock() * 1000) if now_ms is None else now_ms

    def _live(self, last_event_time: int | None, now_ms: int) -> bool:
        return last_event_time is not None and now_ms - last_event_time <= self.config.live_window_ms

    @staticmethod
    def _session_on(conn: Conn, session_id: str) -> tuple[int, dict[str, Any]]:
        """The session's number in its shard and its header (SESSION_NOT_FOUND without one)."""
        row = conn.execute("SELECT no, header FROM sessions WHERE id = ? AND header IS NOT NULL",
                           (session_id,)).fetchone()
        if row is None:
            raise query_error(SESSION_NOT_FOUND, f"session {session_id!r} not found")
        value: dict[str, Any] = loads(row[1])
        return int(row[0]), value

    @classmethod
    def _header_on(cls, conn: Conn, session_id: str) -> dict[str, Any]:
        return cls._session_on(conn, session_id)[1]

    @contextmanager
    def _reading(self, session_id: str) -> Iterator[tuple[Shard, Conn]]:
        shard = self.shardset.shard_for(session_id)
        with shard.reader() as conn:
            yield shard, conn

    def summaries(self) -> dict[str, str]:
        """Session id → the title a Claude Code summary in any session's log gives it."""
        shards = list(self.shardset)
        return self.summary_titles.titles(
            len(shards),
            lambda known: [answer_shard_summaries(s, known[k]) for k, s in enumerate(shards)],
            lambda keys: [answer_shard_leaves(s, keys) for s in shards])

    def describe_rows(self, rows: list[dict[str, Any]], now_ms: int) -> list[dict[str, Any]]:
        """Listing records of shard rows (indexer/listing.py), in listing order."""
        summaries = self.summaries() if any(needs_summary(r) for r in rows) else {}
        return sort_listing([describe(r, self._live(r["lastEventTime"], now_ms), summaries)
                             for r in rows])

    def _listing(self, where: str, params: list[Any], now_ms: int,
                 limit: int | None = None, title: str | None = None) -> list[dict[str, Any]]:
        """With `limit`, each shard answers only its first `limit` rows in listing order: the
        first `limit` of their merge are the listing's. With `title`, the titles are matched
        first and only the matching sessions' rows are read."""
        shards = list(self.shardset)
        if title is not None:
            return self._titled(shards, where, params, now_ms, limit, title_pattern(title))
        rows: list[dict[str, Any]] = []
        for shard in shards:
            with shard.reader() as conn:
                rows.extend(shard_rows(conn, where, params, limit))
        records = self.describe_rows(rows, now_ms)
        return records if limit is None else records[:limit]

    def _titled(self, shards: list[Shard], where: str, params: list[Any], now_ms: int,
                limit: int | None, pattern: re.Pattern[str]) -> list[dict[str, Any]]:
        parts: list[list[dict[str, Any]]] = []
        for shard in shards:
            with shard.reader() as conn:
                parts.append(title_parts(conn, where, params))
        summaries = (self.summaries() if any(needs_summary(r) for part in parts for r in part)
                     else {})
        found: list[tuple[int, str, int]] = []
        for k, part in enumerate(parts):
            for row in part:
                text = listing_title(row, summaries)
                if text and pattern.search(str(text)):
                    found.append((-int(row["createdAt"]), str(row["id"]), k))
        found.sort()
        wanted: list[list[str]] = [[] for _ in shards]
        for _, session_id, k in found[:limit]:
            wanted[k].append(session_id)
        rows: list[dict[str, Any]] = []
        for shard, ids in zip(shards, wanted, strict=True):
            if ids:
                with shard.reader() as conn:
                    rows.extend(rows_by_id(conn, ids).values())
        return self.describe_rows(rows, now_ms)

    def list_sessions(self, *, now_ms: int | None = None, limit: int | None = None,
                      title: str | None = None) -> list[dict[str, Any]]:
        """`[{header, live, persisted, title, titleSource, agent, eventCount, firstEventTime,
        lastEventTime}]`, createdAt descending, then id ascending (the first `limit`; those
        whose title matches `title`: indexer/listing.py `title_pattern`)."""
        return self._listing("", [], self._now_ms(now_ms), checked_limit(limit), title)

    def _events(self, shard: Shard, conn: Conn, number: int) -> list[Any]:
        from indexer.blocks import iter_session_raws

        return [loads(raw) for _, raw in iter_session_raws(conn, shard.epoch, number)]

    def _folded(self, session_id: str) -> tuple[dict[str, Any], FoldedLog]:
        """The header and the folded log (FoldError if it does not fold), a large one kept per
        revision (indexer/foldcache.py)."""
        with self._reading(session_id) as (shard, conn):
            number, header = self._session_on(conn, session_id)
            revision, count = conn.execute(
                "SELECT revision, event_count FROM sessions WHERE no = ?", (number,)).fetchone()
            key = (shard.file, shard.epoch, number, int(revision))
            folded = self.folded.get(key, int(count), lambda: self._events(shard, conn, number))
        return header, folded

    def read_session(self, session_id: str) -> dict[str, Any]:
        """`{header, events}`; the log is validated by folding it (INVALID_SURFACE if broken).
        The events may be shared with other readers of the same revision: do not mutate them."""
        header, folded = self._folded(session_id)
        return {"header": header, "events": list(folded.events)}

    def read_surface(self, session_id: str) -> dict[str, Any]:
        """`{session, capturedThroughSeq, events}`: current-surface events in model order."""
        with self._reading(session_id) as (shard, conn):
            number, header = self._session_on(conn, session_id)
            top = conn.execute("SELECT top_seq FROM sessions WHERE no = ?", (number,)).fetchone()
            from indexer.blocks import read_raws
            from indexer.eventrows import session_rows

            rows = sorted(session_rows(conn, number, current_only=True),
                          key=lambda r: (r.order_key, r.seq))
            raws = read_raws(conn, shard.epoch, ((number, r.seq) for r in rows))
        last = int(top[0])
        return {"session": header, "capturedThroughSeq": None if last < 0 else last,
                "events": [loads(raws[(number, r.seq)]) for r in rows]}

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
        with self._reading(session_id) as (shard, conn):
            number, header = self._session_on(conn, session_id)
            if isinstance(seq, bool) or not isinstance(seq, int):
                raise query_error(EVENT_NOT_FOUND, f"event seq {seq!r} not found")
            from indexer.blocks import read_raws
            from indexer.eventrows import session_rows
            from indexer.text import text_of

            rows = session_rows(conn, number, seq - before, seq + after)
            raws = read_raws(conn, shard.epoch, ((number, r.seq) for r in rows))
        entries = {r.seq: {"event": loads(raws[(number, r.seq)]), "surface": r.surface,
                           "text": text_of(raws[(number, r.seq)])} for r in rows}
        if seq not in entries:
            raise query_error(EVENT_NOT_FOUND, f"event seq {seq} not found")
        return {"session": header, "event": entries[seq],
                "before": [entries[s] for s in sorted(entries) if s < seq],
                "after": [entries[s] for s in sorted(entries) if s > seq]}

    def read_transcript(self, request: dict[str, Any]) -> dict[str, Any]:
        """One page of the session's human transcript (indexer/transcript.py): `page` (from 1,
        clamped to the last), or the page holding seq `at`; `limit` entries a page."""
        session_id = request.get("sessionId")
        if not isinstance(session_id, str):
            raise query_error(INVALID_FILTER, "sessionId must be a string")
        page, at, limit = request.get("page", 1), request.get("at"), request.get("limit")
        for key, value, low in (("page", page, 1), ("at", at, 0), ("limit", limit, 1)):
            if (value is not None or key == "limit") and (
                    isinstance(value, bool) or not isinstance(value, int) or value < low
                    or value > MAX_TRANSCRIPT_INT):
                raise query_error(INVALID_FILTER, f"{key} must be an integer from {low} to "
                                  f"{MAX_TRANSCRIPT_INT}")
        with self._reading(session_id) as (shard, conn):
            number, header = self._session_on(conn, session_id)
            from indexer.transcript import transcript_page

            return transcript_page(conn, shard.epoch, number, header, page=int(page or 1),
                                   at=at, size=int(limit or 1))

    def trace_event(self, session_id: str, seq: int) -> dict[str, Any]:
        """`{session, seq, replacedBy, replacementChain, replacedEventSeqs, sourceEventSeqs,
        derivedEventSeqs}` (PROTOCOL §2, traceEvent), from the stored rows (indexer/trace.py):
        the log is not read whole."""
        from indexer.trace import trace_stored_event

        with self._reading(session_id) as (shard, conn):
            number, header = self._session_on(conn, session_id)
            traced = trace_stored_event(conn, shard.epoch, number, seq)
        return {"session": header, **traced.to_json()}

    def trace_session(self, session_id: str) -> dict[str, Any]:
        """`{session, ancestors, complete, root | unresolvedParentId, descendants}`: from the
        headers of the session's lineage alone (its parent chain by id, its descendants through
        the parent index), which are all `trace_lineage` reads of the whole set."""
        headers: dict[str, dict[str, Any]] = {}

        def add(rows: list[Any]) -> list[str]:
            keys = []
            for (raw,) in rows:
                header = loads(raw)
                keys.append(str(header["id"]))
                headers.setdefault(keys[-1], header)
            return keys

        wanted: Any = session_id
        while isinstance(wanted, str) and wanted not in headers:
            with self.shardset.shard_for(wanted).reader() as conn:
                found = add(conn.execute("SELECT header FROM sessions WHERE id = ?"
                                         " AND header IS NOT NULL", (wanted,)).fetchall())
            if not found:
                break
            wanted = headers[found[0]].get("parentSession")
        parents = [session_id] if session_id in headers else []
        expanded: set[str] = set()
        while parents:
            expanded.update(parents)
            children: list[str] = []
            for shard in self.shardset:
                with shard.reader() as conn:
                    children.extend(add(conn.execute(
                        "SELECT header FROM sessions WHERE parent IN"
                        " (SELECT value FROM json_each(?)) AND header IS NOT NULL",
                        (dumps(parents),)).fetchall()))
            parents = sorted(set(children) - expanded)
        from indexer.lineage import trace_lineage

        return trace_lineage(headers, session_id)

    def filter_sessions(self, filters: Any, *, now_ms: int | None = None,
                        limit: int | None = None,
                        title: str | None = None) -> list[dict[str, Any]]:
        """Sessions matching session filters (no full-text search), in listing order (the
        first `limit`; with `title`, those whose title matches it)."""
        from indexer.filters import check_budgets, compile_clauses, validate_filters

        now = self._now_ms(now_ms)
        clauses = validate_filters(filters, "session")
        check_budgets(clauses, within_session=False)
        sql, params = compile_clauses(clauses, live_since=now - self.config.live_window_ms)
        return self._listing(" AND ".join(sql), params, now, checked_limit(limit), title)

    def index_digest(self) -> dict[str, Any]:
        """Layout-independent digest of the whole index (indexer.digest)."""
        from indexer.digest import index_digest

        return index_digest(self.shardset)

    def filter_events(self, session_id: str, filters: Any) -> dict[str, Any]:
        """`{session, events: [{seq, type, time, surface, event}]}` in seq order; `text` clauses
        are a literal, case-insensitive, whitespace-flexible scan of the document text."""
        if not isinstance(session_id, str):
            raise query_error(INVALID_FILTER, "sessionId must be a string")
        from indexer.blocks import read_raws
        from indexer.filters import check_budgets, compile_clauses, text_clauses, validate_filters
        from indexer.text import text_of

        clauses = validate_filters(filters, "event", allow_text=True)
        check_budgets(clauses, within_session=True)
        sql, params = compile_clauses(clauses, live_since=0)
        texts = text_clauses(clauses)
        with self._reading(session_id) as (shard, conn):
            number, header = self._session_on(conn, session_id)
            where = " AND ".join(["x.session = ?", *sql])
            rows = conn.execute(
                f"SELECT e.id, {SEQ}, t.name, e.time, {SURFACE} FROM extents x"
                " JOIN events e ON e.id BETWEEN x.first AND x.first + x.size - 1"
                f" JOIN types t ON t.code = {TYPE} WHERE {where} ORDER BY x.seq, e.id",
                [number, *params]).fetchall()
            raws = read_raws(conn, shard.epoch, ((number, int(r[1])) for r in rows))
        events: list[dict[str, Any]] = []
        for _, seq, kind, t, surface in rows:
            raw = raws[(number, int(seq))]
            if texts and not all(c.pattern.search(text_of(raw)) for c in texts):
                continue
            events.append({"seq": int(seq), "type": kind, "time": t,
                           "surface": SURFACE_NAMES[int(surface)], "event": loads(raw)})
        return {"session": header, "events": events}

