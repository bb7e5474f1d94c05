"""A query service that keeps no thread pool (the one-search `recall` process) runs a parallel
search on threads of its own: the same pages as sequential and pooled searches, the first
shard's error, and no thread left behind."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from contract import drain_pages

import indexer.service
from indexer import QueryService

from .helpers import texts_session

NOW = 10_000_000
WORDS = ["needle", "hay", "stack", "Needle", "café", "cafe", "x", "braid"]


def _fill(shards: Any) -> None:
    rng = random.Random(5)
    for s in range(12):
        texts = [" ".join(rng.choice(WORDS) for _ in range(rng.choice([1, 4, 30])))
                 for _ in range(rng.randint(1, 6))]
        shards.write_batch(texts_session(f"s{s:02d}", texts, created=1000 + s,
                                         times=[rng.randint(0, 40) for _ in texts]), {})


def _pages(service: QueryService) -> list[Any]:
    return [drain_pages(lambda r: service.search_sessions(r, now_ms=NOW),
                        {"query": q, "limit": limit})
            for q in ("needle", "hay stack", "cafe", "x") for limit in (1, 5)]


def test_own_threads_give_the_pages_of_sequential_and_pooled_searches(
        make_index: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    shards, pooled = make_index(shards=5)
    _fill(shards)
    own = QueryService(shards, keep_threads=False)
    try:
        monkeypatch.setattr(indexer.service, "PARALLEL_AFTER_S", 1e9)  # always sequential
        sequential = _pages(own)
        monkeypatch.setattr(indexer.service, "PARALLEL_AFTER_S", 0.0)  # always threaded
        before = threading.active_count()
        assert _pages(own) == sequential
        assert threading.active_count() == before  # every lane's thread was joined
        assert own._pool is None
        assert _pages(pooled) == sequential
        assert sum(len(p) for pages in sequential for p in pages) > 10
    finally:
        own.close()
