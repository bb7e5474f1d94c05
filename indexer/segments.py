"""Storage side: the FTS5 segments of a shard's full-text tables, and when to merge them.

FTS5 writes each transaction's new terms as a segment and merges segments in the background
only level by level (`automerge`), so a shard built by a large ingest keeps many segments, and
every term lookup probes each of them: a rare word's floor pass costs several times what it
costs after an `optimize` that merged them into one. After a bulk write the shard set merges a table whose leaf pages the
write grew by at least `MERGE_AFTER_GROWTH` of its size: the merge rewrites the whole table,
so its cost stays a bounded multiple of what the write itself added. The pages the merged
segments held are given back to the file system (shards are created with incremental
auto-vacuum; a file an older build created is converted once, by a VACUUM as long as a merge):
left in the file they would make the index markedly larger.

The segment list is read from the table's structure record (`<table>_data` row 10; format of
SQLite's fts5_index.c, fts5StructureDecode): O(1), no scan.
"""

from __future__ import annotations

from dataclasses import dataclass

from indexer.database import Conn

#: The full-text tables of a shard (indexer/schema.py).
FTS_TABLES = ("events_fts", "events_tri")
#: Merge a table when a bulk write grew its leaf pages by at least this fraction of the total.
MERGE_AFTER_GROWTH = 0.25
#: The record id of an FTS5 table's structure record, and the marker of its version 2 layout.
_STRUCTURE_ID = 10
_STRUCTURE_V2 = b"\xff\x00\x00\x01"
#: `PRAGMA auto_vacuum`'s value for incremental mode.
INCREMENTAL = 2


@dataclass(frozen=True, slots=True)
class Structure:
    """An FTS5 table's segments: how many on each level, and their leaf pages in all."""

    levels: tuple[int, ...]
    pages: int

    @property
    def segments(self) -> int:
        return sum(self.levels)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's varint (big-endian groups of 7 bits; the 9th byte carries 8)."""
    value = 0
    for k in range(9):
        byte = data[at + k]
        if k == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at + k + 1
    raise AssertionError("unreachable")


def decode_structure(data: bytes) -> Structure:
    """The segments a structure record lists."""
    at = 4  # the cookie
    v2 = data[at:at + 4] == _STRUCTURE_V2
    if v2:
        at += 4
    level_count, at = _varint(data, at)
    _, at = _varint(data, at)  # segments in all (counted below, per level)
    _, at = _varint(data, at)  # write counter
    levels: list[int] = []
    pages = 0
    for _ in range(level_count):
        _, at = _varint(data, at)  # segments being merged into the next level
        count, at = _varint(data, at)
        for _ in range(count):
            _, at = _varint(data, at)  # segment id
            first, at = _varint(data, at)
            last, at = _varint(data, at)
            pages += last - first + 1
            for _ in range(5 if v2 else 0):  # origins, tombstone pages and entries, entries
                _, at = _varint(data, at)
        levels.append(count)
    return Structure(tuple(levels), pages)


def read_structure(conn: Conn, table: str) -> Structure:
    """`table`'s segments now (an empty table: none)."""
    if table not in FTS_TABLES:
        raise ValueError(f"not a full-text table of a shard: {table!r}")
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = ?",
                       (_STRUCTURE_ID,)).fetchone()
    return decode_structure(bytes(row[0])) if row is not None else Structure((), 0)


def needs_merge(before: Structure, after: Structure) -> bool:
    """Whether a bulk write that took a table from `before` to `after` should merge it."""
    grown = after.pages - before.pages
    return after.segments > 1 and grown > 0 and grown >= MERGE_AFTER_GROWTH * after.pages


def merge_segments(conn: Conn, table: str) -> None:
    """Merge all of `table`'s segments into one (inside the caller's transaction, if any)."""
    if table not in FTS_TABLES:
        raise ValueError(f"not a full-text table of a shard: {table!r}")
    conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")


def release_free_pages(conn: Conn) -> None:
    """Give the shard file's free pages back (outside any transaction): at once with
    incremental auto-vacuum; a file created without it is converted first (one VACUUM)."""
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != INCREMENTAL:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("VACUUM")  # (the mode of an existing file changes only by a VACUUM)
    conn.execute("PRAGMA incremental_vacuum").fetchall()  # it frees pages as it is stepped
