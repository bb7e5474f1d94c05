"""Storage and read side: one SQLite shard file — open (owner-only, WAL), verify, meta, readers.

A shard has one writer connection (used under its ShardSet's write lock) and a pool of reader
connections, one per thread reading at that moment: an APSW connection refuses a second thread
while a statement runs, and separate readers see only committed transactions (WAL snapshots).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, NamedTuple

import apsw

from indexer.database import WRITER_CACHE_KIB, Conn, connect, connect_readonly, writable_dir
from indexer.errors import INDEX_FAILED, INVALID_CONFIG, IndexOutdated, query_error
from indexer.locks import Lock
from indexer.schema import APPLICATION_ID, DDL, PAGE_SIZE, SCHEMA_VERSION, TRIGRAM_DOCS
from indexer.vectorsetting import OFF, open_vectors

if TYPE_CHECKING:
    from pathlib import Path


class ShardMeta(NamedTuple):
    """What a shard says about itself: generation counter, epoch id, substring coverage, the
    fingerprint of the redaction rules its records were made with and how many secrets of each
    kind its stored events had redacted. (A NamedTuple, as the read path's other records: a
    dataclass compiles its generated methods as its module loads.)"""

    generation: int
    epoch: str
    substring: bool
    redaction: str
    redacted: dict[str, int]


#: The meta rows with the file's application id and schema version as two more (keys no meta
#: row has): what opening a shard checks, in one statement.
_APP_ID, _VERSION = "~application_id", "~user_version"
_META_AND_MARKS = (f"SELECT key, value FROM meta UNION ALL SELECT '{_APP_ID}', application_id"
                   f" FROM pragma_application_id UNION ALL SELECT '{_VERSION}', user_version"
                   " FROM pragma_user_version")


def _meta_of(rows: dict[str, Any]) -> ShardMeta:
    redacted = {str(k)[len("redacted:"):]: int(v) for k, v in rows.items()
                if str(k).startswith("redacted:")}
    return ShardMeta(int(rows["generation"]), str(rows["epoch"]), rows["substring"] == "1",
                     str(rows.get("redaction") or "unrecorded"), redacted)


def _create_file(path: str) -> None:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)


def _never_initialized(path: str) -> bool:
    """Whether `path` holds no shard yet: no schema, no application id (its initializing
    transaction never committed: a kill or a write failure mid-way). Such a file is removed
    (with its journal) while an exclusive lock shows no one is initializing it right now."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError:
        return False
    # the application id sits at offset 68 of the header: a shard's is there once committed
    if len(header) == 100 and int.from_bytes(header[68:72], "big") == APPLICATION_ID:
        return False
    try:
        conn = connect(path)
    except apsw.Error:
        return False
    try:
        conn.execute("BEGIN EXCLUSIVE")
        try:
            empty = bool(conn.execute("PRAGMA application_id").fetchone()[0] == 0
                     and conn.execute("PRAGMA user_version").fetchone()[0] == 0
                     and conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0)
            if empty:
                for suffix in ("", "-journal", "-wal", "-shm"):
                    with suppress(FileNotFoundError):
                        os.unlink(path + suffix)
        finally:
            conn.execute("ROLLBACK")
    except apsw.Error:
        return False
    finally:
        conn.close()
    return empty


def _require_vectors_extra(semantic: str) -> None:
    """MissingExtra unless the semantic extra is installed, for a shard asked to keep vectors
    (a write would need the model: it fails at open, not mid-batch)."""
    if semantic != OFF:
        from indexer.semantic import require_extra

        require_extra()


