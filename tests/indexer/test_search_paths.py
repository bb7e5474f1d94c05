"""Search internals that must not change results: the bounded ranking passes (match counts from
FTS5 instances, snippets made for the page only), the parallel shard scatter, and the
coordinator's per-shard snippets all give the pages of the brute-force reference."""

from __future__ import annotations

import random
from typing import Any

import pytest
import reference_search
from contract import drain_pages

import indexer.search
import indexer.service
from indexer import QueryService
from indexer.scatter import Coordinator, answer_shard_search

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


@pytest.mark.parametrize("snippet_chars", [1, 7, 240])
def test_pages_equal_the_brute_force_reference(make_index: Any, snippet_chars: int) -> None:
    shards, service = make_index(shards=4, snippet_chars=snippet_chars)
    _fill(shards)
    events = reference_search.indexed_events(service)
    for request in REQUESTS:
        if request["query"] == "検索":
            continue  # CJK queries take the trigram path
        expected = reference_search.search(events, request["query"], snippet_chars=snippet_chars)
        pages = drain_pages(lambda r: service.search_sessions(r, now_ms=NOW), request)
        assert [i["bestMatch"] for page in pages for i in page] == expected
        assert expected


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
    monkeypatch.setattr(indexer.search, "MANY_PAGES", 0)  # every shard to the lanes at once
    assert everything() == sequential
    monkeypatch.setattr(indexer.search, "MANY_PAGES", 32)
    assert sum(len(p) for pages in sequential for p in pages) > 100

    coordinator = Coordinator(shards.config, shards.key)

    def scatter(plan: dict[str, Any]) -> list[dict[str, Any]]:
        return [answer_shard_search(shard, plan) for shard in shards]

    for request in requests:
        local = drain_pages(lambda r: service.search_sessions(r, now_ms=NOW), request)
        remote = drain_pages(lambda r: coordinator.search_sessions(r, now_ms=NOW, scatter=scatter),
                        request)
        assert remote == local


@pytest.mark.parametrize("keep_threads", [True, False])
def test_threaded_scatter_raises_the_first_shards_error(make_index: Any, keep_threads: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """With a kept pool and with lanes of its own (a one-search process)."""
    shards, pooled = make_index(shards=4)
    _fill(shards)
    service = pooled if keep_threads else QueryService(shards, keep_threads=False)
    monkeypatch.setattr(indexer.service, "PARALLEL_AFTER_S", 0.0)
    calls = [(s.writer, s.epoch, {"shard": s.index}) for s in shards]

    def fn(conn: Any, epoch: str, plan: dict[str, Any]) -> list[Any]:
        if plan["shard"] >= 2:
            raise RuntimeError(f"shard {plan['shard']}")
        return [plan["shard"]]

    with pytest.raises(RuntimeError, match="shard 2"):
        service._scatter(calls, fn)
    assert service._scatter(calls[:2], fn) == [[0], [1]]
    with pytest.raises(RuntimeError, match="shard 2"):  # no shard run alone first
        service._scatter(calls, fn, parallel=True)
    assert service._scatter(calls[:2], fn, parallel=True) == [[0], [1]]
    if not keep_threads:
        service.close()


@pytest.mark.parametrize("floor", [1, 2, 3, 5])
def test_hits_tied_with_the_floor_boundary_are_never_cut(make_index: Any, floor: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Hits sharing the boundary's (count, length key) but ranking above it by time must not be
    lost when the floor pass stops inside their group."""
    monkeypatch.setattr(indexer.search, "FLOOR_MIN", floor)
    monkeypatch.setattr(indexer.search, "FLOOR_FACTOR", 1)
    shards, service = make_index(shards=2)
    for s in range(12):  # same count, same length; the later the time, the better the rank
        shards.write_batch(texts_session(f"s{s:02d}", ["ab needle"], times=[100 + (s * 7) % 12]),
                           {})
    events = reference_search.indexed_events(service)
    expected = reference_search.search(events, "needle")
    assert [h["sessionId"] for h in expected[:3]] == ["s05", "s10", "s03"]
    for limit in (1, 2, 3):
        pages = drain_pages(lambda r: service.search_sessions(r, now_ms=NOW),
                            {"query": "needle", "limit": limit})
        assert [i["bestMatch"] for page in pages for i in page] == expected


def test_unfiltered_pages_come_from_the_floor_pass(make_index: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded work: with many more hits than the floor pass keeps, a page is still answered
    from it (the statement over every hit is for filters that reject most hits)."""
    def whole(*args: Any) -> Any:
        raise AssertionError("the floor pass should have sufficed")

    shards, service = make_index(shards=2)
    for s in range(60):
        texts = [" ".join(["needle"] * (1 + (s * 7 + i) % 5) + ["hay"] * (i % 4)) for i in range(6)]
        shards.write_batch(texts_session(f"s{s:02d}", texts), {})
    events = reference_search.indexed_events(service)
    expected = reference_search.search(events, "needle")
    monkeypatch.setattr(indexer.search, "_whole", whole)
    monkeypatch.setattr(indexer.search, "GROWTH", 1)  # and from its first round
    for limit in (1, 5, 20):
        page = service.search_sessions({"query": "needle", "limit": limit}, now_ms=NOW)
        assert [i["bestMatch"] for i in page["items"]] == expected[:limit]
