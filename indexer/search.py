"""Storage and read side: the per-shard half of a search (scatter). Input and output are JSON.

`search_shard(conn, plan)` returns the shard's top `fetch` candidates with their full ranking key;
`ranking.merge_page` combines shards. A plan is what `plan_json` builds once per request.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from indexer.filters import compile_clauses, validate_filters
from indexer.normalize import fts_phrase
from indexer.ranking import Candidate, best_per_session, rank
from indexer.snippet import make_snippet, mark_spans, substring_spans
from indexer.writer import has_cjk
from projections.extraction import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN

#: Trigram MATCH needs 3 code points; shorter substring queries scan (CJK docs only by default).
TRIGRAM_MIN = 3


def choose_index(query: str, mode: str) -> str:
    """`token` (unicode61) unless substring mode was asked or the query holds CJK text."""
    return "trigram" if mode == "substring" or has_cjk(query) else "token"


def _where(plan: dict[str, Any]) -> tuple[str, list[Any]]:
    clauses = (validate_filters(plan["sessionFilters"], "session")
               + validate_filters(plan["eventFilters"], "event"))
    sql, params = compile_clauses(clauses, live_since=int(plan["liveSince"]))
    sql.insert(0, "s.header IS NOT NULL")
    if plan.get("sessionId") is not None:
        sql.insert(0, "e.session_id = ?")
        params.insert(0, plan["sessionId"])
    return " AND ".join(sql), params


def _candidate(row: sqlite3.Row | tuple[Any, ...], matches: int, marked: str,
               snippet_chars: int) -> Candidate:
    sid, seq, kind, time, surface, length = row[:6]
    return {"sessionId": sid, "seq": seq, "type": kind, "time": time, "surface": surface,
            "length": length, "matches": matches, "snippet": make_snippet(marked, snippet_chars)}


def _token_candidates(conn: sqlite3.Connection, plan: dict[str, Any]) -> list[Candidate]:
    where, params = _where(plan)
    sessions = plan["scope"] == "sessions"
    best = ("ranked AS (SELECT *, row_number() OVER (PARTITION BY sid ORDER BY mc DESC, len ASC,"
            " time DESC, seq DESC) AS rn FROM scored)" if sessions
            else "ranked AS (SELECT *, 1 AS rn FROM scored)")
    order = ("mc DESC, len ASC, time DESC, sid ASC, seq DESC" if sessions
             else "mc DESC, len ASC, time DESC, seq DESC")
    sql = (
        "WITH hits AS (SELECT e.session_id AS sid, e.seq AS seq, e.type AS type, e.time AS time,"
        " e.surface AS surface, e.text_len AS len, highlight(events_fts, 0, ?, ?) AS h"
        " FROM events_fts JOIN events e ON e.rowid = events_fts.rowid"
        " JOIN sessions s ON s.id = e.session_id"
        f" WHERE events_fts MATCH ? AND {where}),"
        " scored AS (SELECT *, length(h) - length(replace(h, ?, '')) AS mc FROM hits), "
        f"{best} SELECT sid, seq, type, time, surface, len, mc, h FROM ranked WHERE rn = 1"
        f" ORDER BY {order} LIMIT ?")
    bound = [HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE, fts_phrase(plan["query"]), *params, HIGHLIGHT_OPEN,
             int(plan["fetch"])]
    rows = conn.execute(sql, bound).fetchall()
    return [_candidate(r, int(r[6]), str(r[7]), int(plan["snippetChars"])) for r in rows]


def _trigram_candidates(conn: sqlite3.Connection, plan: dict[str, Any]) -> list[Candidate]:
    where, params = _where(plan)
    query = str(plan["query"])
    select = ("SELECT e.session_id, e.seq, e.type, e.time, e.surface, e.text_len, e.text"
              " FROM {src} JOIN sessions s ON s.id = e.session_id WHERE {cond} AND " + where)
    if len(query) >= TRIGRAM_MIN:
        sql = select.format(src="events_tri JOIN events e ON e.rowid = events_tri.rowid",
                            cond="events_tri MATCH ?")
        bound: list[Any] = [fts_phrase(query), *params]
    else:
        substring = conn.execute("SELECT value FROM meta WHERE key = 'substring'").fetchone()
        scope = "e.text_len > 0" if substring and substring[0] == "1" else "e.cjk = 1"
        sql = select.format(src="events e", cond=scope)
        bound = list(params)
    # The FTS side only narrows candidates; the exact match rule is the Python one below.
    candidates: list[Candidate] = []
    for row in conn.execute(sql, bound):
        spans = substring_spans(str(row[6]), query)
        if spans:
            candidates.append(_candidate(row, len(spans), mark_spans(str(row[6]), spans),
                                         int(plan["snippetChars"])))
    if plan["scope"] == "sessions":
        candidates = best_per_session(candidates)
    return rank(candidates, plan["scope"])[:int(plan["fetch"])]


def _attach_headers(conn: sqlite3.Connection, candidates: list[Candidate]) -> None:
    ids = [c["sessionId"] for c in candidates]
    if not ids:
        return
    rows = conn.execute(f"SELECT id, header, last_event_time FROM sessions WHERE id IN"
                        f" ({','.join('?' * len(ids))})", ids).fetchall()
    info = {r[0]: (orjson.loads(r[1]), r[2]) for r in rows}
    for c in candidates:
        c["header"], c["lastEventTime"] = info[c["sessionId"]]


def search_shard(conn: sqlite3.Connection, plan: dict[str, Any]) -> list[Candidate]:
    """This shard's top `plan["fetch"]` candidates, ranked by the exact SPEC 3.6 key."""
    if plan["index"] == "token":
        candidates = _token_candidates(conn, plan)
    else:
        candidates = _trigram_candidates(conn, plan)
    if plan["scope"] == "sessions":
        _attach_headers(conn, candidates)
    return candidates
