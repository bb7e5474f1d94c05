"""Reference candidates without a query read only the first sessions of each rank, and are the
listing ordered by rank (same cwd, cwd-less, others; listing order within a rank)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from indexer import QueryService, ShardSet
from indexer.config import IndexConfig
from projections.records import HeaderRecord
from streams.service.reference import ReferenceService

CWDS = ["/a", "/b", None]


def _header(i: int) -> dict[str, Any]:
    header: dict[str, Any] = {"type": "session", "version": 0, "id": f"s{i:02d}",
                              "createdAt": (i * 5) % 7}
    if CWDS[i % 3] is not None:
        header["cwd"] = CWDS[i % 3]
    return header


@pytest.fixture
def query(tmp_path) -> Iterator[QueryService]:
    shards = ShardSet(tmp_path / "idx", IndexConfig(shards=3))
    service = QueryService(shards)
    for i in range(20):
        header = _header(i)
        shards.write_batch([HeaderRecord(header["id"], header)], {})
    yield service
    service.close()
    shards.close()


def _expected(query: QueryService, target: str, limit: int) -> list[str]:
    headers = [r["header"] for r in query.list_sessions() if r["header"]["id"] != target]
    target_cwd = next(r["header"] for r in query.list_sessions()
                      if r["header"]["id"] == target).get("cwd")

    def rank(h: dict[str, Any]) -> int:
        if h.get("cwd") is not None and h.get("cwd") == target_cwd:
            return 0
        return 1 if h.get("cwd") is None else 2

    return [h["id"] for h in sorted(headers, key=rank)][:limit]


@pytest.mark.parametrize("target", ["s00", "s01", "s02"])
@pytest.mark.parametrize("limit", [1, 3, 6, 7, 8, 12, 13, 19, 50])
def test_candidates_are_the_rank_ordered_listing_head(query, target, limit):
    service = ReferenceService(query, None, max_references=4, max_reference_bytes=10_000,
                               candidate_limit=limit)
    got = service.candidates({"targetSessionId": target, "limit": limit})
    assert [c["sessionId"] for c in got] == _expected(query, target, limit)
