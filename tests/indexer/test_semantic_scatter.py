"""A search by meaning across shard owners (indexer/scatter.py's rounds, every answer through
the codec as over the wire) answers byte for byte what the one-process service answers: every
page, cursor and filter, with the sign-bit shortlist on and off and a cut that has to grow.
Runs the packaged model (the `semantic` extra is part of the test extra)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from contract import drain_pages

from indexer import QueryService, ShardSet, dense, vectorsetting
from indexer.scatter import (
    DENSE_OPS,
    Coordinator,
    answer_shard_dense,
    answer_shard_op,
    answer_shard_search,
)
from projections.codec import dumps, loads
from projections.errors import SessionQueryError

from .helpers import shortlist_small, texts_session

ON = vectorsetting.fingerprint(True, False)
NOW = 10_000_000
Index = Callable[..., tuple[ShardSet, QueryService]]

TOPICS = ["the postgres migration", "a flaky CI runner", "the release notes", "lunch on friday",
          "the login page styles", "rotating the API keys", "a slow docker build",
          "test_auth_session intermittently times out"]
VERBS = ["we discussed", "please review", "I fixed", "someone broke", "let us plan"]
AGENTS = ["claude-code", "codex", "dsh"]


def records() -> list[Any]:
    out: list[Any] = []
    for n, topic in enumerate(TOPICS):
        for m, verb in enumerate(VERBS):
            sid = f"{AGENTS[(n + m) % 3]}:s-{n}-{m}"
            out.extend(texts_session(sid, [f"{verb} {topic} before the weekly sync",
                                           f"notes on {topic}", "the tests pass again"],
                                     created=1000 + 10 * n + m))
    return out


def wire(value: Any) -> Any:
    return loads(dumps(value))


def coordinator_over(shards: ShardSet) -> tuple[Coordinator, Callable[..., Any]]:
    """A coordinator whose scatter asks each local shard as its owner would (own vector cache,
    requests and answers through the codec)."""
    cache = dense.VectorCache()

    def ask(op: str, args: dict[str, Any]) -> list[Any]:
        return [wire(answer_shard_dense(shard, cache, op, wire({**args, "shard": k}))
                     if op in DENSE_OPS else answer_shard_op(shard, op, wire(args)))
                for k, shard in enumerate(shards)]

    coordinator = Coordinator(shards.config, shards.key, scatter=ask)

    def search(request: dict[str, Any]) -> dict[str, Any]:
        return coordinator.search_sessions(
            request, now_ms=NOW,
            scatter=lambda plan: [wire(answer_shard_search(s, wire(plan))) for s in shards])

    return coordinator, search


REQUESTS = [
    {"query": "flaky login test", "limit": 2},
    {"query": "the tests", "limit": 3},
    {"query": "database schema change", "limit": 4,
     "sessionFilters": [{"kind": "agent", "values": ["codex"]}]},
    {"query": "flaky login test", "limit": 2, "eventFilters": [{"kind": "seq", "from": 1, "to": 1}]},
    {"query": "the tests", "sessionFilters": [{"kind": "agent", "values": ["nobody"]}]},
]


def pages_alike(service: QueryService, search: Callable[..., Any]) -> int:
    compared = 0
    for mode in ("semantic", "hybrid"):
        for request in REQUESTS:
            wanted = {**request, "mode": mode}
            local = drain_pages(lambda r: service.search_sessions(r, now_ms=NOW), wanted)
            remote = drain_pages(search, wanted)
            assert dumps(remote) == dumps(local), (mode, request)
            compared += sum(len(p) for p in local)
    return compared


def test_semantic_and_hybrid_across_owners_equal_the_service(make_index: Index) -> None:
    shards, service = make_index(shards=3, semantic=ON)
    shards.write_batch(records(), {})
    _, search = coordinator_over(shards)
    assert pages_alike(service, search) > 40
    # cursors are interchangeable between the two
    first = search({"query": "the tests", "mode": "hybrid", "limit": 2})
    again = service.search_sessions({"query": "the tests", "mode": "hybrid", "limit": 2,
                                     "cursor": first["nextCursor"]}, now_ms=NOW)
    whole = service.search_sessions({"query": "the tests", "mode": "hybrid", "limit": 4},
                                    now_ms=NOW)
    assert dumps(first["items"] + again["items"]) == dumps(whole["items"])


def test_a_shortlisted_and_growing_scan_across_owners_equals_the_service(
        make_index: Index, monkeypatch: pytest.MonkeyPatch) -> None:
    # sizes only a large index reaches: a shortlist of a few of the ~120 vectors, and cuts so
    # small that the filters make them grow round after round
    shortlisted = shortlist_small(monkeypatch)
    monkeypatch.setattr(dense, "GROW", 2)
    for count in (1, 4):
        shards, service = make_index(f"n{count}", shards=count, semantic=ON)
        shards.write_batch(records(), {})
        _, search = coordinator_over(shards)
        assert pages_alike(service, search) > 40
    assert shortlisted and min(shortlisted) < len(TOPICS) * len(VERBS)


def test_a_changed_shard_makes_a_semantic_cursor_stale(make_index: Index) -> None:
    shards, _ = make_index(shards=2, semantic=ON)
    shards.write_batch(records(), {})
    _, search = coordinator_over(shards)
    page = search({"query": "the tests", "mode": "semantic", "limit": 2})
    shards.write_batch(texts_session("dsh:late", ["the tests are red"], created=5000), {})
    with pytest.raises(SessionQueryError) as info:
        search({"query": "the tests", "mode": "semantic", "limit": 2,
                "cursor": page["nextCursor"]})
    assert info.value.code == "SESSION_QUERY_STALE_CURSOR"


def test_a_shard_changed_between_the_rounds_has_the_search_asked_again(
        make_index: Index) -> None:
    shards, service = make_index(shards=2, semantic=ON)
    shards.write_batch(records(), {})
    coordinator, _ = coordinator_over(shards)
    owners = coordinator.scatter
    assert owners is not None
    asked: list[str] = []

    def ask(op: str, args: dict[str, Any]) -> list[Any]:
        answers = owners(op, args)
        asked.append(op)
        if asked.count("shard.dense_counts") == 1 and op == "shard.dense_counts":
            # a write lands after round 1 read the shards and before round 2 does
            shards.write_batch(texts_session("dsh:late", [f"a flaky login test {n}"
                                                          for n in range(3)], created=5000), {})
        return answers

    coordinator.scatter = ask
    request = {"query": "flaky login test", "mode": "hybrid", "limit": 3}
    remote = coordinator.search_sessions(
        request, now_ms=NOW,
        scatter=lambda plan: [wire(answer_shard_search(s, wire(plan))) for s in shards])
    local = service.search_sessions(request, now_ms=NOW)
    assert asked.count("shard.dense_counts") == 2
    assert dumps(remote["items"]) == dumps(local["items"])
    assert "dsh:late" in {i["bestMatch"]["sessionId"] for i in local["items"]}


def test_an_owner_without_vectors_answers_semantic_unavailable(make_index: Index) -> None:
    shards, _ = make_index(shards=2)
    shards.write_batch(records(), {})
    _, search = coordinator_over(shards)
    with pytest.raises(SessionQueryError) as info:
        search({"query": "the tests", "mode": "hybrid"})
    assert info.value.code == dense.SEMANTIC_UNAVAILABLE
