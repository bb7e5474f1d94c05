"""Storage and read side: one SQLite shard file — open (owner-only, WAL), verify, meta, tracking."""

from __future__ import annotations

import os
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from indexer.errors import INDEX_FAILED, INVALID_CONFIG, query_error
from indexer.schema import APPLICATION_ID, DDL, SCHEMA_VERSION


@dataclass(frozen=True, slots=True)
class ShardMeta:
    """What a shard says about itself: generation counter, epoch id, substring mode."""

    generation: int
    epoch: str
    substring: bool


def _connect(path: Path) -> sqlite3.Connection:
    # Autocommit mode: every transaction is an explicit BEGIN…COMMIT we can see in the code.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


def _create_file(path: Path) -> None:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)


class Shard:
    """One shard file. `conn` is the writer and default reader; pinned snapshots open their own."""

    def __init__(self, path: Path, index: int, shard_count: int, *, substring: bool) -> None:
        self.path = path
        self.index = index
        # A file a crash left empty (created, never initialized) is as good as absent.
        fresh = not path.exists() or path.stat().st_size == 0
        try:
            if fresh and not path.exists():
                _create_file(path)
            os.chmod(path, 0o600)
            self.conn = _connect(path)
            if fresh:
                self._initialize(index, shard_count, substring)
            self._verify(index, shard_count)
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise query_error(INDEX_FAILED, f"cannot open shard {path.name}: {exc}") from exc
        self.substring = self.meta().substring

    def _initialize(self, index: int, shard_count: int, substring: bool) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            for statement in DDL:
                c.execute(statement)
            c.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", [
                ("generation", "0"), ("epoch", secrets.token_hex(8)),
                ("substring", "1" if substring else "0"),
                ("shard_index", str(index)), ("shard_count", str(shard_count)),
            ])
            c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def _verify(self, index: int, shard_count: int) -> None:
        app_id = self.conn.execute("PRAGMA application_id").fetchone()[0]
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if app_id != APPLICATION_ID:
            raise query_error(INDEX_FAILED, f"{self.path.name} is not a session-recall shard "
                              f"(application id {app_id:#x})")
        if version != SCHEMA_VERSION:
            raise query_error(INDEX_FAILED, f"{self.path.name} has schema version {version}; "
                              f"this build reads {SCHEMA_VERSION}", hint="rebuild the index")
        stored = dict(self.conn.execute(
            "SELECT key, value FROM meta WHERE key IN ('shard_index', 'shard_count')").fetchall())
        if stored != {"shard_index": str(index), "shard_count": str(shard_count)}:
            raise query_error(INVALID_CONFIG, f"{self.path.name} belongs to a {stored.get('shard_count')}"
                              f"-shard index, not {shard_count}", hint="open with the same shard count")

    def meta(self, conn: sqlite3.Connection | None = None) -> ShardMeta:
        rows = dict((conn or self.conn).execute("SELECT key, value FROM meta").fetchall())
        return ShardMeta(int(rows["generation"]), str(rows["epoch"]), rows["substring"] == "1")

    def open_reader(self) -> sqlite3.Connection:
        """A separate connection whose read transaction can be pinned (WAL snapshot)."""
        conn = _connect(self.path)
        conn.execute("PRAGMA query_only = 1")
        return conn

    def tracking(self) -> dict[str, int]:
        return {str(s): int(p) for s, p in self.conn.execute("SELECT source, position FROM tracking")}

    def close(self) -> None:
        self.conn.close()
