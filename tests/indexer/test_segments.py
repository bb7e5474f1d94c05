"""FTS5 segments (indexer/segments.py): the structure record read right, a bulk write's tables
merged when it grew them by a good part, answers unchanged."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import apsw
import pytest

import indexer.pipeline
import indexer.segments
import indexer.shardset
from indexer import IndexConfig, QueryService, ShardSet, shard_stats
from indexer.digest import index_digest
from indexer.errors import INDEX_FAILED
from indexer.routing import shard_file_name
from indexer.segments import Structure, decode_structure, needs_merge, read_structure
from projections.errors import SessionQueryError

from .helpers import texts_session


def _scratch_structure(conn: apsw.Connection) -> Structure:
    return decode_structure(bytes(conn.execute(
        "SELECT block FROM t_data WHERE id = 10").fetchone()[0]))


@pytest.mark.parametrize("options", ["", ", content=''", ", content='', contentless_delete=1"])
def test_the_structure_record_lists_one_segment_per_transaction_until_optimized(
        options: str) -> None:
    conn = apsw.Connection(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(body{options})")
    conn.execute("INSERT INTO t(t, rank) VALUES ('automerge', 0)")  # keep every segment
    for n in range(7):
        conn.execute("INSERT INTO t(rowid, body) VALUES (?, ?)",
                     (n + 1, " ".join(f"w{n}x{i}" for i in range(400))))
        found = _scratch_structure(conn)
        assert found.segments == n + 1
        assert found.pages >= n + 1
    conn.execute("INSERT INTO t(t) VALUES ('optimize')")
    merged = _scratch_structure(conn)
    assert merged.segments == 1
    assert 1 <= merged.pages <= found.pages
    assert conn.execute("SELECT count(*) FROM t WHERE t MATCH 'w3x17'").fetchone()[0] == 1


def test_needs_merge_takes_a_write_that_grew_a_table_by_a_quarter() -> None:
    assert needs_merge(Structure((1,), 30), Structure((1, 1), 40))
    assert not needs_merge(Structure((1,), 31), Structure((1, 1), 40))  # 9 of 40: too little
    assert not needs_merge(Structure((), 0), Structure((1,), 40))  # one segment: nothing to do
    assert not needs_merge(Structure((3,), 40), Structure((3,), 40))  # nothing written


def _batches() -> list[tuple[list[object], dict[str, int]]]:
    out: list[tuple[list[object], dict[str, int]]] = []
    for s in range(9):
        records = texts_session(f"s{s}", [f"needle {s} {i} common words "
                                          + " ".join(f"w{s}x{i}x{k}" for k in range(60))
                                          for i in range(30)])
        out += [(records[:12], {}), (records[12:], {})]
    return out


def _page(page: dict[str, Any]) -> dict[str, Any]:
    """A page with whether it has a next cursor (cursors are signed with each index's key)."""
    return {**page, "nextCursor": "nextCursor" in page}


QUERIES = ["needle", "needle 4", "common words", "7 3", "absent"]


def _file_pages(shards: ShardSet) -> list[tuple[int, int]]:
    """(auto_vacuum mode, free pages) of each shard file."""
    return [(s.writer.execute("PRAGMA auto_vacuum").fetchone()[0],
             s.writer.execute("PRAGMA freelist_count").fetchone()[0]) for s in shards]


@pytest.mark.parametrize(("older_file", "threads"), [(False, 1), (True, 1), (False, 2),
                                                    (True, 2)])
def test_a_bulk_write_merges_the_segments_it_grew_and_answers_do_not_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, older_file: bool, threads: int) -> None:
    monkeypatch.setattr(indexer.pipeline, "GROUP_RECORDS", 1)  # a transaction per batch
    monkeypatch.setattr(indexer.shardset, "MERGE_THREADS", threads)
    with ShardSet(tmp_path / "sync", IndexConfig(shards=2)) as sync, \
            ShardSet(tmp_path / "piped", IndexConfig(shards=2)) as piped:
        assert _file_pages(piped) == [(2, 0), (2, 0)]  # created with incremental auto-vacuum
        if older_file:  # as a build before segment merges created them
            for shard in piped:
                shard.writer.execute("PRAGMA auto_vacuum = NONE; VACUUM")
            assert _file_pages(piped) == [(0, 0), (0, 0)]
        for records, positions in _batches():
            sync.write_batch(records, positions)  # type: ignore[arg-type]
        with piped.pipeline():
            for records, positions in _batches():
                piped.submit(records, positions)  # type: ignore[arg-type]
        unmerged = sync.structures()
        merged = piped.structures()
        assert all(unmerged[shard, "events_fts"].segments > 1 for shard in (0, 1))
        assert all(merged[shard, "events_fts"].segments == 1 for shard in (0, 1))
        assert all(merged[shard, "events_tri"].segments == 0 for shard in (0, 1))
        assert _file_pages(piped) == [(2, 0), (2, 0)]  # the merged segments' pages given back
        assert [row["segments"] for row in shard_stats(piped)] == [1, 1]  # `recall index stats`
        assert [row["segments"] for row in shard_stats(sync)] == \
            [unmerged[shard, "events_fts"].segments for shard in (0, 1)]
        assert index_digest(piped) == index_digest(sync)
        a, b = QueryService(sync, clock=lambda: 10_000.0), QueryService(piped, clock=lambda: 10_000.0)
        try:
            for q in QUERIES:
                assert _page(b.search_sessions({"query": q, "limit": 4})) == \
                    _page(a.search_sessions({"query": q, "limit": 4}))
                assert _page(b.search_events({"sessionId": "s4", "query": q, "limit": 5})) == \
                    _page(a.search_events({"sessionId": "s4", "query": q, "limit": 5}))
        finally:
            a.close()
            b.close()

        # A small write into the merged index leaves its two segments as they are.
        assert merged[piped.shard_for("late").index, "events_fts"].pages >= 8
        with piped.pipeline():
            piped.submit(texts_session("late", ["needle late"]), {})  # type: ignore[arg-type]
        shard = piped.shard_for("late").index
        assert piped.structures()[shard, "events_fts"].segments == 2
        with piped.shard_for("late").reader() as conn:
            assert read_structure(conn, "events_fts").segments == 2


def test_shards_merge_side_by_side_and_a_failed_merge_leaves_its_shard_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexer.pipeline, "GROUP_RECORDS", 1)
    monkeypatch.setattr(indexer.shardset, "MERGE_THREADS", 2)
    merge = indexer.segments.merge_segments
    seen: list[tuple[str, str]] = []

    def failing_in_shard_0(conn: Any, table: str) -> None:
        seen.append((threading.current_thread().name.split("_")[0], table))
        if conn.filename.endswith(shard_file_name(0)):
            raise apsw.SQLError("disk I/O in shard 0")
        merge(conn, table)

    monkeypatch.setattr(indexer.segments, "merge_segments", failing_in_shard_0)
    with ShardSet(tmp_path / "piped", IndexConfig(shards=2)) as piped:
        with pytest.raises(SessionQueryError) as caught, piped.pipeline():
            for records, positions in _batches():
                piped.submit(records, positions)  # type: ignore[arg-type]
        assert caught.value.code == INDEX_FAILED
        assert {name for name, _ in seen} == {"recall-merge"}
        structures = piped.structures()
        assert structures[0, "events_fts"].segments > 1  # rolled back
        assert structures[1, "events_fts"].segments == 1  # merged beside it all the same
