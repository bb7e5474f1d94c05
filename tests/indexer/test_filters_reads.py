"""Filters (PROTOCOL §3.4) with budgets and null semantics, and the exact reads of PROTOCOL §3.1."""

from __future__ import annotations

import pytest

from projections.errors import SessionQueryError
from projections.records import HeaderRecord

from .helpers import header, session_records, structural, texts_session, user


def _code(fn, *args, **kwargs):
    with pytest.raises(SessionQueryError) as err:
        fn(*args, **kwargs)
    return err.value.code


@pytest.fixture
def corpus(index):
    shards, service = index
    shards.write_batch(texts_session("root", ["needle root"], created=1), {})
    shards.write_batch(texts_session("kid", ["needle kid"], created=2, parentSession="root"), {})
    recs = texts_session("nocwd", ["needle nocwd"], created=3)
    recs[0] = HeaderRecord("nocwd", {k: v for k, v in header("nocwd", 3).items() if k != "cwd"})
    shards.write_batch(recs, {})
    return shards, service


def _ids(service, filters, **kw):
    return sorted(i["header"]["id"] for i in service.search_sessions(
        {"query": "needle", "sessionFilters": filters, **kw}, now_ms=10**9)["items"])


def test_session_filters(corpus):
    _, service = corpus
    assert _ids(service, [{"kind": "parent", "values": [None]}]) == ["nocwd", "root"]
    assert _ids(service, [{"kind": "parent", "values": ["root"]}]) == ["kid"]
    assert _ids(service, [{"kind": "cwd", "values": [None]}]) == ["nocwd"]
    assert _ids(service, [{"kind": "cwd", "values": ["/w", None]}]) == ["kid", "nocwd", "root"]
    assert _ids(service, [{"kind": "id", "values": []}]) == []
    assert _ids(service, [{"kind": "created-at", "from": 2, "to": 3}]) == ["kid", "nocwd"]
    assert _ids(service, [{"kind": "availability", "values": ["persisted"]}]) == ["kid", "nocwd", "root"]
    assert _ids(service, [{"kind": "availability", "values": ["live"]}]) == []
    assert _ids(service, [{"kind": "availability", "values": []}]) == []
    assert [i["header"]["id"] for i in service.filter_sessions(
        [{"kind": "id", "values": ["kid", "root"]}])] == ["kid", "root"]


def test_event_filters_and_text_clause(corpus):
    shards, service = corpus
    events = [structural(0), user(1, "Hello   World", time=50), user(2, "héllo world", time=60)]
    shards.write_batch(session_records("ev", events), {})
    got = service.filter_events("ev", [{"kind": "type", "values": ["turn/start"]}])
    assert [e["seq"] for e in got["events"]] == [0] and got["events"][0]["surface"] == "log-only"
    assert [e["seq"] for e in service.filter_events(
        "ev", [{"kind": "text", "value": " hello world "}])["events"]] == [1]
    assert [e["seq"] for e in service.filter_events(
        "ev", [{"kind": "time", "from": 55, "to": 100}])["events"]] == [2]
    assert _code(service.filter_events, "ev", [{"kind": "text", "value": "  "}]) == \
        "SESSION_QUERY_INVALID_FILTER"
    assert _code(service.search_events, {"sessionId": "ev", "query": "x",
                                         "filters": [{"kind": "text", "value": "x"}]}) == \
        "SESSION_QUERY_INVALID_FILTER"
    page = service.search_events({"sessionId": "ev", "query": "world",
                                  "filters": [{"kind": "seq", "from": 2, "to": 2}]})
    assert [i["seq"] for i in page["items"]] == [2]


@pytest.mark.parametrize("filters", [
    "notalist", [{"kind": "bogus"}], [{"values": []}], [{"kind": "id", "values": [1]}],
    [{"kind": "id", "values": [None]}], [{"kind": "availability", "values": ["gone"]}],
    [{"kind": "created-at", "from": 5, "to": 1}], [{"kind": "created-at", "from": float("inf")}],
    [{"kind": "created-at", "from": True}], [{"kind": "seq", "from": 1}],
])
def test_invalid_session_filters(index, filters):
    _, service = index
    assert _code(service.search_sessions, {"query": "x", "sessionFilters": filters}) == \
        "SESSION_QUERY_INVALID_FILTER"


