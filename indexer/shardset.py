"""Storage and read side: N shard files under one root — routing, batched writes, lifecycle."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import TYPE_CHECKING, Any

import apsw

from indexer.config import IndexConfig
from indexer.errors import INDEX_FAILED, IndexOutdated, query_error, substring_missing
from indexer.locks import RLock
from indexer.routing import shard_file_name, shard_of
from indexer.shard import Shard

if TYPE_CHECKING:
    from indexer.pipeline import WriterThread
    from indexer.segments import Structure
    from indexer.writer import ShardWriter
    from projections.records import IndexRecord

#: `progress(shard index, done, total)` of a long index operation.
Progress = Callable[[int, int, int], None]

KEY_FILE = "cursor.key"
#: Tracking sources of one session's store position, e.g. `store:<sid>`.
SESSION_SOURCE_PREFIX = "store:"
#: Shards whose segments `merge_grown` merges at once (one thread each).
MERGE_THREADS = max(1, min(4, os.cpu_count() or 1))


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _load_key(root: str, *, create: bool = True) -> bytes:
    """The HMAC key that signs cursors; created once, owner-only, kept beside the shards."""
    path = os.path.join(root, KEY_FILE)
    if not create:
        return _read(path)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return _read(path)
    import secrets  # (and random): only a new index draws its key

    with os.fdopen(fd, "wb") as handle:
        handle.write(secrets.token_bytes(32))
    return _read(path)


class ShardSet:
    """The shards of one index root. Writes: `write_batch`; reads go through QueryService."""

    def __init__(self, root: str | os.PathLike[str], config: IndexConfig | None = None, *,
                 key_dir: str | os.PathLike[str] | None = None,
                 reset_outdated: bool = False, read_only: bool = False) -> None:
        """`key_dir` holds the cursor-signing key (default: `root`). Generations of one index
        share it, so a cursor from a replaced generation is STALE rather than INVALID.

        A shard of an older schema version, or built under other redaction rules (a different
        `config.redaction` fingerprint), raises IndexOutdated (the embedded runtime rebuilds a
        new generation from its store); with `reset_outdated` such shard files are deleted and
        start empty instead — for owners whose source can be replayed into them (a Kafka index
        worker re-reads its partitions from the compacted documents topic).

        `read_only`: for a process that only reads an index that exists (root, key and every
        shard): nothing is created or changed, no shard opens a writer (indexer/shard.py) and
        writes fail; a missing or outdated part raises as above."""
        self.config = config or IndexConfig()
        # paths as strings: a read (`recall search`) opens the shards without loading pathlib
        self.root = os.fspath(root)
        self.key_dir = None if key_dir is None else os.fspath(key_dir)
        self.read_only = read_only
        try:
            if not read_only:
                os.makedirs(self.root, mode=0o700, exist_ok=True)
                if stat.S_IMODE(os.stat(self.root).st_mode) != 0o700:  # (a read-only copy is so)
                    os.chmod(self.root, 0o700)
            self.key = _load_key(self.key_dir if self.key_dir is not None else self.root,
                                 create=not read_only)
        except OSError as exc:
            raise query_error(INDEX_FAILED, f"cannot open index root {self.root}: {exc}") from exc
        self.shards: list[Shard] = []
        self._writers: list[ShardWriter] = []
        #: One writer at a time per index (a batch spans shards; the rebuild of substring
        #: coverage writes too); readers never take it.
        self._write_lock = RLock()
        self._pipeline: WriterThread | None = None
        #: Whether the open pipeline writes through a child process (indexer/writerproc.py).
        self._remote = False
        try:
            if read_only:
                for i in range(self.config.shards):  # (appended one by one: `close` on error)
                    self.shards.append(Shard(os.path.join(self.root, shard_file_name(i)), i,
                                             self.config.shards, substring=self.config.substring,
                                             redaction=self.config.redaction,
                                             semantic=self.config.semantic, read_only=True))
                return
            from indexer.writer import ShardWriter

            for i in range(self.config.shards):
                path = os.path.join(self.root, shard_file_name(i))
                try:
                    shard = Shard(path, i, self.config.shards, substring=self.config.substring,
                                  redaction=self.config.redaction,
                                  semantic=self.config.semantic)
                except IndexOutdated:
                    if not reset_outdated:
                        raise
                    for suffix in ("", "-wal", "-shm"):
                        with suppress(FileNotFoundError):
                            os.unlink(path + suffix)
                    shard = Shard(path, i, self.config.shards, substring=self.config.substring,
                                  redaction=self.config.redaction,
                                  semantic=self.config.semantic)
                self.shards.append(shard)
                self._writers.append(ShardWriter(shard.writer, shard.epoch,
                                                 substring=shard.substring,
                                                 semantic=shard.semantic))
        except BaseException:
            self.close()
            raise

    def shard_for(self, session_id: str) -> Shard:
        return self.shards[shard_of(session_id, len(self.shards))]

    def __iter__(self) -> Iterator[Shard]:
        return iter(self.shards)

    def _position_shards(self, source: str) -> list[Shard]:
        """`store:<sid>` positions live in that session's shard; others in every shard."""
        if source.startswith(SESSION_SOURCE_PREFIX):
            return [self.shard_for(source[len(SESSION_SOURCE_PREFIX):])]
        return self.shards

    def write_batch(self, records: Sequence[IndexRecord], positions: Mapping[str, int]) -> bool:
        """Apply `records` and advance tracking to `positions`; True if any row changed.

        1. Each shard touched (by a record, or by a position it keeps) opens a write transaction.
        2. Records apply in order, each in its session's shard; positions join the same
           transaction. Partition-wide positions go to every shard, so the resume point is the
           minimum over shards.
        3. A SourceConflict anywhere rolls every shard back; otherwise all commit. A crash
           between commits is repaired by replay, which is idempotent.
        """
        by_shard: dict[int, list[IndexRecord]] = {}
        for record in records:
            by_shard.setdefault(shard_of(record.session_id, len(self.shards)), []).append(record)
        pos_by_shard: dict[int, dict[str, int]] = {}
        for source, position in positions.items():
            for shard in self._position_shards(source):
                pos_by_shard.setdefault(shard.index, {})[source] = position
        pipeline = self._pipeline
        if pipeline is not None and not pipeline.is_current():
            pipeline.drain()  # keep submission order: what was queued goes first
            if self._remote:
                self._forget_written()
        with self._write_lock:
            return self._write(by_shard, pos_by_shard)

    def submit(self, records: Sequence[IndexRecord], positions: Mapping[str, int], *,
               before: Callable[[], Any] | None = None) -> None:
        """`write_batch`, on the writer thread if a `pipeline()` is open (errors surface at a
        later call or when the pipeline closes), else right here. `before()` runs first, on
        the thread that writes (e.g. to make the batch's source durable)."""
        if self._pipeline is not None:
            self._pipeline.submit(records, positions, before)
        else:
            if before is not None:
                before()
            self.write_batch(records, positions)

    @contextmanager
    def pipeline(self, *, process: bool = False) -> Iterator[None]:
        """Within the block, `submit` hands batches to a writer thread (indexer/pipeline.py);
        leaving it waits until all are written and raises the first error. `process`: the
        writer thread hands them on to a child process that writes them (indexer/writerproc.py:
        for bulk writes, whose Python half then runs beside the caller's, not under its GIL)."""
        if self._pipeline is not None:
            yield  # already open (nested use): the outer block drains it
            return
        from indexer.pipeline import WriterThread

        before = self.structures()
        remote = None
        if process:
            from indexer.writerproc import WriterProcess

            remote = WriterProcess(self.root, self.config, self.key_dir)
        self._remote = remote is not None
        self._pipeline = (WriterThread(self.write_batch) if remote is None
                          else WriterThread(remote.write, overlapped=remote))
        written = False
        try:
            try:
                yield
            except BaseException:
                pipeline, self._pipeline = self._pipeline, None
                with suppress(BaseException):  # the block's own error is the one to report
                    pipeline.close()
                raise
            pipeline, self._pipeline = self._pipeline, None
            pipeline.close()
            written = True
        finally:
            if remote is not None:
                self._remote = False
                self._forget_written()
                if written:
                    remote.close()
                else:
                    with suppress(BaseException):
                        remote.close()
        self.merge_grown(before)

    def _forget_written(self) -> None:
        """Drop this process's writer caches (session numbers, extents, blocks): a writer
        process wrote the shards meanwhile."""
        with self._write_lock:
            for writer in self._writers:
                writer.reset()

    def structures(self) -> dict[tuple[int, str], Structure]:
        """The segments of every full-text table, by (shard index, table)."""
        from indexer.segments import FTS_TABLES, read_structure  # writers only

        with self._write_lock:
            return {(shard.index, table): read_structure(shard.writer, table)
                    for shard in self.shards for table in FTS_TABLES}

    def merge_grown(self, before: Mapping[tuple[int, str], Structure]
                    ) -> dict[tuple[int, str], Structure]:
        """After a bulk write: merge the segments of each full-text table the write grew by a
        good part of its size since `before` (`structures()`; indexer/segments.py). Answers do
        not change, nor does any generation; lookups then probe one segment. Returns the
        baseline for the next call: a merged table's structure now, the others' as before."""
        from concurrent.futures import ThreadPoolExecutor

        from indexer.segments import merge_segments, needs_merge, read_structure, release_free_pages

        tables: dict[int, list[tuple[str, Structure]]] = {}
        for (index, table), was in before.items():
            tables.setdefault(index, []).append((table, was))

        def merge_shard(index: int) -> dict[tuple[int, str], Structure]:
            conn = self.shards[index].writer
            merged: dict[tuple[int, str], Structure] = {}
            for table, was in tables[index]:
                if not needs_merge(was, read_structure(conn, table)):
                    continue
                conn.execute("BEGIN IMMEDIATE")
                try:
                    merge_segments(conn, table)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                merged[index, table] = read_structure(conn, table)
            if merged:
                release_free_pages(conn)
            return merged

        after = dict(before)
        with self._write_lock:
            try:
                # Shards merge side by side (SQLite runs without the GIL, each shard on its own
                # connection): the closing merge of a bulk ingest is SQLite work alone.
                workers = min(MERGE_THREADS, len(tables))
                if workers <= 1:
                    merges = [merge_shard(index) for index in sorted(tables)]
                else:
                    with ThreadPoolExecutor(workers, thread_name_prefix="recall-merge") as pool:
                        running = [pool.submit(merge_shard, index) for index in sorted(tables)]
                    merges = [future.result() for future in running]  # the first error, if any
                for merged in merges:
                    after.update(merged)
            except apsw.Error as exc:
                raise query_error(INDEX_FAILED, f"merging index segments failed: {exc}") from exc
        return after

    def _write(self, by_shard: dict[int, list[IndexRecord]],
               pos_by_shard: dict[int, dict[str, int]]) -> bool:
        from indexer.writer import (
            apply_positions,
            apply_records,
            bump_generation,
            embed_ahead,
            refresh_substring,
        )

        begun: list[Shard] = []
        changed_any = False
        try:
            if self.read_only:
                raise query_error(INDEX_FAILED, f"{self.root} is open for reading only")
            # the model runs before any shard's transaction opens (none is locked meanwhile)
            embed_ahead((self._writers[k], records) for k, records in by_shard.items())
            for shard in self.shards:
                if shard.index not in by_shard and shard.index not in pos_by_shard:
                    continue
                shard.writer.execute("BEGIN IMMEDIATE")
                begun.append(shard)
                writer = self._writers[shard.index]
                refresh_substring(writer)
                shard.substring = writer.substring
                changed = apply_records(writer, by_shard.get(shard.index, []))
                apply_positions(shard.writer, pos_by_shard.get(shard.index, {}))
                if changed:
                    bump_generation(shard.writer)
                changed_any = changed_any or changed
        except BaseException as exc:
            self._abandon(begun)
            if isinstance(exc, apsw.Error):
                raise query_error(INDEX_FAILED, f"write failed: {exc}") from exc
            raise
        for at, shard in enumerate(begun):
            try:
                shard.writer.execute("COMMIT")
            except apsw.Error as exc:  # the shards before it committed: replay repairs that
                self._abandon(begun[at:])
                raise query_error(INDEX_FAILED, f"write failed: {exc}") from exc
        return changed_any

    def _abandon(self, begun: Sequence[Shard]) -> None:
        """After a failed write: roll back what is still open and forget every writer's cached
        ids and extents. An I/O error (a full disk, a file size limit) may have rolled a
        transaction back already, or left a failed COMMIT open; a cache that outlived either
        handed out event ids whose extents were never stored, and every later process then
        collided with those events (`UNIQUE constraint failed: events.id`)."""
        for shard in begun:
            with suppress(apsw.Error):  # none left open: nothing to roll back
                shard.writer.execute("ROLLBACK")
        for writer in self._writers:
            writer.reset()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the write lock: the block may use every shard's `writer` connection."""
        with self._write_lock:
            yield

    def has_substring(self) -> bool:
        """Whether every shard's trigram index covers all documents (not only CJK ones): as
        this process last wrote, or as another process has built it since."""
        if self.read_only:
            return all(shard.substring or shard.meta().substring for shard in self.shards)
        return all(w.substring or shard.meta().substring
                   for shard, w in zip(self.shards, self._writers, strict=True))

    def lacking_substring(self, indexes: Iterable[int] | None = None) -> list[int]:
        """The shards (of `indexes`, default all) whose trigram index does not cover every
        document, as their files say now (another process may have built it since)."""
        chosen = self.shards if indexes is None else [self.shards[k] for k in indexes]
        return [s.index for s in chosen if not (s.substring or s.meta().substring)]

    def ensure_substring(self, progress: Progress | None = None,
                         only: Iterable[int] | None = None) -> int:
        """Extend the trigram index to every document of every shard (of `only`, default all;
        once: later writes keep it complete). Returns the number of documents added;
        `progress(shard, done, total)`."""
        from indexer.writer import build_trigram

        added = 0
        wanted = None if only is None else set(only)
        with self._write_lock:
            unbuildable = [s.index for s in self.shards
                           if (wanted is None or s.index in wanted)
                           and (self.read_only or s.readonly) and not s.meta().substring]
            if unbuildable:
                raise substring_missing(unbuildable, read_only=True)
            if self.read_only:
                return 0  # built already: a read-only set has no writers
            for shard, writer in zip(self.shards, self._writers, strict=True):
                if writer.substring or (wanted is not None and shard.index not in wanted):
                    continue
                report = None if progress is None else (
                    lambda done, total, k=shard.index: progress(k, done, total))
                try:
                    added += build_trigram(writer, report)
                except apsw.Error as exc:
                    raise query_error(INDEX_FAILED, f"substring index build failed: {exc}") from exc
                shard.substring = True
        return added

    def tracking_position(self, source: str) -> int | None:
        """Where to resume `source`: the minimum over its shards, None if any lacks it."""
        values = [shard.tracking().get(source) for shard in self._position_shards(source)]
        if any(v is None for v in values):
            return None
        return min(v for v in values if v is not None)

    def generation_vector(self) -> str:
        parts = []
        for shard in self.shards:
            with shard.reader() as conn:
                meta = shard.meta(conn)
            parts.append(f"{meta.epoch}:{meta.generation}")
        return ",".join(parts)

    def close(self) -> None:
        if self._pipeline is not None:
            pipeline, self._pipeline = self._pipeline, None
            pipeline.close()
        with self._write_lock:
            for shard in self.shards:
                shard.close()
            self.shards = []
            self._writers = []

    def __enter__(self) -> ShardSet:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
