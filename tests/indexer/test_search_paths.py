"""Search internals that must not change results: the narrow ranking query (match count from the
highlight length, snippets made for the page only), the parallel shard scatter, and the
coordinator's per-shard snippets all give the pages of the straightforward formulation."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

import pytest
from contract import drain_pages

import indexer.service
from indexer.normalize import fts_phrase
from indexer.ranking import merge_page
from indexer.scatter import Coordinator, answer_shard_search
from indexer.snippet import make_snippet
from projections.extraction import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN

from .helpers import texts_session

NOW = 10_000_000
WORDS = ["needle", "hay", "stack", "Needle", "NEEDLE", "café", "cafe", "検索", "テスト", "ai",
         "braid", "x", "\u00a0", "\n\n", "  ", "\t"]


def _fill(shards: Any, seed: int = 7) -> None:
    rng = random.Random(seed)
    for s in range(14):
        texts = []
        for _ in range(rng.randint(1, 9)):
            n = rng.choice([1, 3, 8, 40, 120])
            texts.append(" ".join(rng.choice(WORDS) for _ in range(n)))
        times = [rng.randint(0, 50) for _ in texts]  # ties on time are common
        shards.write_batch(texts_session(f"s{s:02d}", texts, created=1000 + s, times=times), {})




REQUESTS = [{"query": q, "limit": limit} for q in ("needle", "needle needle", "hay stack", "cafe",
                                                    "検索", "x") for limit in (1, 3, 20)]


def _old_token_rows(conn: sqlite3.Connection, query: str, fetch: int,
                    snippet_chars: int) -> list[dict[str, Any]]:
    """The previous formulation: highlight every hit, count markers, sort the marked text."""
    sql = (
        "WITH hits AS (SELECT e.session_id AS sid, e.seq AS seq, e.type AS type, e.time AS time,"
        " e.surface AS surface, e.text_len AS len, highlight(events_fts, 0, ?, ?) AS h"
        " FROM events_fts JOIN events e ON e.rowid = events_fts.rowid"
        " JOIN sessions s ON s.id = e.session_id"
        " WHERE events_fts MATCH ? AND s.header IS NOT NULL),"
        " scored AS (SELECT *, length(h) - length(replace(h, ?, '')) AS mc FROM hits), "
        "ranked AS (SELECT *, row_number() OVER (PARTITION BY sid ORDER BY mc DESC, len ASC,"
        " time DESC, seq DESC) AS rn FROM scored)"
        " SELECT sid, seq, type, time, surface, len, mc, h FROM ranked WHERE rn = 1"
        " ORDER BY mc DESC, len ASC, time DESC, sid ASC, seq DESC LIMIT ?")
    rows = conn.execute(sql, [HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE, fts_phrase(query), HIGHLIGHT_OPEN,
                              fetch]).fetchall()
    return [{"sessionId": r[0], "seq": r[1], "type": r[2], "time": r[3], "surface": r[4],
             "length": r[5], "matches": r[6], "snippet": make_snippet(r[7], snippet_chars)}
            for r in rows]


@pytest.mark.parametrize("snippet_chars", [1, 7, 240])
def test_first_pages_equal_the_previous_formulation(make_index: Any, snippet_chars: int) -> None:
    shards, service = make_index(shards=4, snippet_chars=snippet_chars)
    _fill(shards)
    for request in REQUESTS:
        if request["query"] == "検索":
            continue  # CJK queries take the trigram path
        page = service.search_sessions(request, now_ms=NOW)["items"]
        old = merge_page([_old_token_rows(s.conn, request["query"], request["limit"] + 1,
                                          snippet_chars) for s in shards],
                         "sessions", 0, request["limit"])[:request["limit"]]
        assert [(i["header"]["id"], i["bestMatch"]) for i in page] == [
            (c["sessionId"], {k: c[k] for k in ("sessionId", "seq", "type", "time", "surface",
                                                "snippet")}) for c in old]
        assert page


@pytest.mark.parametrize("substring", [False, True])
def test_threaded_scatter_and_coordinator_equal_sequential(make_index: Any,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           substring: bool) -> None:
    shards, service = make_index(shards=5, snippet_chars=9, substring=substring)
    _fill(shards, seed=3)
    requests = [*REQUESTS, *({**r, "mode": "substring"} for r in REQUESTS if substring)]

    def everything() -> list[Any]:
        out = []
        for request in requests:
            out.append(drain_pages(lambda r: service.search_sessions(r, now_ms=NOW), request))
            for sid in ("s00", "s03", "s07"):
                out.append(drain_pages(lambda r: service.search_events(r, now_ms=NOW),
                                  {**request, "sessionId": sid}))
        return out

    monkeypatch.setattr(indexer.service, "PARALLEL_AFTER_S", 1e9)  # always sequential
    sequential = everything()
    monkeypatch.setattr(indexer.service, "PARALLEL_AFTER_S", 0.0)  # always threaded
    assert everything() == sequential
    assert sum(len(p) for pages in sequential for p in pages) > 100

    coordinator = Coordinator(shards.config, shards.key)

    def scatter(plan: dict[str, Any]) -> list[dict[str, Any]]:
        return [answer_shard_search(shard, plan) for shard in shards]

    for request in requests:
        local = drain_pages(lambda r: service.search_sessions(r, now_ms=NOW), request)
        remote = drain_pages(lambda r: coordinator.search_sessions(r, now_ms=NOW, scatter=scatter),
                        request)
        assert remote == local


def test_threaded_scatter_raises_the_first_shards_error(make_index: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    shards, service = make_index(shards=4)
    _fill(shards)
    monkeypatch.setattr(indexer.service, "PARALLEL_AFTER_S", 0.0)
    calls = [(s.conn, {"shard": s.index}) for s in shards]

    def fn(conn: sqlite3.Connection, plan: dict[str, Any]) -> list[Any]:
        if plan["shard"] >= 2:
            raise RuntimeError(f"shard {plan['shard']}")
        return [plan["shard"]]

    with pytest.raises(RuntimeError, match="shard 2"):
        service._scatter(calls, fn)
    assert service._scatter(calls[:2], fn) == [[0], [1]]
