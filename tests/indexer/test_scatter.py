"""The scatter seam: a coordinator over shard-owner answers returns the single-process answers."""

from __future__ import annotations

from typing import Any

import pytest
from contract import drain_pages

from indexer.scatter import (
    Coordinator,
    answer_shard_headers,
    answer_shard_listing,
    answer_shard_search,
)
from projections.errors import SessionQueryError

from .helpers import session_records, user

NOW = 10_000_000


def _fill(shards: Any) -> None:
    for s in range(9):
        events = [user(i, f"needle {'pad ' * ((s + i) % 4)}{'needle' if i % 3 == 0 else ''}",
                       time=1000 + s * 10 + i) for i in range(4)]
        parent = {"parentSession": f"s{s - 1}"} if s % 3 else {}
        shards.write_batch(session_records(f"s{s}", events, created=1000 + s, **parent), {})


def _local_scatter(shards: Any) -> Any:
    """A scatter that asks each local shard as its owner would."""
    return lambda plan: [answer_shard_search(shard, plan) for shard in shards]




def test_coordinator_pages_equal_the_local_service(make_index: Any) -> None:
    shards, service = make_index(shards=4)
    _fill(shards)
    coordinator = Coordinator(shards.config, shards.key)
    scatter = _local_scatter(shards)

    for request in ({"query": "needle", "limit": 2}, {"query": "pad needle", "limit": 3},
                    {"query": "needle", "sessionFilters": [{"kind": "parent", "values": [None]}]}):
        local = drain_pages(lambda r: service.search_sessions(r, now_ms=NOW), request)
        remote = drain_pages(lambda r: coordinator.search_sessions(r, now_ms=NOW, scatter=scatter),
                        request)
        assert remote == local and sum(len(p) for p in local) > 0
    # cursors are interchangeable: a coordinator's cursor works on the service and back
    first = coordinator.search_sessions({"query": "needle", "limit": 2}, now_ms=NOW,
                                        scatter=scatter)
    assert service.search_sessions({"query": "needle", "limit": 2,
                                    "cursor": first["nextCursor"]}, now_ms=NOW)["items"]


def test_coordinator_detects_a_changed_shard_as_stale(make_index: Any) -> None:
    shards, _ = make_index(shards=3)
    _fill(shards)
    coordinator = Coordinator(shards.config, shards.key)
    scatter = _local_scatter(shards)

    page = coordinator.search_sessions({"query": "needle", "limit": 2}, now_ms=NOW,
                                       scatter=scatter)
    shards.write_batch(session_records("late", [user(0, "needle")]), {})
    with pytest.raises(SessionQueryError) as info:
        coordinator.search_sessions({"query": "needle", "limit": 2,
                                     "cursor": page["nextCursor"]}, now_ms=NOW, scatter=scatter)
    assert info.value.code == "SESSION_QUERY_STALE_CURSOR"


def test_listing_and_lineage_merge_like_the_service(make_index: Any) -> None:
    shards, service = make_index(shards=4)
    _fill(shards)
    coordinator = Coordinator(shards.config, shards.key)
    listing = coordinator.listing([answer_shard_listing(s, None, NOW - 600_000) for s in shards],
                                  NOW)
    assert listing == service.list_sessions(now_ms=NOW)
    filters = [{"kind": "parent", "values": ["s0"]}]
    filtered = coordinator.listing([answer_shard_listing(s, filters, NOW - 600_000)
                                    for s in shards], NOW)
    assert filtered == service.filter_sessions(filters, now_ms=NOW)
    lineage = coordinator.trace_session([answer_shard_headers(s) for s in shards], "s2")
    assert lineage == service.trace_session("s2")