def test_predicate_and_binding_budgets(index):
    _, service = index
    ranges = [{"kind": "seq", "from": 0, "to": 9}] * 7  # 14 predicates
    assert service.search_sessions({"query": "x", "eventFilters": ranges})["items"] == []
    assert _code(service.search_sessions, {"query": "x", "eventFilters": [
        *ranges, {"kind": "type", "values": []}]}) == "SESSION_QUERY_INVALID_FILTER"
    both = [{"kind": "availability", "values": ["live", "persisted"]}]
    assert service.search_sessions({"query": "x", "eventFilters": ranges, "sessionFilters": both})
    shards_ok = [{"kind": "seq", "from": 0}] * 13
    assert _code(service.search_events, {"sessionId": "s", "query": "x",
                                         "filters": [*shards_ok, {"kind": "seq", "to": 1}]}) == \
        "SESSION_QUERY_INVALID_FILTER"
    fits = [{"kind": "id", "values": ["v"] * (32_766 - 12)}]
    assert service.search_sessions({"query": "x", "sessionFilters": fits})["items"] == []
    over = [{"kind": "id", "values": ["v"] * (32_766 - 11)}]
    assert _code(service.search_sessions, {"query": "x", "sessionFilters": over}) == \
        "SESSION_QUERY_INVALID_FILTER"


def test_reads(corpus):
    shards, service = corpus
    listing = service.list_sessions(now_ms=10**9)
    assert [i["header"]["id"] for i in listing] == ["nocwd", "kid", "root"]
    events = [structural(0), user(1, "one"), user(2, "two"), structural(3, "step/end")]
    shards.write_batch(session_records("r", events), {})
    assert [e["seq"] for e in service.read_session("r")["events"]] == [0, 1, 2, 3]
    win = service.read_event({"sessionId": "r", "seq": 1, "before": 5, "after": 1})
    assert win["event"]["event"]["seq"] == 1 and win["event"]["text"] == "one"
    assert [e["event"]["seq"] for e in win["before"]] == [0]
    assert [e["event"]["seq"] for e in win["after"]] == [2]
    for bad in (-1, 51, 1.0, True):
        assert _code(service.read_event, {"sessionId": "r", "seq": 1, "before": bad}) == \
            "SESSION_QUERY_INVALID_WINDOW"
    assert _code(service.read_event, {"sessionId": "r", "seq": 9}) == "SESSION_QUERY_EVENT_NOT_FOUND"
    assert _code(service.read_surface, "missing") == "SESSION_QUERY_SESSION_NOT_FOUND"
    empty = [HeaderRecord("empty", header("empty"))]
    shards.write_batch(empty, {})
    assert service.read_surface("empty") == {"session": header("empty"), "capturedThroughSeq": None,
                                             "events": []}


def test_trace_event_replacement_chain(index):
    shards, service = index
    events = [user(0, "a"), user(1, "b"),
              user(2, "c", op={"op": "replace", "start": 0, "end": 0}, cites=[0]),
              user(3, "d", op={"op": "replace", "start": 2, "end": 1}, cites=[1, 2])]
    shards.write_batch(session_records("t", events), {})
    t0 = service.trace_event("t", 0)
    assert (t0["replacedBy"], t0["replacementChain"]) == (2, [2, 3])
    t2 = service.trace_event("t", 2)
    assert (t2["replacedEventSeqs"], t2["replacedBy"], t2["derivedEventSeqs"]) == ([0], 3, [3])
    assert _code(service.trace_event, "t", 7) == "SESSION_QUERY_EVENT_NOT_FOUND"


def test_trace_session(index):
    shards, service = index
    shards.write_batch([HeaderRecord("a", header("a", 1)),
                        HeaderRecord("b", header("b", 2, parentSession="a")),
                        HeaderRecord("c2", header("c2", 4, parentSession="b")),
                        HeaderRecord("c1", header("c1", 3, parentSession="b")),
                        HeaderRecord("orphan", header("orphan", 5, parentSession="gone"))], {})
    tb = service.trace_session("b")
    assert [h["id"] for h in tb["ancestors"]] == ["a"] and tb["complete"] and tb["root"]["id"] == "a"
    assert [n["header"]["id"] for n in tb["descendants"]] == ["c1", "c2"]
    to = service.trace_session("orphan")
    assert to["complete"] is False and to["unresolvedParentId"] == "gone"
    shards.write_batch([HeaderRecord("x", header("x", 1, parentSession="y")),
                        HeaderRecord("y", header("y", 1, parentSession="x"))], {})
    assert _code(service.trace_session, "x") == "SESSION_QUERY_INVALID_LINEAGE"


def test_deep_lineage_is_iterative(make_index):
    shards, service = make_index(shards=2)
    recs = [HeaderRecord("n0", header("n0", 0))]
    recs += [HeaderRecord(f"n{i}", header(f"n{i}", i, parentSession=f"n{i - 1}"))
             for i in range(1, 3000)]
    shards.write_batch(recs, {})
    deep = service.trace_session("n2999")
    assert len(deep["ancestors"]) == 2999 and deep["root"]["id"] == "n0"
    node, depth = service.trace_session("n0")["descendants"], 0
    while node:
        node, depth = node[0]["children"], depth + 1
    assert depth == 2999