class Shard:
    """One shard file: `writer` (under the ShardSet's write lock) and `reader()` connections.

    With `read_only` the shard opens no writer: the file must already be a shard, the
    connection that verifies it becomes the first pooled reader, and `writer` raises."""

    def __init__(self, path: str | os.PathLike[str], index: int, shard_count: int, *,
                 substring: bool, redaction: str = "off", semantic: str = "off",
                 read_only: bool = False) -> None:
        #: the shard file, as a string (a short read opens shards without pathlib; `path` is
        #: the same file as a Path)
        self.file = path = os.fspath(path)
        #: its name, as messages give it
        self.name = os.path.basename(path)
        self.index = index
        self._idle: list[Conn] = []
        self._pool_lock = Lock()
        self._closed = False
        self._writer: Conn | None = None
        if read_only:
            self._open_read_only(index, shard_count, redaction, semantic)
            return
        # A file a crash left empty or before its first commit (created, never initialized) is
        # as good as absent: it is made again, not called damaged until a reindex.
        fresh = (not os.path.exists(path) or os.stat(path).st_size == 0
                 or _never_initialized(path))
        #: A shard in a directory this process cannot write (a read-only mount, a copy it does
        #: not own) is opened read-only: reads work, writes fail as SQLite's "readonly".
        self.readonly = not fresh and not writable_dir(path)
        try:
            if fresh and not os.path.exists(path):
                _create_file(path)
            if not self.readonly and stat.S_IMODE(os.stat(path).st_mode) != 0o600:
                os.chmod(path, 0o600)
            self._writer = self._connect()
        except (apsw.Error, OSError) as exc:
            raise query_error(INDEX_FAILED, f"cannot open shard {self.name}: {exc}") from exc
        try:
            if fresh:
                self._initialize(index, shard_count, substring, redaction)
            rows = self._verified(self.writer, index, shard_count, redaction)
            _require_vectors_extra(semantic)
            #: the vectors this shard keeps (indexer/vectorsetting.py), "off": none
            self.semantic = open_vectors(self.writer, semantic, self.name,
                                         readonly=self.readonly,
                                         stored=str(rows.get("semantic", OFF)))
            if not self.readonly:
                # one statement per call: APSW runs the statements after one that returns a
                # row (journal_mode does) only as its cursor is stepped
                self.writer.execute("PRAGMA journal_mode = WAL").fetchall()
                self.writer.execute("PRAGMA synchronous = NORMAL")
                self.writer.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
                self.writer.execute("PRAGMA mmap_size = 0").fetchall()
            meta = _meta_of(rows)
        except apsw.Error as exc:
            self.writer.close()
            raise query_error(INDEX_FAILED, f"cannot open shard {self.name}: {exc}") from exc
        except BaseException:
            self.writer.close()
            raise
        self.epoch = meta.epoch
        self.substring = meta.substring

    def _open_read_only(self, index: int, shard_count: int, redaction: str,
                        semantic: str) -> None:
        self.readonly = not writable_dir(self.file)
        conn = self.open_reader()
        try:
            rows = self._verified(conn, index, shard_count, redaction)
            _require_vectors_extra(semantic)
            self.semantic = open_vectors(conn, semantic, self.name, readonly=True,
                                         stored=str(rows.get("semantic", OFF)))
            meta = _meta_of(rows)
        except apsw.Error as exc:
            conn.close()
            raise query_error(INDEX_FAILED, f"cannot open shard {self.name}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        self._idle.append(conn)
        self.epoch = meta.epoch
        self.substring = meta.substring

    @property
    def path(self) -> Path:
        """The shard file as a Path."""
        from pathlib import Path

        return Path(self.file)

    @property
    def writer(self) -> Conn:
        """The writer connection (used under the ShardSet's write lock)."""
        if self._writer is None:
            raise query_error(INDEX_FAILED, f"shard {self.name} is open for reading only")
        return self._writer

    def _connect(self) -> Conn:
        return connect_readonly(self.file) if self.readonly else connect(self.file)

    def _initialize(self, index: int, shard_count: int, substring: bool, redaction: str) -> None:
        c = self.writer
        # Compressed blocks and FTS5 leaves pack better into 8 KB pages than into 4 KB.
        c.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        # Pages a segment merge frees go back to the file system (indexer/segments.py); the
        # mode can only be chosen before the first table.
        c.execute("PRAGMA auto_vacuum = INCREMENTAL")
        c.execute("BEGIN IMMEDIATE")
        import secrets  # (and random): only a new shard draws its epoch

        try:
            for statement in DDL:
                c.execute(statement)
            c.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", [
                ("generation", "0"), ("epoch", secrets.token_hex(8)),
                ("substring", "1" if substring else "0"), (TRIGRAM_DOCS, "0"),
                ("shard_index", str(index)), ("shard_count", str(shard_count)),
                ("redaction", redaction),
            ])
            c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def _verified(self, conn: Conn, index: int, shard_count: int,
                  redaction: str) -> dict[str, Any]:
        """The shard's meta rows, once its application id, schema version and meta rows show
        it is a shard of this schema, this index and these redaction rules (one statement: a
        short `recall search` opens every shard)."""
        rows = dict(conn.execute(_META_AND_MARKS).fetchall())
        app_id, version = rows.pop(_APP_ID), rows.pop(_VERSION)
        if app_id != APPLICATION_ID:
            raise query_error(INDEX_FAILED, f"{self.name} is not a session-recall shard "
                              f"(application id {app_id:#x})")
        if version < SCHEMA_VERSION:
            raise IndexOutdated(f"{self.name} has schema version {version}; this build "
                                f"writes {SCHEMA_VERSION}")
        if version > SCHEMA_VERSION:
            raise query_error(INDEX_FAILED, f"{self.name} has schema version {version}; "
                              f"this build reads {SCHEMA_VERSION}",
                              hint="use the newer session-recall that wrote it")
        stored = {key: rows[key] for key in ("shard_index", "shard_count") if key in rows}
        rules = rows.get("redaction")
        if stored != {"shard_index": str(index), "shard_count": str(shard_count)}:
            raise query_error(INVALID_CONFIG, f"{self.name} belongs to a {stored.get('shard_count')}"
                              f"-shard index, not {shard_count}", hint="open with the same shard count")
        if rules != redaction:
            # The stored raw events and texts were redacted by other rules (or none, or by an
            # older build that recorded none): serving or extending them would mix the two.
            raise IndexOutdated(f"{self.name} was built with redaction rules "
                                f"{rules or 'unrecorded'}; the settings now ask for {redaction}")
        return rows

    def meta(self, conn: Conn | None = None) -> ShardMeta:
        """The shard's meta row as `conn` (default: a pooled reader) sees it."""
        if conn is None:
            with self.reader() as reader:
                return self.meta(reader)
        return _meta_of(dict(conn.execute("SELECT key, value FROM meta").fetchall()))

    @contextmanager
    def reader(self) -> Iterator[Conn]:
        """A reader connection for this thread's use until the block ends."""
        with self._pool_lock:
            if self._closed:
                raise query_error(INDEX_FAILED, f"shard {self.name} is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self.open_reader()
        try:
            yield conn
        finally:
            with self._pool_lock:
                if self._closed:
                    conn.close()
                else:
                    self._idle.append(conn)

    def open_reader(self) -> Conn:
        """A separate connection whose read transaction can be pinned (WAL snapshot)."""
        try:
            conn = self._connect()
            conn.execute("PRAGMA query_only = 1")
        except apsw.Error as exc:
            raise query_error(INDEX_FAILED, f"cannot read shard {self.name}: {exc}") from exc
        return conn

    def tracking(self) -> dict[str, int]:
        with self.reader() as conn:
            return {str(s): int(p) for s, p in conn.execute("SELECT source, position FROM tracking")}

    def close(self) -> None:
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        if self._writer is not None:
            self._writer.close()
