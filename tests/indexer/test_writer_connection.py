"""A shard's writer connection runs as the index's writes need it: WAL with synchronous=NORMAL
(a commit does not fsync; the store is the authority and replay repairs a lost tail) and a
page cache bounded by WRITER_CACHE_KIB, so a bulk ingest's memory does not grow with the index,
while reader connections keep the larger cache their hot doclists use."""

from __future__ import annotations

from pathlib import Path

from indexer import IndexConfig, ShardSet
from indexer.database import CACHE_KIB, WRITER_CACHE_KIB


def test_the_writer_connection_has_wal_synchronous_normal_and_a_bounded_cache(
        tmp_path: Path) -> None:
    for _ in range(2):  # created, then opened again
        with ShardSet(tmp_path / "index", IndexConfig(shards=2)) as shards:
            for shard in shards:
                w = shard.writer
                assert w.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
                assert w.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
                assert w.execute("PRAGMA cache_size").fetchone()[0] == -WRITER_CACHE_KIB
                with shard.reader() as conn:
                    assert conn.execute("PRAGMA cache_size").fetchone()[0] == -CACHE_KIB
    assert WRITER_CACHE_KIB < CACHE_KIB
