"""Search semantics: normalization, literal phrases, token vs trigram, ranking, snippets."""

from __future__ import annotations

import pytest

from indexer import make_snippet
from projections.errors import SessionQueryError

from .helpers import texts_session

OPEN, CLOSE = "\ufdd0", "\ufdd1"


def _code(fn, *args, **kwargs):
    with pytest.raises(SessionQueryError) as err:
        fn(*args, **kwargs)
    return err.value.code


def _hits(service, query, **extra):
    return [(i["bestMatch"]["sessionId"], i["bestMatch"]["seq"])
            for i in service.search_sessions({"query": query, **extra})["items"]]


@pytest.mark.parametrize("query", ["", "   ", "\t\n", "a\x00b", 5, None])
def test_invalid_queries(index, query):
    _, service = index
    assert _code(service.search_sessions, {"query": query}) == "SESSION_QUERY_INVALID_QUERY"


def test_whitespace_collapse_and_marker_mapping(index):
    shards, service = index
    shards.write_batch(texts_session("s", ["the quick brown fox", "odd \ufffd mark"]), {})
    assert _hits(service, "  quick \n\t  brown ") == [("s", 0)]
    assert _hits(service, "odd \ufdd0 mark") == [("s", 1)]
    # Stored text has markers sanitized too: the snippet never carries them.
    shards.write_batch(texts_session("t", ["x \ufdd0y\ufdd1 z"]), {})
    snippet = service.search_sessions({"query": "x"})["items"][0]["bestMatch"]["snippet"]
    assert OPEN not in snippet and "\ufffd" in snippet


def test_query_text_is_a_literal_phrase(index):
    shards, service = index
    shards.write_batch(texts_session("s", ["needle OR absent here", "needle alone", "star * x",
                                           'say "quoted" (paren) NEAR it']), {})
    assert _hits(service, "needle OR absent") == [("s", 0)]
    assert _hits(service, "*") == []
    assert _hits(service, '"quoted" (paren) NEAR') == [("s", 3)]
    assert _hits(service, "absent needle") == []


def test_token_matching_rules(index):
    shards, service = index
    shards.write_batch(texts_session("s", ["BRAID and café", "用于会话搜索功能的模块"]), {})
    assert _hits(service, "AI") == []
    assert _hits(service, "CAFE") == [("s", 0)]
    assert _hits(service, "braid") == [("s", 0)]
    # CJK goes to the trigram index automatically, including 2-character queries.
    assert _hits(service, "搜索") == [("s", 1)]
    assert _hits(service, "会话搜索功能") == [("s", 1)]
    assert _hits(service, "搜寻") == []


def test_substring_mode(make_index):
    shards, service = make_index(substring=True)
    shards.write_batch(texts_session("s", ["BRAIDED rope", "other rope"]), {})
    assert _hits(service, "AI", mode="substring") == [("s", 0)]
    assert _hits(service, "aide", mode="substring") == [("s", 0)]
    assert _hits(service, "AI") == []
    item = service.search_sessions({"query": "ai", "mode": "substring"})["items"][0]
    assert item["bestMatch"]["snippet"] == "BRAIDED rope"
    _, lean = make_index("lean")
    assert _code(lean.search_sessions, {"query": "x", "mode": "fuzzy"}) == \
        "SESSION_QUERY_INVALID_QUERY"


def test_substring_mode_builds_its_index_on_demand(make_index):
    """Issue 13 item 11: an index created without substring coverage answers `--substring`
    (its trigram index is completed on the first such request, with progress), and keeps the
    coverage for later writes."""
    reports = []
    shards, service = make_index("lean", shards=3)
    service.progress = lambda shard, done, total: reports.append((shard, done, total))
    shards.write_batch(texts_session("s", ["a cabinet of curiosities", "x"]), {})
    shards.write_batch(texts_session("t", ["nothing here"]), {})
    assert not shards.has_substring()
    assert _hits(service, "abi", mode="substring") == [("s", 0)]
    assert shards.has_substring()
    assert reports and all(done <= total for _, done, total in reports)
    assert sum(total for _, done, total in reports if done == total) == 3
    shards.write_batch(texts_session("u", ["cabinetry"]), {})
    assert _hits(service, "abi", mode="substring") == [("u", 0), ("s", 0)]  # shorter first
    assert _hits(service, "x", mode="substring") == [("s", 1)]


def test_ranking_example_alpha_beta(index):
    shards, service = index
    # a, b: equal texts (b later); c: longer in code points (emoji count 1 each).
    recs = texts_session("s", ["alpha beta", "alpha beta", "😀😀 alpha beta BRAID 😀😀"],
                         times=[10, 20, 5])
    shards.write_batch(recs, {})
    page = service.search_events({"sessionId": "s", "query": "alpha beta"})
    assert [i["seq"] for i in page["items"]] == [1, 0, 2]
    assert page["session"]["id"] == "s"


