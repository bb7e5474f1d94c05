"""The substring (trigram) index stays complete when another process builds it under a running
writer (`recall watch` while a first `--substring` search runs), and `index check` sees a
trigram index that missed documents."""

from __future__ import annotations

from typing import Any

from indexer.maintenance import check_integrity

from .helpers import texts_session


def _hits(service: Any, query: str) -> list[tuple[str, int]]:
    return [(i["bestMatch"]["sessionId"], i["bestMatch"]["seq"])
            for i in service.search_sessions({"query": query, "mode": "substring"})["items"]]


def test_a_writer_opened_before_the_build_keeps_the_substring_index_current(
        make_index: Any) -> None:
    watch, _ = make_index("idx", shards=2)  # a writer that opened before any substring search
    watch.write_batch(texts_session("a", ["a cabinet of curiosities"]), {})
    searcher, service = make_index("idx", shards=2)  # another process: its search builds it
    assert _hits(service, "abi") == [("a", 0)]
    assert searcher.has_substring()
    for n in range(5):
        watch.write_batch(texts_session(f"w{n}", [f"cabinet number {n}"]), {})
    assert sorted(_hits(service, "abi")) == [("a", 0), *((f"w{n}", 0) for n in range(5))]
    assert all(not p for p in check_integrity(searcher).values())


def test_two_stale_processes_build_the_substring_index_once(make_index: Any) -> None:
    first, one = make_index("idx", shards=2)
    first.write_batch(texts_session("a", ["a cabinet of curiosities", "x"]), {})
    second, two = make_index("idx", shards=2)
    assert not first.has_substring() and not second.has_substring()
    assert _hits(one, "abi") == [("a", 0)]
    assert _hits(two, "abi") == [("a", 0)]  # its own stale "no": no second copy of each text
    assert all(not p for p in check_integrity(second).values())


def test_index_check_reports_documents_the_substring_index_missed(make_index: Any) -> None:
    shards, _ = make_index("idx", shards=1)
    shards.write_batch(texts_session("a", ["a cabinet of curiosities", "a second text"]), {})
    assert all(not p for p in check_integrity(shards).values())
    # what a writer with a stale "no coverage" left behind: coverage claimed, texts missing
    shards.shards[0].writer.execute("UPDATE meta SET value = '1' WHERE key = 'substring'")
    problems = check_integrity(shards)[0]
    assert problems == ["events_tri: the substring index holds 0 of 2 documents"]
