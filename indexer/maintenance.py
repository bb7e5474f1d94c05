"""Storage and read side: operator helpers — per-shard stats, integrity check, optimize."""

from __future__ import annotations

import os
from typing import Any

from indexer.shardset import ShardSet


def shard_stats(shardset: ShardSet) -> list[dict[str, Any]]:
    """Per shard: sessions, events, documents, bytes on disk (db + WAL), generation, epoch."""
    out: list[dict[str, Any]] = []
    for shard in shardset:
        size = sum(os.path.getsize(p) for p in (shard.path, shard.path.with_name(
            shard.path.name + "-wal")) if p.exists())
        with shard.reader() as c:
            meta = shard.meta(c)
            out.append({
                "shard": shard.index, "file": shard.path.name,
                "sessions": c.execute("SELECT count(*) FROM sessions").fetchone()[0],
                "events": c.execute("SELECT count(*) FROM events").fetchone()[0],
                "documents": c.execute("SELECT count(*) FROM events WHERE len > 0").fetchone()[0],
                "textChars": c.execute("SELECT coalesce(sum(len), 0) FROM events").fetchone()[0],
                "bytes": size, "generation": meta.generation, "epoch": meta.epoch,
                "substring": meta.substring,
            })
    return out


def check_integrity(shardset: ShardSet) -> dict[int, list[str]]:
    """SQLite integrity_check plus FTS5 integrity-check per shard; an empty list means healthy."""
    problems: dict[int, list[str]] = {}
    for shard in shardset:
        with shardset.writing():
            found = _check_shard(shard.writer)
        problems[shard.index] = found
    return problems


def _check_shard(c: Any) -> list[str]:
    found = [str(r[0]) for r in c.execute("PRAGMA integrity_check") if r[0] != "ok"]
    for table in ("events_fts", "events_tri"):
        try:
            c.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
        except Exception as exc:  # an FTS corruption surfaces as a generic SQLite error
            found.append(f"{table}: {exc}")
    return found


def optimize_shards(shardset: ShardSet) -> None:
    """Merge FTS b-trees and checkpoint the WAL; run when ingest is quiet."""
    with shardset.writing():
        for shard in shardset:
            c = shard.writer
            for table in ("events_fts", "events_tri"):
                c.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
