"""Storage and read side: operator helpers — per-shard stats, integrity check, optimize."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from indexer import database, matchcount
from indexer.routing import shard_file_name
from indexer.schema import APPLICATION_ID, CJK, SCHEMA_VERSION, TRIGRAM_DOCS
from indexer.segments import FTS_TABLES, merge_segments, read_structure, release_free_pages
from indexer.shardset import ShardSet


def shard_stats(shardset: ShardSet) -> list[dict[str, Any]]:
    """Per shard: sessions, events, documents, bytes on disk (db + WAL), the token index's FTS5
    segments (indexer/segments.py), generation, epoch, the
    redaction rules' fingerprint and the secrets redacted, by kind (never a secret itself)."""
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
                "segments": read_structure(c, "events_fts").segments,
                "substring": meta.substring, "redaction": meta.redaction,
                "redacted": dict(sorted(meta.redacted.items())),
                # after the reader registered its functions: what this shard's searches run
                "matchCount": matchcount.implementation(),
            })
    return out


def redaction_totals(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Secrets redacted per kind over `shard_stats` rows, most frequent first."""
    totals: dict[str, int] = {}
    for row in rows:
        for kind, n in row.get("redacted", {}).items():
            totals[kind] = totals.get(kind, 0) + int(n)
    return dict(sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])))


def check_integrity(shardset: ShardSet) -> dict[int, list[str]]:
    """SQLite integrity_check plus FTS5 integrity-check per shard; an empty list means healthy."""
    problems: dict[int, list[str]] = {}
    for shard in shardset:
        with shardset.writing():
            found = _check_shard(shard.writer, readonly=shard.readonly)
        problems[shard.index] = found
    return problems


def _check_shard(c: Any, *, readonly: bool = False) -> list[str]:
    # SQLite's own check covers the FTS5 tables too; their 'integrity-check' command is an
    # INSERT, which a read-only shard refuses: it is skipped there.
    found = [str(r[0]) for r in c.execute("PRAGMA integrity_check") if r[0] != "ok"]
    for table in () if readonly else ("events_fts", "events_tri"):
        try:
            c.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
        except Exception as exc:  # an FTS corruption surfaces as a generic SQLite error
            found.append(f"{table}: {exc}")
    found.extend(trigram_coverage(c))
    return found


def trigram_coverage(c: Any) -> list[str]:
    """Whether the trigram index holds every document it should: all of them once the shard
    has substring coverage, else those with CJK text. A writer that missed documents leaves
    substring search blind to them while SQLite's and FTS5's own checks see nothing wrong."""
    meta = dict(c.execute("SELECT key, value FROM meta WHERE key IN ('substring', ?)",
                          (TRIGRAM_DOCS,)).fetchall())
    which = "" if meta.get("substring") == "1" else f" AND {CJK} = 1"
    counted = TRIGRAM_DOCS in meta
    # The index itself only knows documents with a trigram (three code points or more).
    expected = int(c.execute(f"SELECT count(*) FROM events e WHERE e.len >= {1 if counted else 3}"
                             f"{which}").fetchone()[0])
    if counted:
        held = int(meta[TRIGRAM_DOCS])
    else:  # a shard from before the count: read the index itself (slower)
        c.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.tri_docs"
                  " USING fts5vocab(main, events_tri, 'instance')")
        try:
            held = int(c.execute("SELECT count(DISTINCT doc) FROM temp.tri_docs").fetchone()[0])
        finally:
            c.execute("DROP TABLE temp.tri_docs")
    if held == expected:
        return []
    return [f"events_tri: the substring index holds {held} of {expected} documents"]


def optimize_shards(shardset: ShardSet) -> None:
    """Merge FTS b-trees and checkpoint the WAL; run when ingest is quiet."""
    with shardset.writing():
        for shard in shardset:
            c = shard.writer
            for table in FTS_TABLES:
                merge_segments(c, table)
            release_free_pages(c)
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def check_generation(root: Path, shard_count: int) -> list[str]:
    """Problems of one generation's shard files, found without opening them as an index (so a
    damaged file is reported, not raised): missing or empty files, foreign or old files,
    `PRAGMA quick_check` findings and FTS5 integrity-check failures. Empty means healthy."""
    problems: list[str] = []
    for index in range(shard_count):
        path = root / shard_file_name(index)
        if not path.exists():
            problems.append(f"{path.name}: missing")
            continue
        if path.stat().st_size == 0:
            problems.append(f"{path.name}: empty")
            continue
        try:
            problems.extend(f"{path.name}: {p}" for p in _check_file(path))
        except database.Error as exc:
            problems.append(f"{path.name}: {exc}")
    return problems


def _check_file(path: Path) -> list[str]:
    found: list[str] = []
    readonly = not database.writable_dir(path)
    conn = database.connect_readonly(path) if readonly else database.connect(path)
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if app_id != APPLICATION_ID:
            return [f"not a session-recall shard (application id {app_id:#x})"]
        if version != SCHEMA_VERSION:
            found.append(f"schema version {version}, this build reads {SCHEMA_VERSION}")
        found.extend(str(r[0]) for r in conn.execute("PRAGMA quick_check") if r[0] != "ok")
        tables = [str(r[0]) for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%USING fts5%'")]
        for table in () if readonly else tables:  # (see _check_shard)
            conn.execute("BEGIN")
            try:
                conn.execute(f'INSERT INTO "{table}"("{table}") VALUES (\'integrity-check\')')
            except database.Error as exc:
                found.append(f"{table}: {exc}")
            finally:
                conn.execute("ROLLBACK")
        if "events_tri" in tables:
            found.extend(trigram_coverage(conn))
    finally:
        conn.close()
    return found
