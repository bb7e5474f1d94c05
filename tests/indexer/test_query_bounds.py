"""A query's length is bounded (`MAX_QUERY_CHARS`, code RECALL_QUERY_TOO_LONG) before any work
on it: a long substring query once cost ~15 KB of memory per character (120 KB → 1.9 GB)."""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import pytest

from indexer.normalize import MAX_QUERY_CHARS
from projections.errors import RECALL_QUERY_TOO_LONG, SessionQueryError

from .helpers import texts_session

TEXT = "the quick brown fox jumps over the lazy dog " * 40


@pytest.mark.parametrize("mode", ["token", "substring"])
def test_a_query_over_the_limit_is_refused_with_its_own_code(make_index: Any, mode: str) -> None:
    shards, service = make_index(substring=True)
    shards.write_batch(texts_session("s", [TEXT]), {})
    accepted = TEXT[:MAX_QUERY_CHARS].rsplit(" ", 1)[0]  # whole words, at most the limit
    assert service.search_sessions({"query": accepted, "mode": mode})["items"]
    for query in (TEXT[:MAX_QUERY_CHARS] + "x" * 10, "ab" * 60_000):
        with pytest.raises(SessionQueryError) as caught:
            service.search_sessions({"query": query, "mode": mode})
        assert caught.value.code == RECALL_QUERY_TOO_LONG
        assert str(MAX_QUERY_CHARS) in caught.value.message


def test_a_long_substring_query_costs_bounded_time_and_memory(make_index: Any) -> None:
    shards, service = make_index(substring=True)
    shards.write_batch(texts_session("s", [TEXT, "ab" * 5000]), {})
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(SessionQueryError):
            service.search_sessions({"query": "ab" * 60_000, "mode": "substring"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # bounds: 2 s and 8 MiB of Python allocations for a 120 KB query
    assert time.monotonic() - started < 2.0
    assert peak < 8 * 1024 * 1024
