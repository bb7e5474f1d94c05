"""Storage and read side: the per-shard half of a search (scatter). Input and output are JSON.

`search_shard(conn, epoch, plan)` returns the shard's top `fetch` candidates with their full
ranking key (and the `rowid` — event id — of their event); `ranking.merge_page` combines shards.
Snippets are made per shard (the default: what a remote shard owner ships) or, with
`plan["snippets"]` false, only for the merged page's rows afterwards (`attach_snippets`).

Token searches across sessions cost work bounded by the page, not by the hits (issue 16):
1. Floor pass: FTS5 walks the phrase's hits computing only the match count (no table lookup;
   the document id carries a length key) and keeps the best M by (count desc, length key asc)
   in a heap inside the compiled function (`recall_floor`/`recall_top`, indexer/matchcount.py):
   no row per hit leaves FTS5.
2. Let B be the (count, length key) of the M-th of them. T = the ones strictly better than B is
   exactly the set of all hits strictly better than B, and every hit in T beats every hit
   outside it on (count, length), the first two ranking fields (the length key is monotone in
   the length). So T holds each session's best hit if the session has a hit in T.
3. Only T — in fact only as much of it as the page needs (`bounded_top`) — is joined to events
   and sessions (filters, time, seq, session id) and ranked exactly. The query service runs
   step 1 on every shard and steps 2–3 once over all of them.
   If T yields `fetch` sessions (or events) the answer is exact: anything outside ranks after
   all of them. Otherwise M grows once, then the whole result is computed in one statement.
Searches within one session probe that session's documents instead.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any, NamedTuple

from indexer.blocks import decode_block, read_raws
from indexer.database import Conn
from indexer.filters import compile_clauses, validate_filters
from indexer.listing import ROW_COLUMNS, row_of, rows_by_id
from indexer.matchcount import query_tokens
from indexer.normalize import fts_phrase
from indexer.ranking import (
    EVENT_ORDER,
    SESSION_ORDER,
    Candidate,
    best_per_session,
    order_by,
    rank,
)
from indexer.schema import (
    BLOCK_BITS,
    BLOCK_EVENTS,
    CJK,
    EVENT_JOINS,
    LENGTH_BITS,
    SEQ,
    SEQ_BITS,
    SURFACE,
    SURFACE_NAMES,
    TYPE,
)
from indexer.snippet import highlight_texts, make_snippet, mark_spans, substring_spans
from indexer.text import has_cjk, text_of
from projections.codec import dumps

#: Trigram MATCH needs 3 code points; shorter substring queries scan (CJK docs only by default).
TRIGRAM_MIN = 3
#: Floor pass size: at least this many hits, or this many times `fetch`; then ×GROWTH once
#: (a floor pass costs the same whatever its size; only the rows joined cost more).
#: (Each floor row costs a table lookup, and each statement the cost of many lookups.)
FLOOR_MIN = 64
FLOOR_FACTOR = 4
GROWTH = 64
FILTERED_FACTOR = 16

#: The columns every candidate query selects, over aliases e (events), x (extents), s (sessions),
#: t (types).
_COLUMNS = f"e.id, s.id, {SEQ}, t.name, e.time, {SURFACE}, e.len, s.no"
#: What a page row needs besides: its session's listing row and its event's compressed block.
#: Read with the hits they belong to, they cost no statements of their own per shard.
_PAGE_COLUMNS = (f"{ROW_COLUMNS}, (SELECT data FROM blocks"
                 f" WHERE id = (s.no << {SEQ_BITS - BLOCK_BITS}) | ({SEQ} >> {BLOCK_BITS}))")
#: (SQLite's << >> & | share one precedence, left to right: hence the parentheses.)
#: The candidate key holding those values until the page is made (`make_snippets`,
#: `attach_headers`; `drop_page_data`): never part of an answer.
PAGE_DATA = "_page"
_TYPES = f" JOIN types t ON t.code = {TYPE}"
_JOINS = EVENT_JOINS + _TYPES


def choose_index(query: str, mode: str) -> str:
    """`token` (unicode61) unless substring mode was asked or the query holds CJK text."""
    return "trigram" if mode == "substring" or has_cjk(query) else "token"


def _where(plan: Mapping[str, Any]) -> tuple[str, list[Any]]:
    clauses = (validate_filters(plan["sessionFilters"], "session")
               + validate_filters(plan["eventFilters"], "event"))
    sql, params = compile_clauses(clauses, live_since=int(plan["liveSince"]))
    sql.insert(0, "s.header IS NOT NULL")
    if plan.get("sessionId") is not None:
        sql.insert(0, "s.id = ?")
        params.insert(0, plan["sessionId"])
    return " AND ".join(sql), params


def _candidate(row: Iterable[Any], matches: int) -> Candidate:
    rowid, sid, seq, kind, time, surface, length, number = tuple(row)[:8]
    return {"sessionId": sid, "seq": seq, "type": kind, "time": time,
            "surface": SURFACE_NAMES[int(surface)], "length": length, "matches": matches,
            "rowid": rowid, "sessionNo": number}


# --- token index ---------------------------------------------------------------------------------

#: No hit leaves FTS5: `recall_floor` keeps the best `size` keys in a heap as it walks them and
#: `recall_floor_take` hands them over, best first (indexer/_matchcount.c; an ORDER BY ... LIMIT
#: here cost a sorter row and a result row per hit, more than the walk itself).
_FLOOR = ("SELECT recall_floor_take(?3, n) FROM (SELECT count(*) AS n FROM events_fts"
          " WHERE events_fts MATCH ?1 AND recall_floor(events_fts, ?2, ?3))")
#: The same answer from one call that walks the hits itself (xQueryPhrase): less per hit, a
#: little more per pass (a second lookup of the phrase). For passes with many hits.
_TOP = "SELECT recall_top(events_fts, ?2) FROM events_fts WHERE events_fts MATCH ?1 LIMIT 1"
#: ... and the same answer read straight from the table's segment, for a phrase of up to
#: MAX_SCAN_TOKENS tokens (NULL when the table is not one merged segment; matchcount.py).
MAX_SCAN_TOKENS = 16
_SCANS = tuple("SELECT recall_scan(?" + ", ?" * n + ")" for n in range(MAX_SCAN_TOKENS + 1))
_tokens = itertools.count(1)


class Floor(NamedTuple):
    """One shard's floor pass: its best hits as (score, document id), best first, and whether
    they are all of its hits. score = count << LENGTH_BITS | (LENGTH_MASK - length key): larger
    is better, equal exactly when (count, length key) are."""

    rows: list[tuple[int, int]]
    complete: bool


def floor_pass(conn: Conn, phrase: str, size: int, *, walk: bool = False,
               tokens: Sequence[str] = ()) -> Floor:
    """Step 1: the shard's best `size` hits by (count desc, length key asc); `walk`: with
    `recall_top` (for a phrase with many hits). With the phrase's `tokens` (`query_tokens`),
    from `recall_scan` where it can answer: the same rows at a fraction of the cost per hit."""
    packed: bytes | None = None
    if 0 < len(tokens) <= MAX_SCAN_TOKENS:
        packed = conn.execute(_SCANS[len(tokens)], (size, *tokens)).fetchone()[0]
    if packed is None and walk:
        row = conn.execute(_TOP, (phrase, size)).fetchone()
        packed = b"" if row is None else row[0]
    elif packed is None:
        packed = conn.execute(_FLOOR, (phrase, size, next(_tokens))).fetchone()[0]
    values = struct.unpack(f"<{len(packed) // 8}q", packed)
    rows = list(zip(values[0::2], values[1::2], strict=True))
    return Floor(rows, len(rows) < size)


#: A floor pass over a doclist this many leaf pages long costs more than handing the shards to
#: threads does (search lanes, service.py); `recall_scan_pages` tells before the pass.
MANY_PAGES = 32
_SCAN_PAGES = tuple(f"SELECT recall_scan_pages({', '.join('?' * n)})"
                    for n in range(MAX_SCAN_TOKENS + 1))


def many_pages(conn: Conn, tokens: Sequence[str]) -> bool:
    """Whether the phrase's largest doclist spans MANY_PAGES leaf pages or more on this shard
    (False where `recall_scan` cannot read it): a floor pass worth threads from the start."""
    if not 0 < len(tokens) <= MAX_SCAN_TOKENS:
        return False
    pages = conn.execute(_SCAN_PAGES[len(tokens)], tuple(tokens)).fetchone()[0]
    return pages is not None and int(pages) >= MANY_PAGES


def floor_size(plan: Mapping[str, Any]) -> int:
    """Rows a floor pass keeps: a few pages' worth, more when filters will reject some (the
    pass costs about the same whatever it keeps; only the rows joined cost more)."""
    size = max(FLOOR_MIN, FLOOR_FACTOR * int(plan["fetch"]))
    return size * FILTERED_FACTOR if plan["sessionFilters"] or plan["eventFilters"] else size


def _join(conn: Conn, rows: list[tuple[int, int]], where: str, params: list[Any],
          page: bool) -> list[Candidate]:
    """Candidates for floor rows (score, document id) that pass the filters; `page`: with
    their PAGE_DATA."""
    ids = {d >> LENGTH_BITS: score >> LENGTH_BITS for score, d in rows}
    columns = f"{_COLUMNS}, {_PAGE_COLUMNS}" if page else _COLUMNS
    found = conn.execute(f"SELECT {columns} FROM events e{_JOINS}"
                         f" WHERE e.id IN (SELECT value FROM json_each(?)) AND {where}",
                         [dumps(list(ids)), *params])
    if not page:
        return [_candidate(r, ids[int(r[0])]) for r in found]
    out = []
    for r in found:
        c = _candidate(r, ids[int(r[0])])
        c[PAGE_DATA] = r[8:]
        out.append(c)
    return out


def _score(row: tuple[int, int]) -> int:
    return -row[0]  # (bisect wants ascending keys; floor rows are best first)


def _tagged(shard: int, rows: list[tuple[int, int]]) -> Iterator[tuple[int, int, int]]:
    for score, d in rows:
        yield score, shard, d


def bounded_top(conns: Sequence[Conn], floors: Sequence[Floor],
                plan: Mapping[str, Any]) -> list[Candidate] | None:
    """Steps 2–3 over one or several shards: the exact top `fetch` candidates of all of them,
    or None when their floor passes do not hold `fetch` results.

    The floor rows of all shards, merged by (count, length key), are cut before the best M-th
    key of an incomplete shard: what remains is every hit strictly better than that key. Any
    prefix of it ending where the key changes is again "every hit strictly better than the next
    row", so it is joined a prefix at a time (doubling): a page needs little more than `fetch`
    rows, whichever shards they are in. The merge is lazy: only the rows joined are touched."""
    where, params = _where(plan)
    fetch = int(plan["fetch"])
    page = not plan.get("snippets", True)  # the caller makes the page's snippets and headers
    cut = max((f.rows[-1][0] for f in floors if not f.complete), default=None)
    streams = [_tagged(k, f.rows if cut is None
                       else f.rows[:bisect.bisect_left(f.rows, -cut, key=_score)])
               for k, f in enumerate(floors)]
    merged = heapq.merge(*streams, key=itemgetter(0), reverse=True)
    pending = next(merged, None)
    found: list[Candidate] = []
    batch = fetch + fetch // 4 + 1
    joined = 0
    while True:
        chunk: list[tuple[int, int, int]] = []
        while pending is not None and (len(chunk) < batch or pending[0] == chunk[-1][0]):
            chunk.append(pending)  # (a group of equal keys is never split)
            pending = next(merged, None)
        by_shard: dict[int, list[tuple[int, int]]] = {}
        for score, k, d in chunk:
            by_shard.setdefault(k, []).append((score, d))
        for k, rows in by_shard.items():
            found.extend(_join(conns[k], rows, where, params, page))
        joined += len(chunk)
        ranked = best_per_session(found) if plan["scope"] == "sessions" else found
        if len(ranked) >= fetch or (pending is None and cut is None):
            return rank(ranked, plan["scope"])[:fetch]
        if pending is None:
            return None
        batch = joined  # doubling


def _bounded(conn: Conn, plan: Mapping[str, Any], phrase: str) -> list[Candidate] | None:
    """Steps 1–3 on one shard, growing the floor pass once."""
    size = floor_size(plan)
    tokens = query_tokens(plan["query"])
    for _ in range(2):
        found = bounded_top([conn], [floor_pass(conn, phrase, size, tokens=tokens)], plan)
        if found is not None:
            return found
        size *= GROWTH
    return None


def _whole(conn: Conn, plan: Mapping[str, Any], phrase: str, where: str,
           params: list[Any]) -> list[Candidate]:
    """The exact answer in one statement over every hit (filters that reject most hits)."""
    sessions = plan["scope"] == "sessions"
    best = (f"ranked AS (SELECT *, row_number() OVER (PARTITION BY sid ORDER BY"
            f" {order_by(EVENT_ORDER)}) AS rn FROM hits)" if sessions
            else "ranked AS (SELECT *, 1 AS rn FROM hits)")
    order = order_by(SESSION_ORDER if sessions else EVENT_ORDER)
    sql = (
        f"WITH hits AS MATERIALIZED (SELECT e.id AS rid, s.id AS sid, {SEQ} AS seq,"
        f" {TYPE} AS type, e.time AS time, {SURFACE} AS surface, e.len AS len, s.no AS no,"
        " recall_matches(events_fts) AS mc FROM events_fts"
        f" JOIN events e ON e.id = events_fts.rowid >> {LENGTH_BITS}{EVENT_JOINS}"
        f" WHERE events_fts MATCH ? AND {where}), "
        f"{best} SELECT rid, sid, seq, (SELECT name FROM types WHERE code = type), time, surface,"
        f" len, no, mc FROM ranked WHERE rn = 1 ORDER BY {order} LIMIT ?")
    rows = conn.execute(sql, [phrase, *params, int(plan["fetch"])])
    return [_candidate(r, int(r[8])) for r in rows]


def _within_session(conn: Conn, plan: Mapping[str, Any], phrase: str, where: str,
                    params: list[Any]) -> list[Candidate]:
    """Events scope: only the phrase's hits inside the session's range of document ids (its
    extents' event ids, shifted): FTS5 seeks to that range in each doclist, so the work is
    bounded by the session's hits (and those of sessions whose extents interleave with it)."""
    span = conn.execute("SELECT min(x.first), max(x.first + x.size) FROM extents x JOIN sessions s"
                        " ON s.no = x.session WHERE s.id = ?", (plan["sessionId"],)).fetchone()
    if span is None or span[0] is None:
        return []
    sql = (f"SELECT {_COLUMNS}, recall_matches(events_fts) AS mc, e.len AS len,"
           f" e.time AS time, {SEQ} AS seq FROM events_fts"
           f" JOIN events e ON e.id = events_fts.rowid >> {LENGTH_BITS}{_JOINS}"
           f" WHERE events_fts MATCH ? AND events_fts.rowid BETWEEN ? AND ? AND {where}"
           f" ORDER BY {order_by(EVENT_ORDER)} LIMIT ?")
    rows = conn.execute(sql, [phrase, int(span[0]) << LENGTH_BITS,
                              (int(span[1]) << LENGTH_BITS) - 1, *params, int(plan["fetch"])])
    return [_candidate(r, int(r[8])) for r in rows]


def _token_candidates(conn: Conn, plan: Mapping[str, Any]) -> list[Candidate]:
    where, params = _where(plan)
    phrase = fts_phrase(plan["query"])
    if plan.get("sessionId") is not None:
        return _within_session(conn, plan, phrase, where, params)
    found = _bounded(conn, plan, phrase)
    return found if found is not None else _whole(conn, plan, phrase, where, params)


# --- trigram index ---------------------------------------------------------------------------------


#: Candidate rows whose texts a substring search reads at once.
_VERIFY_BATCH = 512


def _trigram_candidates(conn: Conn, epoch: str,
                        plan: Mapping[str, Any]) -> list[Candidate]:
    where, params = _where(plan)
    query = str(plan["query"])
    if len(query) >= TRIGRAM_MIN:
        sql = (f"SELECT {_COLUMNS} FROM events_tri"
               f" JOIN events e ON e.id = events_tri.rowid >> {LENGTH_BITS}{_JOINS}"
               f" WHERE events_tri MATCH ? AND {where}")
        bound: list[Any] = [fts_phrase(query), *params]
    else:
        substring = conn.execute("SELECT value FROM meta WHERE key = 'substring'").fetchone()
        scope = "e.len > 0" if substring and substring[0] == "1" else f"{CJK} = 1"
        sql = f"SELECT {_COLUMNS} FROM events e{_JOINS} WHERE {scope} AND {where}"
        bound = list(params)
    # The FTS side only narrows candidates; the exact match rule is the Python one below. Rows
    # and their texts are read a batch at a time: a common trigram (or a query shorter than one)
    # may match most of the shard, whose texts must not all be in memory at once.
    candidates: list[Candidate] = []
    cursor = conn.execute(sql, bound)
    while rows := list(itertools.islice(cursor, _VERIFY_BATCH)):
        raws = read_raws(conn, epoch, ((int(r[7]), int(r[2])) for r in rows))
        for row in rows:
            spans = substring_spans(text_of(raws[(int(row[7]), int(row[2]))]), query)
            if spans:
                candidates.append(_candidate(row, len(spans)))
    if plan["scope"] == "sessions":
        candidates = best_per_session(candidates)
    return rank(candidates, plan["scope"])[:int(plan["fetch"])]


# --- snippets, headers, the shard's answer ------------------------------------------------------


def attach_snippets(conn: Conn, epoch: str, plan: Mapping[str, Any],
                    candidates: list[Candidate]) -> None:
    """Fill in the `snippet` of candidates that `search_shard` found on this shard."""
    make_snippets([(conn, epoch, candidates)], plan)


def make_snippets(parts: list[tuple[Conn, str, list[Candidate]]],
                  plan: Mapping[str, Any]) -> None:
    """Fill in the `snippet` of candidates found on several shards (each with the connection
    and epoch of its shard), highlighting all their texts at once."""
    texts: dict[int, str] = {}
    todo: list[Candidate] = []
    for conn, epoch, candidates in parts:
        mine = [c for c in candidates if "snippet" not in c]
        raws = read_raws(conn, epoch, {(int(c["sessionNo"]), int(c["seq"])) for c in mine
                                       if PAGE_DATA not in c})
        for c in mine:
            if PAGE_DATA in c:
                block = decode_block(conn, epoch, bytes(c[PAGE_DATA][-1]))
                raw = block[int(c["seq"]) & (BLOCK_EVENTS - 1)]
            else:
                raw = raws[(int(c["sessionNo"]), int(c["seq"]))]
            texts[len(todo)] = text_of(raw)
            todo.append(c)
    if not todo:
        return
    if plan["index"] == "token":
        marked = highlight_texts(fts_phrase(plan["query"]), texts)
    else:
        query = str(plan["query"])
        marked = {i: mark_spans(t, substring_spans(t, query)) for i, t in texts.items()}
    size = int(plan["snippetChars"])
    for i, c in enumerate(todo):
        # (a semantic hit need not hold the query's words: its snippet is its text's start)
        c["snippet"] = make_snippet(marked.get(i, texts[i]), size)


def attach_headers(conn: Conn, candidates: list[Candidate]) -> None:
    """Fill in `header`, `lastEventTime` and the rest of the listing row (title, prompt,
    agent, counts; indexer/listing.py) of session hits found on this shard."""
    for c in candidates:
        if "header" not in c and PAGE_DATA in c:
            c.update(row_of(c[PAGE_DATA][:-1]))
    rows = rows_by_id(conn, (c["sessionId"] for c in candidates if "header" not in c))
    for c in candidates:
        if "header" not in c:
            c.update(rows[c["sessionId"]])


def drop_page_data(candidates: Iterable[Candidate]) -> None:
    """Forget what `bounded_top` read for the page (a candidate's answer fields stay)."""
    for c in candidates:
        c.pop(PAGE_DATA, None)


def search_shard(conn: Conn, epoch: str, plan: dict[str, Any]) -> list[Candidate]:
    """This shard's top `plan["fetch"]` candidates, ranked by the exact PROTOCOL §3.6 key.

    With `plan["snippets"]` false the candidates carry no `snippet` (nor, for sessions, header)
    yet: the caller merges the shards first and fills them in for the page's rows only."""
    if plan["index"] == "token":
        candidates = _token_candidates(conn, plan)
    else:
        candidates = _trigram_candidates(conn, epoch, plan)
    if plan.get("snippets", True):
        attach_snippets(conn, epoch, plan, candidates)
        if plan["scope"] == "sessions":
            attach_headers(conn, candidates)
    return candidates

