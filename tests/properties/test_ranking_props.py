"""Properties of exact ranking (issue 16): the bounded search path equals a brute-force reference
on random corpora; the compiled and Python match counts equal highlight()'s span count; SQLite
orders candidates exactly as the Python ranking keys do (one rule, two spellings)."""

from __future__ import annotations

import struct
import tempfile
from typing import Any

import apsw
import pytest
import reference_search
from contract import drain_pages
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import indexer.search
import indexer.service
from indexer import IndexConfig, QueryService, ShardSet
from indexer.matchcount import compiled_path, register
from indexer.ranking import (
    EVENT_ORDER,
    SESSION_ORDER,
    event_key,
    order_by,
    rank,
    session_key,
    sort_key,
)
from indexer.schema import LENGTH_BITS, LENGTH_MASK
from projections.extraction import HIGHLIGHT_OPEN

from ..indexer.helpers import assistant, session_records, user

WORDS = ["a", "b", "needle", "Needle", "café", "cafe", "x", "a-b"]
QUERIES = ["a", "a a", "a b a", "a a a", "b a", "needle", "cafe", "x x", "a-b", "needle a"]

_text = st.lists(st.sampled_from(WORDS), min_size=0, max_size=9).map(" ".join)
_event = st.tuples(st.booleans(), _text, st.integers(0, 4))  # assistant?, text, time
_corpus = st.lists(st.lists(_event, min_size=1, max_size=7), min_size=1, max_size=8)


def _write(shards: ShardSet, corpus: list[list[tuple[bool, str, int]]]) -> None:
    for i, events in enumerate(corpus):
        made = [(assistant if is_assistant else user)(seq, text, time=time)
                for seq, (is_assistant, text, time) in enumerate(events)]
        shards.write_batch(session_records(f"s{i:02d}", made, created=i), {})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(corpus=_corpus, query=st.sampled_from(QUERIES), limit=st.integers(1, 4),
       floor=st.sampled_from([1, 2, 64]), shards_n=st.sampled_from([1, 3]),
       filtered=st.booleans(), walk=st.booleans())
def test_bounded_search_equals_the_brute_force_reference(
        monkeypatch: pytest.MonkeyPatch, corpus: Any, query: str, limit: int, floor: int,
        shards_n: int, filtered: bool, walk: bool) -> None:
    # A tiny floor pass forces the boundary, growth and whole-result paths on small corpora;
    # `walk`: the shards after the first take their floor from recall_top.
    monkeypatch.setattr(indexer.service, "WALK_AFTER_S", 0.0 if walk else 1e9)
    monkeypatch.setattr(indexer.search, "FLOOR_MIN", floor)
    monkeypatch.setattr(indexer.search, "FLOOR_FACTOR", 1 if floor < 64 else 4)
    monkeypatch.setattr(indexer.search, "FILTERED_FACTOR", 1 if floor < 64 else 16)
    filters = ([{"kind": "type", "values": ["assistant/message"]},
                {"kind": "time", "from": 1, "to": 3}] if filtered else [])
    with tempfile.TemporaryDirectory() as root, \
            ShardSet(root, IndexConfig(shards=shards_n)) as shards:
        _write(shards, corpus)
        service = QueryService(shards)
        events = reference_search.indexed_events(service)
        expected = reference_search.search(events, query, event_filters=filters)
        pages = drain_pages(lambda r: service.search_sessions(r, now_ms=0),
                            {"query": query, "limit": limit, "eventFilters": filters})
        assert [i["bestMatch"] for page in pages for i in page] == expected
        within = reference_search.search(events, query, scope="events", session_id="s00",
                                         event_filters=filters)
        pages = drain_pages(lambda r: service.search_events(r, now_ms=0),
                            {"sessionId": "s00", "query": query, "limit": limit,
                             "filters": filters})
        assert [i for page in pages for i in page] == within
        service.close()


def _counts(conn: Any, texts: list[str], query: str) -> list[tuple[int, int, int]]:
    conn.execute("DROP TABLE IF EXISTS t")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text)")
    conn.executemany("INSERT INTO t(rowid, text) VALUES (?, ?)", list(enumerate(texts)))
    return [(int(r), int(m), int(h)) for r, m, h in conn.execute(
        "SELECT rowid, recall_matches(t), length(highlight(t, 0, ?, '')) - length(text) FROM t"
        " WHERE t MATCH ? ORDER BY rowid", (HIGHLIGHT_OPEN, query))]


@pytest.mark.skipif(compiled_path() is None, reason="the compiled function was not built here")
@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a", "b", "c"]), max_size=12).map(" ".join),
                min_size=1, max_size=6),
       st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4).map(" ".join),
       st.booleans())
def test_compiled_and_python_match_counts_equal_highlight_spans(texts: list[str], words: str,
                                                                phrase: bool) -> None:
    query = f'"{words}"' if phrase else words  # a phrase, or several phrases (implicit AND)
    compiled, python = apsw.Connection(":memory:"), apsw.Connection(":memory:")
    assert register(compiled) == "compiled"
    assert register(python, compiled=False) == "python"
    got_compiled, got_python = _counts(compiled, texts, query), _counts(python, texts, query)
    assert got_compiled == got_python
    assert all(m == h for _, m, h in got_compiled)


