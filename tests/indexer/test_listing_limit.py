"""A limited listing reads only the first sessions of each shard, and is the full listing's head:
createdAt descending, then id ascending, across shards, with ties and non-ASCII ids."""

from __future__ import annotations

import pytest

from projections.errors import SessionQueryError

from .helpers import texts_session

#: (id, createdAt): ties on createdAt, ids that sort differently by case and by code point.
SESSIONS = [(f"s{i:02d}", (i * 7) % 5) for i in range(24)] + [
    ("Zed", 3), ("alpha", 3), ("émile", 3), ("日本", 3), ("a", 4), ("b", 0)]


@pytest.fixture
def listed(make_index):
    shards, service = make_index(shards=4)
    for sid, created in SESSIONS:
        shards.write_batch(texts_session(sid, [f"prompt of {sid}"], created=created,
                                         cwd="/w" if created % 2 else "/v"), {})
    return service


def _ids(records):
    return [r["header"]["id"] for r in records]


@pytest.mark.parametrize("limit", [1, 2, 5, 13, 29, 30, 31, 100])
def test_limited_listing_is_the_head_of_the_full_listing(listed, limit):
    full = listed.list_sessions(now_ms=10**9)
    assert len(full) == len(SESSIONS)
    assert _ids(full) == [sid for sid, _ in sorted(SESSIONS, key=lambda s: (-s[1], s[0]))]
    assert listed.list_sessions(now_ms=10**9, limit=limit) == full[:limit]


@pytest.mark.parametrize("limit", [1, 4, 50])
def test_limited_filtered_listing_is_the_head_of_the_filtered_listing(listed, limit):
    filters = [{"kind": "cwd", "values": ["/w"]}]
    full = listed.filter_sessions(filters, now_ms=10**9)
    assert full and all(r["header"]["cwd"] == "/w" for r in full)
    assert listed.filter_sessions(filters, now_ms=10**9, limit=limit) == full[:limit]


@pytest.mark.parametrize("limit", [0, -1, True, "3", 2.0])
def test_a_bad_limit_is_a_clear_error(listed, limit):
    with pytest.raises(SessionQueryError) as err:
        listed.list_sessions(limit=limit)
    assert err.value.code == "SESSION_QUERY_INVALID_LIMIT"
