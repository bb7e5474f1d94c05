"""The substring (trigram) index stays complete when another process builds it under a running
writer (`recall watch` while a first `--substring` search runs), and `index check` sees a
trigram index that missed documents."""

from __future__ import annotations

from typing import Any

from indexer.digest import index_digest
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


def test_the_digest_tells_a_substring_index_that_missed_documents(make_index: Any) -> None:
    texts = ["a cabinet of curiosities", "a second text"]
    whole, _ = make_index("whole", shards=1, substring=True)
    whole.write_batch(texts_session("a", texts), {})
    missed, _ = make_index("missed", shards=1)
    missed.write_batch(texts_session("a", texts), {})
    assert index_digest(whole)["substring"] == {"built": "all", "missing": 0}
    # what a writer with a stale "no coverage" left behind: coverage claimed, trigram rows missing
    missed.shards[0].writer.execute("UPDATE meta SET value = '1' WHERE key = 'substring'")
    assert index_digest(missed)["substring"] == {"built": "all", "missing": 2}
    assert index_digest(missed)["digest"] != index_digest(whole)["digest"]
    assert index_digest(missed)["events"] == index_digest(whole)["events"]


def test_the_digest_tells_an_index_with_substring_coverage_from_one_without(
        make_index: Any) -> None:
    plain, _ = make_index("plain", shards=2)
    built, _ = make_index("built", shards=3)
    for shards in (plain, built):
        shards.write_batch(texts_session("a", ["a cabinet of curiosities", "x"]), {})
    assert index_digest(plain) == index_digest(built)  # the shard count does not enter it
    built.ensure_substring()
    assert index_digest(built)["substring"] == {"built": "all", "missing": 0}
    assert index_digest(plain)["substring"] == {"built": "none", "missing": 0}
    assert index_digest(plain)["digest"] != index_digest(built)["digest"]
    fresh, _ = make_index("fresh", shards=1, substring=True)
    fresh.write_batch(texts_session("a", ["a cabinet of curiosities", "x"]), {})
    assert index_digest(fresh) == index_digest(built)  # built later or from the start: alike
