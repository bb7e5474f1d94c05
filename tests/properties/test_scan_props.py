"""Properties of `recall_scan` (indexer/_matchcount.c): reading a phrase's doclists straight from
events_fts's one merged segment gives recall_top's packed answer byte for byte — on random
documents, with leaf pages small enough that doclists and position lists span pages, positions
and rowid gaps of several varint bytes, repeated and absent tokens — and NULL (so search asks
recall_top) where the table is in another shape or the compiled reader is not there."""

from __future__ import annotations

from typing import Any

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.matchcount import compiled_path, query_tokens, register
from indexer.schema import DDL
from indexer.search import MANY_PAGES, MAX_SCAN_TOKENS, many_pages
from indexer.segments import decode_structure

FTS_DDL = next(d for d in DDL if "VIRTUAL TABLE events_fts " in d)
WORDS = ["a", "b", "Needle", "café", "cafe", "x-y", "long" * 30, "c"]
TOP = "SELECT recall_top(events_fts, ?2) FROM events_fts WHERE events_fts MATCH ?1 LIMIT 1"

compiled_only = pytest.mark.skipif(compiled_path() is None,
                                   reason="the compiled function was not built here")

_text = st.one_of(
    st.lists(st.sampled_from(WORDS), max_size=12),
    st.lists(st.sampled_from(WORDS[:3]), min_size=100, max_size=300),  # positions past 127
).map(" ".join)
_docs = st.lists(st.tuples(st.integers(1, 1 << 40), _text), min_size=1, max_size=60,
                 unique_by=lambda d: d[0])
_query = st.lists(st.sampled_from([*WORDS, "zzz"]), min_size=1, max_size=3).map(" ".join)


def _table(docs: list[tuple[int, str]], *, page_size: int, batches: int = 1) -> Any:
    conn = apsw.Connection(":memory:")
    assert register(conn) == "compiled"
    conn.execute(FTS_DDL)
    conn.execute("INSERT INTO events_fts(events_fts, rank) VALUES ('pgsz', ?)", (page_size,))
    step = -(-len(docs) // batches)
    for lo in range(0, len(docs), step):
        with conn:
            conn.executemany("INSERT INTO events_fts(rowid, text) VALUES (?, ?)",
                             docs[lo:lo + step])
    if batches == 1:
        conn.execute("INSERT INTO events_fts(events_fts) VALUES ('optimize')")
    return conn


def _scan(conn: Any, query: str, size: int) -> bytes | None:
    tokens = query_tokens(query)
    assert 0 < len(tokens) <= MAX_SCAN_TOKENS
    marks = ", ?" * len(tokens)
    found = conn.execute(f"SELECT recall_scan(?{marks})", (size, *tokens)).fetchone()[0]
    return None if found is None else bytes(found)


def _top(conn: Any, query: str, size: int) -> bytes:
    phrase = '"' + query.replace('"', '""') + '"'
    row = conn.execute(TOP, (phrase, size)).fetchone()
    return b"" if row is None else bytes(row[0])


@compiled_only
@settings(max_examples=200, deadline=None)
@given(_docs, _query, st.integers(1, 70), st.sampled_from([64, 200, 4050]))
def test_scan_of_one_segment_equals_recall_top(docs: list[tuple[int, str]], query: str,
                                               size: int, page_size: int) -> None:
    conn = _table(docs, page_size=page_size)
    got = _scan(conn, query, size)
    if any(text for _, text in docs):
        assert got == _top(conn, query, size)
    else:  # (no term at all: the table has no segment, and recall_top answers)
        assert got is None


@compiled_only
@settings(max_examples=60, deadline=None)
@given(_docs, st.lists(st.tuples(_query, st.integers(1, 70)), min_size=2, max_size=6),
       st.sampled_from([64, 200]))
def test_scans_in_turn_on_one_connection_each_equal_recall_top(
        docs: list[tuple[int, str]], asks: list[tuple[str, int]], page_size: int) -> None:
    # (the connection keeps its doclist buffers from one scan to the next: a shorter list
    # after a longer one must not read the longer one's leftovers)
    conn = _table(docs, page_size=page_size)
    for query, size in asks:
        got = _scan(conn, query, size)
        if got is not None:
            assert got == _top(conn, query, size)


@compiled_only
@settings(max_examples=40, deadline=None)
@given(_docs.filter(lambda d: len(d) >= 2), _query)
def test_scan_of_several_segments_leaves_the_answer_to_recall_top(
        docs: list[tuple[int, str]], query: str) -> None:
    conn = _table(docs, page_size=4050, batches=2)
    record = conn.execute("SELECT block FROM events_fts_data WHERE id = 10").fetchone()[0]
    if decode_structure(record).segments > 1:
        assert _scan(conn, query, 10) is None
    else:  # (one batch held no term)
        assert _scan(conn, query, 10) in (None, _top(conn, query, 10))


@compiled_only
def test_scan_without_an_index_table_is_null() -> None:
    conn = apsw.Connection(":memory:")
    register(conn)
    assert conn.execute("SELECT recall_scan(5, 'a')").fetchone()[0] is None


def test_python_registration_leaves_the_answer_to_recall_top() -> None:
    conn = apsw.Connection(":memory:")
    assert register(conn, compiled=False) == "python"
    conn.execute(FTS_DDL)
    conn.execute("INSERT INTO events_fts(rowid, text) VALUES (64, 'a b')")
    assert conn.execute("SELECT recall_scan(5, 'a')").fetchone()[0] is None


def test_query_tokens_are_the_tables_tokens() -> None:
    assert query_tokens('Café "x-y" NEEDLE') == ("cafe", "x", "y", "needle")
    assert query_tokens("--") == ()


@compiled_only
def test_scan_inside_a_write_transaction_leaves_the_answer_to_recall_top() -> None:
    """Rows written in the open transaction may not be in a segment yet: recall_top sees them."""
    conn = _table([(64, "a b"), (128, "a")], page_size=4050)
    assert _scan(conn, "a", 5) == _top(conn, "a", 5)
    with conn:
        conn.execute("INSERT INTO events_fts(rowid, text) VALUES (192, 'a a')")
        assert _scan(conn, "a", 5) is None
        assert len(_top(conn, "a", 5)) == 3 * 16


@compiled_only
def test_scan_pages_measure_the_largest_doclist() -> None:
    """A common token's doclist spans many small leaf pages, a rare one's a single page; a phrase
    counts its largest; a table of several segments or the Python functions say nothing."""
    docs = [(64 * (i + 1), "a " * 20 + ("b" if i == 7 else "")) for i in range(200)]
    conn = _table(docs, page_size=64)
    pages = {q: conn.execute("SELECT recall_scan_pages(" + ", ".join("?" * len(query_tokens(q)))
                             + ")", query_tokens(q)).fetchone()[0] for q in ("a", "b", "b a")}
    assert pages["a"] >= MANY_PAGES > pages["b"] >= 0
    assert pages["b a"] == pages["a"]
    assert many_pages(conn, ("a",)) and not many_pages(conn, ("b",))
    assert not many_pages(_table(docs, page_size=64, batches=2), ("a",))
    python = apsw.Connection(":memory:")
    register(python, compiled=False)
    python.execute(FTS_DDL)
    assert not many_pages(python, ("a",))