def _unpack(packed: bytes) -> list[tuple[int, int]]:
    """(count desc, length key asc) keys of a packed floor answer (score, document id)."""
    values = struct.unpack(f"<{len(packed) // 8}q", packed)
    pairs = list(zip(values[0::2], values[1::2], strict=True))
    assert all(score & LENGTH_MASK == LENGTH_MASK - (d & LENGTH_MASK) for score, d in pairs)
    return [(-(score >> LENGTH_BITS), d & LENGTH_MASK) for score, d in pairs]


def _floors(conn: Any, docs: list[tuple[int, str]], query: str,
            size: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(count desc, length key asc) keys of a floor pass (recall_floor, checked equal to
    recall_top's) and of ORDER BY ... LIMIT `size`."""
    conn.execute("DROP TABLE IF EXISTS t")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text, content='')")
    conn.executemany("INSERT INTO t(rowid, text) VALUES (?, ?)", docs)
    packed = conn.execute("SELECT recall_floor_take(?3, n) FROM (SELECT count(*) AS n FROM t"
                          " WHERE t MATCH ?1 AND recall_floor(t, ?2, ?3))",
                          (query, size, 7)).fetchone()[0]
    got = _unpack(packed)
    top_sql = "SELECT recall_top(t, ?2) FROM t WHERE t MATCH ?1 LIMIT 1"
    if query.startswith('"') or " " not in query:  # one phrase, as search's queries are
        top = conn.execute(top_sql, (query, size)).fetchone()
        assert _unpack(b"" if top is None else top[0]) == got
    elif got:
        with pytest.raises((apsw.SQLError, ValueError), match="one phrase"):
            conn.execute(top_sql, (query, size)).fetchone()
    want = [(-int(m), int(d) & LENGTH_MASK) for d, m in conn.execute(
        f"SELECT rowid, recall_matches(t) AS m FROM t WHERE t MATCH ?"
        f" ORDER BY m DESC, rowid & {LENGTH_MASK} LIMIT ?", (query, size))]
    return got, want


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1 << 20),
                          st.lists(st.sampled_from(["a", "b", "c"]), max_size=8).map(" ".join)),
                min_size=1, max_size=40, unique_by=lambda d: d[0]),
       st.sampled_from(["a", "b", '"a a"', "a b", '"a b a"']), st.integers(1, 12),
       st.booleans())
def test_floor_pass_keeps_the_keys_of_the_sorted_top(docs: list[tuple[int, str]], query: str,
                                                    size: int, compiled: bool) -> None:
    """recall_floor/recall_floor_take and recall_top (compiled and Python) return the same
    keys, best first, as ORDER BY count DESC, length key LIMIT k; with no hit, nothing (also
    right after a pass that had hits on the same connection)."""
    if compiled and compiled_path() is None:
        return
    conn = apsw.Connection(":memory:")
    assert register(conn, compiled=compiled) == ("compiled" if compiled else "python")
    got, want = _floors(conn, docs, query, size)
    assert got == sorted(want) == want
    packed = conn.execute("SELECT recall_floor_take(?3, n) FROM (SELECT count(*) AS n FROM t"
                          " WHERE t MATCH ?1 AND recall_floor(t, ?2, ?3))",
                          ("zzz", size, 8)).fetchone()[0]
    assert packed == b""


_candidate = st.fixed_dictionaries({
    "matches": st.integers(0, 3), "length": st.integers(0, 3), "time": st.integers(-2, 2),
    "seq": st.integers(0, 3), "sessionId": st.sampled_from(["a", "B", "b", "é", "ab", "\U0001f600"]),
})


@settings(max_examples=100, deadline=None)
@given(st.lists(_candidate, max_size=30))
def test_sql_orders_exactly_like_the_python_keys(candidates: list[dict[str, Any]]) -> None:
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE c(i INTEGER, mc INTEGER, len INTEGER, time INTEGER, seq INTEGER,"
                 " sid TEXT)")
    conn.executemany("INSERT INTO c VALUES (?, ?, ?, ?, ?, ?)",
                     [(i, c["matches"], c["length"], c["time"], c["seq"], c["sessionId"])
                      for i, c in enumerate(candidates)])
    for order, scope in ((SESSION_ORDER, "sessions"), (EVENT_ORDER, "events")):
        sql = [candidates[int(i)] for (i,) in conn.execute(
            f"SELECT i FROM c ORDER BY {order_by(order)}, i")]
        python = rank(candidates, scope)  # type: ignore[arg-type]
        # Equal keys may come in any order; the key sequences must agree.
        key = [(c["matches"], c["length"], c["time"], c["sessionId"] if scope == "sessions"
                else None, c["seq"]) for c in sql]
        assert key == [(c["matches"], c["length"], c["time"], c["sessionId"] if scope ==
                        "sessions" else None, c["seq"]) for c in python]


@settings(max_examples=100, deadline=None)
@given(st.lists(_candidate, min_size=1, max_size=10))
def test_spelled_out_keys_equal_the_derived_ones(candidates: list[dict[str, Any]]) -> None:
    for c in candidates:
        assert event_key(c) == sort_key(EVENT_ORDER)(c)
        assert session_key(c) == sort_key(SESSION_ORDER)(c)
