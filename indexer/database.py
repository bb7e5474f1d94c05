"""Storage and read side: the one SQLite binding of the index (APSW) — connections and pragmas.

APSW bundles a current SQLite (the same FTS5 everywhere) and can register FTS5 auxiliary
functions, which the ranking needs (indexer/matchcount.py). It releases the GIL while SQLite
runs, so shards searched from several threads and a writer thread really run in parallel. One
rule it enforces that the stdlib module does not: a connection is used by one thread at a time
(a second caller gets ThreadingViolationError) — hence the reader pool in indexer/shard.py.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import apsw

from indexer.matchcount import register

Error = apsw.Error


class Conn(Protocol):
    """What the index uses of a connection; rows come back untyped (SQLite is dynamically
    typed, and every query here knows its columns)."""

    def execute(self, sql: str, params: Any = ..., /) -> Any: ...

    def executemany(self, sql: str, params: Any, /) -> Any: ...

    def last_insert_rowid(self) -> int: ...

    def changes(self) -> int: ...

    def close(self, force: bool = ..., /) -> None: ...

#: Page cache per connection (KiB, negative by SQLite's convention). A shard's hot pages — the
#: FTS doclists of common terms — then stay in memory between queries; with SQLite's 2 MB
#: default every lookup is a pread.
CACHE_KIB = 64 * 1024
#: Page cache of a shard's writer connection (KiB). The writer appends (the right edge of
#: each B-tree, new FTS segments) and reads clean pages through the memory map, so a small
#: cache costs it nothing, while readers' caches sized for hot doclists would make a bulk
#: ingest's memory grow with the index (eight shards' writers up to eight times CACHE_KIB).
WRITER_CACHE_KIB = 8 * 1024
#: Memory-map shard files up to this size: readers share the OS page cache instead of copying.
MMAP_BYTES = 1 << 30
BUSY_TIMEOUT_MS = 5000


def connect(path: str | os.PathLike[str], *, readonly: bool = False,
            immutable: bool = False) -> Conn:
    """A connection with the index's pragmas and functions; the file must exist. `immutable`:
    read-only for a file nothing can change (a read-only mount), where SQLite cannot make the
    WAL's shared-memory file a read-only WAL database otherwise needs."""
    flags = apsw.SQLITE_OPEN_READONLY if readonly or immutable else apsw.SQLITE_OPEN_READWRITE
    name = os.fspath(path)
    if immutable:
        from urllib.parse import quote  # (a read-only mount only)

        name = "file:" + quote(os.path.abspath(name)) + "?immutable=1"
        flags |= apsw.SQLITE_OPEN_URI
    conn = apsw.Connection(name, flags=flags, statementcachesize=64)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}; PRAGMA mmap_size = {MMAP_BYTES}")
    _functions(conn)
    return conn


def writable_dir(path: str | os.PathLike[str]) -> bool:
    """Whether SQLite can write beside `path` (its journal, WAL and shared-memory files)."""
    return os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)


def connect_readonly(path: str | os.PathLike[str]) -> Conn:
    """A read-only connection, also to a WAL file on a read-only mount (immutable: SQLite
    cannot create the shared-memory file a WAL reader otherwise needs, and nothing can change
    the file there)."""
    try:
        return connect(path, readonly=True)
    except apsw.CantOpenError:
        return connect(path, immutable=True)


def memory() -> Conn:
    """A private in-memory database (snippet highlighting, reference rankings in tests)."""
    conn = apsw.Connection(":memory:")
    _functions(conn)
    return conn


def _functions(conn: apsw.Connection) -> None:
    register(conn)


