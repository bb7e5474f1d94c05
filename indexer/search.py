"""Storage and read side: the per-shard half of a search (scatter). Input and output are JSON.

`search_shard(conn, plan)` returns the shard's top `fetch` candidates with their full ranking key
(and the `rowid` of their event row); `ranking.merge_page` combines shards. Snippets are made
per shard (the default: what a remote shard owner ships) or, with `plan["snippets"]` false, only
for the merged page's rows afterwards (`attach_snippets`, on the same connections).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
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


def _candidate(row: sqlite3.Row | tuple[Any, ...], matches: int) -> Candidate:
    rowid, sid, seq, kind, time, surface, length = row[:7]
    return {"sessionId": sid, "seq": seq, "type": kind, "time": time, "surface": surface,
            "length": length, "matches": matches, "rowid": rowid}


def _token_candidates(conn: sqlite3.Connection, plan: dict[str, Any]) -> list[Candidate]:
    where, params = _where(plan)
    sessions = plan["scope"] == "sessions"
    best = ("ranked AS (SELECT *, row_number() OVER (PARTITION BY sid ORDER BY mc DESC, len ASC,"
            " time DESC, seq DESC) AS rn FROM hits)" if sessions
            else "ranked AS (SELECT *, 1 AS rn FROM hits)")
    order = ("mc DESC, len ASC, time DESC, sid ASC, seq DESC" if sessions
             else "mc DESC, len ASC, time DESC, seq DESC")
    # The match count is the number of highlight spans: with an empty close marker, highlight()
    # is the text plus one open marker per span, so count = its length minus the text's (both
    # SQLite character counts, i.e. code points). Only these narrow rows are sorted; the marked
    # text is made for the winners only (`attach_snippets`). MATERIALIZED: evaluated once per
    # hit, not once per reference to `mc`.
    sql = (
        "WITH hits AS MATERIALIZED (SELECT e.rowid AS rid, e.session_id AS sid, e.seq AS seq,"
        " e.type AS type, e.time AS time, e.surface AS surface, e.text_len AS len,"
        " length(highlight(events_fts, 0, ?, '')) - length(e.text) AS mc"
        " FROM events_fts JOIN events e ON e.rowid = events_fts.rowid"
        " JOIN sessions s ON s.id = e.session_id"
        f" WHERE events_fts MATCH ? AND {where}), "
        f"{best} SELECT rid, sid, seq, type, time, surface, len, mc FROM ranked WHERE rn = 1"
        f" ORDER BY {order} LIMIT ?")
    bound = [HIGHLIGHT_OPEN, fts_phrase(plan["query"]), *params, int(plan["fetch"])]
    return [_candidate(r, int(r[7])) for r in conn.execute(sql, bound)]


def _trigram_candidates(conn: sqlite3.Connection, plan: dict[str, Any]) -> list[Candidate]:
    where, params = _where(plan)
    query = str(plan["query"])
    select = ("SELECT e.rowid, e.session_id, e.seq, e.type, e.time, e.surface, e.text_len, e.text"
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
        spans = substring_spans(str(row[7]), query)
        if spans:
            candidates.append(_candidate(row, len(spans)))
    if plan["scope"] == "sessions":
        candidates = best_per_session(candidates)
    return rank(candidates, plan["scope"])[:int(plan["fetch"])]


def _marked_texts(conn: sqlite3.Connection, plan: Mapping[str, Any],
                  rowids: list[int]) -> dict[int, str]:
    """rowid → the whole document with U+FDD0/U+FDD1 around each match (SPEC 3.7's input)."""
    marks = ",".join("?" * len(rowids))
    if plan["index"] == "token":
        rows = conn.execute(
            f"SELECT rowid, highlight(events_fts, 0, ?, ?) FROM events_fts"
            f" WHERE events_fts MATCH ? AND rowid IN ({marks})",
            [HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE, fts_phrase(plan["query"]), *rowids])
        return {int(r): str(h) for r, h in rows}
    query = str(plan["query"])
    rows = conn.execute(f"SELECT rowid, text FROM events WHERE rowid IN ({marks})", rowids)
    return {int(r): mark_spans(str(t), substring_spans(str(t), query)) for r, t in rows}


def attach_snippets(conn: sqlite3.Connection, plan: Mapping[str, Any],
                    candidates: list[Candidate]) -> None:
    """Fill in the `snippet` of candidates that `search_shard` found on this connection."""
    todo = [c for c in candidates if "snippet" not in c]
    if not todo:
        return
    marked = _marked_texts(conn, plan, sorted({int(c["rowid"]) for c in todo}))
    size = int(plan["snippetChars"])
    for c in todo:
        c["snippet"] = make_snippet(marked[int(c["rowid"])], size)


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
    """This shard's top `plan["fetch"]` candidates, ranked by the exact SPEC 3.6 key.

    With `plan["snippets"]` false the candidates carry no `snippet` yet: the caller merges the
    shards first and calls `attach_snippets` for the rows of the page only."""
    if plan["index"] == "token":
        candidates = _token_candidates(conn, plan)
    else:
        candidates = _trigram_candidates(conn, plan)
    if plan.get("snippets", True):
        attach_snippets(conn, plan, candidates)
    if plan["scope"] == "sessions":
        _attach_headers(conn, candidates)
    return candidates