def test_ranking_by_match_count_then_length_then_time_then_seq(index):
    shards, service = index
    recs = texts_session("s", ["x y", "x x", "x y", "x yy", "x x x"], times=[5, 1, 5, 9, 1])
    shards.write_batch(recs, {})
    page = service.search_events({"sessionId": "s", "query": "x"})
    # 3 matches; 2 matches; then 1 match: length 3 (seq 2, 0 tie on time → seq desc), length 4.
    assert [i["seq"] for i in page["items"]] == [4, 1, 2, 0, 3]


def test_sessions_tie_is_ordered_by_id(make_index, monkeypatch):
    shards, service = make_index()
    now = 10_000_000
    shards.write_batch(texts_session("zeta", ["needle needle"], times=[now - 10]), {})
    shards.write_batch(texts_session("alpha", ["needle needle"], times=[now - 10]), {})
    shards.write_batch(texts_session("mid", ["needle needle"], times=[1]), {})
    items = service.search_sessions({"query": "needle"}, now_ms=now)["items"]
    assert [i["header"]["id"] for i in items] == ["alpha", "zeta", "mid"]
    assert [i["live"] for i in items] == [True, True, False]
    assert all(i["persisted"] for i in items)
    # PROTOCOL §3.8's items, plus the listing fields (indexer/listing.py).
    assert set(items[0]) == {"header", "live", "persisted", "bestMatch", "title", "titleSource",
                             "agent", "eventCount", "firstEventTime", "lastEventTime"}
    assert set(items[0]["bestMatch"]) == {"sessionId", "seq", "type", "time", "surface", "snippet"}


def test_session_best_event_and_shadowed_hits(index):
    shards, service = index
    from .helpers import session_records, user
    events = [user(0, "needle once"), user(1, "needle needle twice"),
              user(2, "summary", op={"op": "replace", "start": 0, "end": 1}, cites=[0, 1])]
    shards.write_batch(session_records("s", events), {})
    best = service.search_sessions({"query": "needle"})["items"][0]["bestMatch"]
    assert (best["seq"], best["surface"]) == (1, "shadowed")
    only_current = service.search_sessions(
        {"query": "needle", "eventFilters": [{"kind": "surface", "values": ["current"]}]})
    assert only_current["items"] == []


@pytest.mark.parametrize(("marked", "size", "expected"), [
    ("abcdefghij", 5, "abcd…"),
    (f"ab{OPEN}c{CLOSE}defghij", 5, "…bcd…"),
    (f"ab{OPEN}c{CLOSE}defghij", 3, "…c…"),
    (f"abcde{OPEN}f{CLOSE}", 2, "…f"),
    (f"abcde{OPEN}f{CLOSE}", 5, "…cdef"),
    ("short", 5, "short"),
    ("abcdef", 1, "…"),
    (f"a  b\n\n{OPEN}c{CLOSE}  d", 240, "a b c d"),
])
def test_snippet_table(marked, size, expected):
    assert make_snippet(marked, size) == expected


def test_snippets_in_results_are_bounded_and_single_line(make_index):
    shards, service = make_index(snippet_chars=20)
    text = "lorem ipsum\n" * 10 + "target word here\n" + "dolor sit\n" * 10
    shards.write_batch(texts_session("s", [text]), {})
    snippet = service.search_sessions({"query": "target"})["items"][0]["bestMatch"]["snippet"]
    assert len(snippet) <= 20 and "\n" not in snippet and "target" in snippet


def test_search_disabled_but_reads_work(make_index):
    shards, service = make_index(open_at="never")
    shards.write_batch(texts_session("s", ["hello"]), {})
    assert _code(service.search_sessions, {"query": "hello"}) == "SESSION_QUERY_SEARCH_DISABLED"
    assert _code(service.search_events, {"sessionId": 5, "query": ""}) == \
        "SESSION_QUERY_SEARCH_DISABLED"
    assert service.read_surface("s")["capturedThroughSeq"] == 0


def test_limits(index):
    _, service = index
    for bad in (0, 101, 1.5, True, "3"):
        assert _code(service.search_sessions, {"query": "x", "limit": bad}) == \
            "SESSION_QUERY_INVALID_LIMIT"
    assert service.search_sessions({"query": "x", "limit": 100}) == {"items": []}


def test_events_scope_validation_order(index):
    _, service = index
    assert _code(service.search_events, {"query": "x"}) == "SESSION_QUERY_INVALID_FILTER"
    assert _code(service.search_events, {"sessionId": "s", "query": "", "cursor": 5}) == \
        "SESSION_QUERY_INVALID_CURSOR"
    assert _code(service.search_events, {"sessionId": "nope", "query": "x"}) == \
        "SESSION_QUERY_SESSION_NOT_FOUND"


def test_request_is_copied(index):
    shards, service = index
    shards.write_batch(texts_session("s", ["alpha"]), {})
    filters = [{"kind": "id", "values": ["s"]}]
    request = {"query": "alpha", "sessionFilters": filters, "limit": 1}
    assert len(service.search_sessions(request)["items"]) == 1
    filters[0]["values"].append("other")
    assert request["sessionFilters"][0]["values"] == ["s", "other"]
