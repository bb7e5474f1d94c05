"""Properties of the index: any token comes back; 1, 3 and 8 shards page identically."""

from __future__ import annotations

import re
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer import IndexConfig, QueryService, ShardSet
from projections.fold import SurfaceState
from projections.records import HeaderRecord, fold_records


def _records(sid, texts, created=1):
    events = [{"type": "user/message", "seq": i, "time": 100 + (i % 3), "surfaceOp": "append",
               "data": {"id": f"u{i}", "role": "user", "source": {"kind": "user"},
                        "content": [{"type": "text", "text": t}]}} for i, t in enumerate(texts)]
    _, recs = fold_records(sid, SurfaceState(), events)
    return [HeaderRecord(sid, {"type": "session", "version": 0, "id": sid, "createdAt": created}),
            *recs]


_word = st.text(st.characters(categories=["Lu", "Ll", "Lo", "Nd"]), min_size=1, max_size=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_word, min_size=1, max_size=6), st.data())
def test_any_indexed_token_is_found(words, data):
    text = " ".join(words)
    probe = data.draw(st.sampled_from(words))
    with tempfile.TemporaryDirectory() as root, ShardSet(root, IndexConfig(shards=2)) as shards:
        shards.write_batch(_records("s", [text]), {})
        service = QueryService(shards)
        hits = service.search_sessions({"query": probe})["items"]
        # unicode61 may split "words" with mixed scripts, but every hit set must contain ours.
        assert [h["bestMatch"]["seq"] for h in hits] == [0], (text, probe)
        assert re.sub(r"\s+", " ", text).strip() in hits[0]["bestMatch"]["snippet"] or len(text) > 240


_vocab = st.sampled_from(["alpha", "beta", "gamma", "needle", "搜索功能", "x"])
_doc = st.lists(_vocab, min_size=1, max_size=5).map(" ".join)
_corpus = st.lists(st.lists(_doc, min_size=1, max_size=4), min_size=1, max_size=9)


def _pages(shards, request):
    service = QueryService(shards)
    out, cursor = [], None
    while True:
        page = service.search_sessions({**request, **({"cursor": cursor} if cursor else {})},
                                       now_ms=0)
        out.append(page["items"])
        cursor = page.get("nextCursor")
        if cursor is None:
            return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_corpus, st.sampled_from(["needle", "alpha beta", "搜索", "x"]), st.integers(1, 4))
def test_shard_count_does_not_change_results(sessions, query, limit):
    results = []
    with tempfile.TemporaryDirectory() as root:
        for n in (1, 3, 8):
            with ShardSet(f"{root}/{n}", IndexConfig(shards=n)) as shards:
                for i, texts in enumerate(sessions):
                    shards.write_batch(_records(f"s{i:02d}", texts, created=i), {})
                results.append(_pages(shards, {"query": query, "limit": limit}))
                events = QueryService(shards).search_events(
                    {"sessionId": "s00", "query": query, "limit": 100})["items"]
                results[-1].append(events)
    assert results[0] == results[1] == results[2]
