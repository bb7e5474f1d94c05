"""A brute-force reference of PROTOCOL §3.6–3.8 token search, for comparing the index against.

It knows nothing of the shard layout: every document goes into one plain (content-storing)
FTS5 table of the stdlib `sqlite3` module (a different SQLite build than the index's APSW), the
match count is the protocol's definition itself — the highlight markers in the whole document
(`length(highlight(…, OPEN, '')) - length(text)`) — and ranking, best-event-per-session,
filters and paging are spelled out in plain Python.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from indexer.normalize import fts_phrase, normalize_query
from indexer.snippet import make_snippet
from projections.extraction import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN, extract_text

Event = dict[str, Any]  # {sessionId, seq, type, time, surface, text}


def indexed_events(service: Any) -> list[Event]:
    """Every event of every session with a header, read back through the exact reads."""
    out: list[Event] = []
    for item in service.list_sessions():
        sid = item["header"]["id"]
        for e in service.filter_events(sid, [])["events"]:
            out.append({"sessionId": sid, "seq": e["seq"], "type": e["type"], "time": e["time"],
                        "surface": e["surface"], "text": extract_text(e["event"])})
    return out


def _passes(event: Event, filters: Iterable[Mapping[str, Any]]) -> bool:
    for f in filters:
        kind = f["kind"]
        if kind in ("type", "surface") and event[kind] not in f["values"]:
            return False
        if kind in ("seq", "time"):
            if f.get("from") is not None and event[kind] < f["from"]:
                return False
            if f.get("to") is not None and event[kind] > f["to"]:
                return False
    return True


def matches(events: list[Event], query: str) -> list[tuple[Event, int, str]]:
    """(event, match count, marked text) of every event whose document matches `query`."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE r USING fts5(text, tokenize='unicode61 remove_diacritics 2')")
    db.executemany("INSERT INTO r(rowid, text) VALUES (?, ?)",
                   [(i, e["text"]) for i, e in enumerate(events) if e["text"]])
    rows = db.execute("SELECT rowid, length(highlight(r, 0, ?, '')) - length(text),"
                      " highlight(r, 0, ?, ?) FROM r WHERE r MATCH ?",
                      (HIGHLIGHT_OPEN, HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE,
                       fts_phrase(normalize_query(query)))).fetchall()
    db.close()
    return [(events[i], count, marked) for i, count, marked in rows]


def _event_key(hit: tuple[Event, int, str]) -> tuple[int, int, int, int]:
    e, count, _ = hit
    return (-count, len(e["text"]), -e["time"], -e["seq"])


def search(events: list[Event], query: str, *, scope: str = "sessions",
           session_id: str | None = None, event_filters: Iterable[Mapping[str, Any]] = (),
           session_ok: Callable[[str], bool] = lambda sid: True,
           snippet_chars: int = 240) -> list[dict[str, Any]]:
    """The whole ranked result (every page concatenated) as `{sessionId, seq, type, time,
    surface, snippet}` hits: events in rank order, or each session's best event."""
    filters = list(event_filters)
    hits = [h for h in matches(events, query)
            if _passes(h[0], filters) and session_ok(h[0]["sessionId"])
            and (session_id is None or h[0]["sessionId"] == session_id)]
    if scope == "sessions":
        best: dict[str, tuple[Event, int, str]] = {}
        for h in hits:
            sid = h[0]["sessionId"]
            if sid not in best or _event_key(h) < _event_key(best[sid]):
                best[sid] = h
        ranked = sorted(best.values(), key=lambda h: (*_event_key(h)[:3], h[0]["sessionId"],
                                                      _event_key(h)[3]))
    else:
        ranked = sorted(hits, key=_event_key)
    return [{"sessionId": e["sessionId"], "seq": e["seq"], "type": e["type"], "time": e["time"],
             "surface": e["surface"], "snippet": make_snippet(marked, snippet_chars)}
            for e, _, marked in ranked]
