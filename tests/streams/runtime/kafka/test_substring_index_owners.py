"""Over Kafka a substring search never builds the substring (trigram) index: shard owners answer
RECALL_SUBSTRING_INDEX_MISSING and change nothing, on the scatter path and the single-session
path alike; shards with and without it answer the error, never a partial page; the explicit
build (`build_substring_index`, every owner its shard) makes them answer as the embedded index
does, later writes included. The owners and coordinator run in-process here, over the same
functions the workers call (streams.runtime.kafka.query); tests/integration runs them on Kafka."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from indexer import IndexConfig, QueryService, ShardSet
from indexer.schema import TRIGRAM_DOCS
from projections.errors import RECALL_SUBSTRING_INDEX_MISSING, STREAM_REQUEST_FORBIDDEN, RecallError
from streams.core.settings import Settings
from streams.runtime.kafka.query import CoordinatorBackend, RemoteQuery, answer_shard_request
from streams.runtime.kafka.workspaces import WorkspaceQuery
from streams.service.operations import dispatch
from tests.indexer.helpers import texts_session

SHARDS = 3
SESSIONS = {
    "alpha": ["the cabinet is open", "会话搜索功能"],
    "beta": ["cabinets everywhere", "nothing here"],
    "gamma": ["a vocabulary lesson", "abide by it"],
    "delta": ["plain words only"],
    "eta": ["habit forming"],  # (shard 0 of 3; the others are on shards 1 and 2)
}


def _fill(shards: ShardSet) -> None:
    for n, (sid, texts) in enumerate(SESSIONS.items()):
        shards.write_batch(texts_session(sid, texts, created=1000 + n), {"src:0": n + 1})


class Fleet:
    """Shard owners (one ShardSet whose searches never build) behind a coordinator."""

    def __init__(self, root: Path) -> None:
        self.shards = ShardSet(root, IndexConfig(shards=SHARDS))
        _fill(self.shards)
        self.owner = QueryService(self.shards, build_substring=False)
        self.remote = RemoteQuery(Settings(shards=SHARDS, data_dir=root / "data"),
                                  self.shards.key, self.call, self.scatter)

    def call(self, shard: int, op: str, args: dict[str, Any]) -> Any:
        return answer_shard_request(self.shards, self.owner, op, {**args, "shard": shard})

    def scatter(self, op: str, args: dict[str, Any]) -> list[Any]:
        return [self.call(k, op, args) for k in range(SHARDS)]

    def trigram_state(self) -> list[tuple[str, str]]:
        """Per shard: the substring flag and trigram document count its file holds."""
        out = []
        for shard in self.shards:
            with shard.reader() as conn:
                meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN "
                                         "('substring', ?)", (TRIGRAM_DOCS,)).fetchall())
            out.append((meta["substring"], meta[TRIGRAM_DOCS]))
        return out

    def close(self) -> None:
        self.owner.close()
        self.shards.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Any:
    made = Fleet(tmp_path / "owners")
    yield made
    made.close()


@pytest.fixture
def embedded(tmp_path: Path) -> Any:
    shards = ShardSet(tmp_path / "embedded", IndexConfig(shards=SHARDS))
    _fill(shards)
    service = QueryService(shards)  # embedded: its first substring search builds
    yield shards, service
    service.close()
    shards.close()


def _substring(query: str) -> dict[str, Any]:
    return {"query": query, "mode": "substring", "limit": 20}


def _refused(call: Any) -> RecallError:
    with pytest.raises(RecallError) as caught:
        call()
    assert caught.value.code == RECALL_SUBSTRING_INDEX_MISSING
    assert "recall index substring" in caught.value.hint
    return caught.value


def test_a_substring_search_without_the_index_is_refused_and_builds_nothing(fleet: Fleet) -> None:
    before = fleet.trigram_state()
    assert all(flag == "0" for flag, _ in before)
    _refused(lambda: fleet.remote.search_sessions(_substring("abi"), now_ms=1))
    _refused(lambda: fleet.remote.search_events({**_substring("abi"), "sessionId": "alpha"}))
    # a query shorter than a trigram scans instead: refused the same
    _refused(lambda: fleet.remote.search_sessions(_substring("ab"), now_ms=1))
    assert fleet.trigram_state() == before
    assert fleet.remote.substring_index() == {"built": "none", "lacking": [0, 1, 2]}
    # token searches, CJK ones included (CJK documents are always in the trigram index), answer
    assert fleet.remote.search_sessions({"query": "搜索"}, now_ms=1)["items"]
    assert fleet.remote.search_sessions({"query": "cabinet"}, now_ms=1)["items"]


def test_shards_with_and_without_the_index_answer_the_error_never_a_partial_page(
        fleet: Fleet) -> None:
    assert fleet.call(0, "shard.substring_build", {})["documentsAdded"] > 0
    assert fleet.remote.substring_index() == {"built": "partial", "lacking": [1, 2]}
    error = _refused(lambda: fleet.remote.search_sessions(_substring("abi"), now_ms=1))
    assert "shards 1, 2" in error.message
    # one session's search needs only its own shard
    for sid in SESSIONS:
        shard = fleet.shards.shard_for(sid).index
        request = {**_substring("abi"), "sessionId": sid}
        if shard == 0:
            fleet.remote.search_events(request)
        else:
            _refused(lambda r=request: fleet.remote.search_events(r))


def test_after_the_explicit_build_the_owners_answer_as_embedded_and_stay_current(
        fleet: Fleet, embedded: Any) -> None:
    shards, service = embedded
    added = dispatch(CoordinatorBackend(fleet.remote, lambda *_: []), "build_substring_index", {})
    assert added["documentsAdded"] > 0
    assert fleet.remote.substring_index() == {"built": "all", "lacking": []}
    assert all(flag == "1" for flag, _ in fleet.trigram_state())
    again = fleet.remote.build_substring_index()
    assert again == {"documentsAdded": 0}

    def both(query: str) -> tuple[Any, Any]:
        got = fleet.remote.search_sessions(_substring(query), now_ms=1)["items"]
        want = service.search_sessions(_substring(query), now_ms=1)["items"]
        return got, want

    for query in ("abi", "ab", "cab", "搜索", "here"):
        got, want = both(query)
        assert got == want, query
    assert {i["header"]["id"] for i in both("abi")[0]} == {"alpha", "beta", "gamma", "eta"}
    request = {**_substring("abi"), "sessionId": "gamma"}
    assert fleet.remote.search_events(request) == service.search_events(request)

    # a later write is found by substring at once: writers keep the index current
    for target in (fleet.shards, shards):
        target.write_batch(texts_session("epsilon", ["a rabid fan"], created=2000), {"src:0": 9})
    got, want = both("abi")
    assert got == want and "epsilon" in {i["header"]["id"] for i in got}
    assert fleet.remote.search_events({**_substring("bid"), "sessionId": "epsilon"})["items"]


def test_only_a_key_for_every_workspace_may_build(fleet: Fleet) -> None:
    limited = WorkspaceQuery(fleet.remote, frozenset({"/work/a"}))
    with pytest.raises(RecallError) as caught:
        limited.build_substring_index()
    assert caught.value.code == STREAM_REQUEST_FORBIDDEN
    assert fleet.remote.substring_index()["built"] == "none"
    assert limited.substring_index() == {"built": "none", "lacking": [0, 1, 2]}
