"""Paging and cursors (PROTOCOL §3.9): exhaustive paging, INVALID vs STALE, snapshot consistency."""

from __future__ import annotations

import base64

import orjson
import pytest

from projections.errors import SessionQueryError
from projections.fold import SurfaceState
from projections.records import fold_records

from .helpers import texts_session, user


def _code(fn, *args, **kwargs):
    with pytest.raises(SessionQueryError) as err:
        fn(*args, **kwargs)
    return err.value.code


def _fill(shards, sessions=7, per=3):
    for s in range(sessions):
        shards.write_batch(texts_session(f"s{s}", [f"needle {'x ' * ((s * per + i) % 5)}"
                                                   for i in range(per)]), {})


def test_every_hit_exactly_once(make_index):
    shards, service = make_index(shards=3)
    _fill(shards)
    seen, cursor, pages = [], None, 0
    while True:
        req = {"query": "needle", "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = service.search_sessions(req)
        seen += [i["header"]["id"] for i in page["items"]]
        pages += 1
        if "nextCursor" not in page:
            break
        cursor = page["nextCursor"]
    assert sorted(seen) == [f"s{i}" for i in range(7)] and len(seen) == 7 and pages == 4
    events, cursor = [], None
    while True:
        page = service.search_events({"sessionId": "s1", "query": "needle", "limit": 1,
                                      **({"cursor": cursor} if cursor else {})})
        events += [i["seq"] for i in page["items"]]
        if "nextCursor" not in page:
            break
        cursor = page["nextCursor"]
    assert sorted(events) == [0, 1, 2]


def test_invalid_cursor_cases(index):
    shards, service = index
    _fill(shards)
    page = service.search_sessions({"query": "needle", "limit": 2})
    cursor = page["nextCursor"]
    assert base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))  # opaque base64url
    raw = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw["offset"] = 0
    forged = base64.urlsafe_b64encode(orjson.dumps(raw)).decode()
    cases = [
        {"query": "needle", "limit": 2, "cursor": "!!!not base64"},
        {"query": "needle", "limit": 2, "cursor": forged},
        {"query": "needle", "limit": 2, "cursor": cursor[:-4] + ("AAAA" if cursor[-4:] != "AAAA" else "BBBB")},
        {"query": "other", "limit": 2, "cursor": cursor},
        {"query": "needle", "limit": 3, "cursor": cursor},
        {"query": "needle", "limit": 2, "cursor": cursor, "consistency": "snapshot"},
        {"query": "needle", "limit": 2, "cursor": cursor,
         "sessionFilters": [{"kind": "id", "values": ["s1"]}]},
    ]
    for req in cases:
        assert _code(service.search_sessions, req) == "SESSION_QUERY_INVALID_CURSOR", req
    assert _code(service.search_events, {"sessionId": "s1", "query": "needle", "limit": 2,
                                         "cursor": cursor}) == "SESSION_QUERY_INVALID_CURSOR"
    # Another service over the same index (a later CLI call, another query worker) follows it.
    from indexer import QueryService
    request = {"query": "needle", "limit": 2, "cursor": cursor}
    assert QueryService(shards).search_sessions(request) == service.search_sessions(request)


def test_a_cursor_from_another_index_is_invalid(make_index):
    first, first_service = make_index("one", shards=2)
    second, second_service = make_index("two", shards=2)
    _fill(first)
    _fill(second)
    cursor = first_service.search_sessions({"query": "needle", "limit": 2})["nextCursor"]
    assert _code(second_service.search_sessions, {"query": "needle", "limit": 2,
                                                  "cursor": cursor}) == "SESSION_QUERY_INVALID_CURSOR"


def test_fingerprint_ignores_clause_and_value_order(index):
    shards, service = index
    _fill(shards)
    f1 = [{"kind": "id", "values": ["s1", "s2", "s3", None][:3]}, {"kind": "created-at", "from": 0}]
    f2 = [{"kind": "created-at", "from": 0, "to": None}, {"kind": "id", "values": ["s3", "s1", "s2"]}]
    page = service.search_sessions({"query": "needle", "limit": 1, "sessionFilters": f1})
    nxt = service.search_sessions({"query": "needle", "limit": 1, "sessionFilters": f2,
                                   "cursor": page["nextCursor"]})
    assert nxt["items"]


def test_stale_cursor_cases(make_index):
    shards, service = make_index(shards=2)
    _fill(shards)
    page = service.search_sessions({"query": "needle", "limit": 2})
    ev_page = service.search_events({"sessionId": "s1", "query": "needle", "limit": 1})
    # A write to an unrelated session stales cross-session cursors, not the within-session one.
    shards.write_batch(texts_session("unrelated", ["nothing"]), {})
    assert _code(service.search_sessions, {"query": "needle", "limit": 2,
                                           "cursor": page["nextCursor"]}) == "SESSION_QUERY_STALE_CURSOR"
    assert service.search_events({"sessionId": "s1", "query": "needle", "limit": 1,
                                  "cursor": ev_page["nextCursor"]})["items"]
    # Any append to the target (even a non-text event) stales the within-session cursor.
    _, recs = fold_records("s1", SurfaceState(3, 0, ()), [{"type": "turn/start", "seq": 3,
                                                          "time": 5, "data": {}}])
    shards.write_batch(recs, {})
    assert _code(service.search_events, {"sessionId": "s1", "query": "needle", "limit": 1,
                                         "cursor": ev_page["nextCursor"]}) == "SESSION_QUERY_STALE_CURSOR"


def test_snapshot_paging_survives_writes_then_expires(make_index):
    clock = [1000.0]
    shards, service = make_index(shards=3, clock=lambda: clock[0], snapshot_retention_s=60)
    _fill(shards)
    req = {"query": "needle", "limit": 3, "consistency": "snapshot"}
    first = service.search_sessions(req, now_ms=0)
    # New matching sessions arrive; the snapshot pages never show them, never repeat, never skip.
    for i in range(3):
        shards.write_batch(texts_session(f"new{i}", ["needle needle needle"]), {})
    seen = [i["header"]["id"] for i in first["items"]]
    cursor = first["nextCursor"]
    while cursor:
        page = service.search_sessions({**req, "cursor": cursor}, now_ms=0)
        seen += [i["header"]["id"] for i in page["items"]]
        cursor = page.get("nextCursor")
    assert sorted(seen) == [f"s{i}" for i in range(7)]
    assert len(service.snapshots) == 0  # released after the last page
    fresh = service.search_sessions({**req, "limit": 1}, now_ms=0)
    assert fresh["items"][0]["header"]["id"].startswith("new")
    clock[0] += 61
    assert _code(service.search_sessions, {**req, "limit": 1, "cursor": fresh["nextCursor"]},
                 now_ms=0) == "SESSION_QUERY_STALE_CURSOR"


def test_snapshot_within_session(make_index):
    shards, service = make_index(shards=1)
    shards.write_batch(texts_session("s", ["needle a", "needle b", "needle c"]), {})
    req = {"sessionId": "s", "query": "needle", "limit": 1, "consistency": "snapshot"}
    page = service.search_events(req)
    _, recs = fold_records("s", SurfaceState(3, 0, ()), [user(3, "needle needle")])
    shards.write_batch(recs, {})
    got = [i["seq"] for i in page["items"]]
    cursor = page["nextCursor"]
    while cursor:
        page = service.search_events({**req, "cursor": cursor})
        got += [i["seq"] for i in page["items"]]
        cursor = page.get("nextCursor")
    assert sorted(got) == [0, 1, 2]
