"""Embedded runtime: the same pipeline step as the Kafka fold agent, over the local store.

Order of a write: (1) mark the index pending, (2) append + fsync the store, (3) fold the new
events into index records, (4) write them with the store position as tracking in one shard
transaction, (5) clear the mark. A crash between (2) and (4) leaves the mark; the next writer
replays the store's tail into the index, and tracking makes that replay harmless.

Every write happens inside `writing()`, which holds the data dir's writer lock
(streams/core/lock.py) and, when another process wrote since this one last held it, drops what this
process cached (store states, the registry of sources, dead-letter keys) and reopens the live
index generation if it changed. Readers never take the lock. A watcher takes it per batch:
`with runtime.writing(): runtime.ingest(batch)`.

An index generation that cannot be opened is *damaged*: reads fail with RECALL_INDEX_DAMAGED,
and `reindex` (= `replay` here) rebuilds from the store and moves the damaged files aside.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexer import ShardSet, database
from indexer.errors import INDEX_FAILED, IndexOutdated
from indexer.routing import shard_file_name
from projections.errors import ConfigError, IndexDamaged, RecallError, SessionQueryError
from projections.fold import Step, SurfaceState, apply, plan
from projections.records import HeaderRecord, IndexRecord, event_record, fold_records
from projections.redaction import NO_REDACTION
from streams.core.indexconfig import index_config
from streams.core.lock import Notify, WriterLock
from streams.core.settings import Settings
from streams.core.store import DeadLetters, SessionStore, ensure_private_dir, open_private
from streams.runtime.embedded.generations import Generations

# The secret detectors (detect-secrets, which imports requests) and the ingest edge load with
# the first write: a read needs neither.
if TYPE_CHECKING:
    from projections.redaction import Redactor
    from streams.ingest.edge import Importer, Ingestor, IngestReport


#: Source bytes from which an ingest writes the index through a writer process.
WRITER_PROCESS_BYTES = 64 * 1024 * 1024


def _source_bytes(files: Sequence[Path]) -> int:
    total = 0
    for path in files:
        with suppress(OSError):  # (the ingest reports it)
            total += path.stat().st_size
    return total


def store_position_key(session_id: str) -> str:
    return f"store:{session_id}"


def open_data_dir(path: Path) -> Path:
    """The data dir, created owner-only; a ConfigError if it cannot be one."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"the data dir {path} exists and is not a directory",
                          hint="point RECALL_DATA_DIR / --data-dir at a directory")
    try:
        return ensure_private_dir(path)
    except OSError as exc:
        raise ConfigError(f"cannot use {path} as the data dir: {exc.strerror or exc}",
                          hint="point RECALL_DATA_DIR / --data-dir at a directory you own") from None


def _index_digest(shards: ShardSet) -> dict[str, Any]:
    from indexer.digest import index_digest

    return index_digest(shards)


def _check_generation(path: Path, shards: int) -> list[str]:
    from indexer.maintenance import check_generation

    return check_generation(path, shards)


def _is_damage(exc: BaseException) -> bool:
    """Errors that mean the shard files are unusable (not a wrong setting, not a bug)."""
    if isinstance(exc, database.Error):
        return True
    return isinstance(exc, SessionQueryError) and exc.code == INDEX_FAILED


class EmbeddedRuntime:
    """One machine, no Kafka: local append-only logs + the FTS5 shards + dead letters."""

    def __init__(self, settings: Settings, *, importers: Mapping[str, Importer] | None = None,
                 detect: Callable[[Path, bytes], str | None] | None = None,
                 notify: Notify | None = None) -> None:
        self.settings = settings
        self._redactor: Redactor | None = None
        self.data_dir = open_data_dir(Path(settings.data_dir))
        self.lock = WriterLock(self.data_dir, timeout_s=settings.lock_timeout_s, notify=notify)
        self.store = SessionStore(self.data_dir / "store")
        self.dead_letters = DeadLetters(self.data_dir / "dead-letter.jsonl",
                                        max_record_bytes=settings.max_event_bytes)
        self.generations = Generations(self.data_dir / "index")
        self._pending = self.data_dir / "index-pending"
        self._importers = importers
        self._detect = detect
        self._ingestor: Ingestor | None = None
        self.damage: RecallError | None = None
        self._shards: ShardSet | None = None
        self._shards_path: Path | None = None
        if self._needs_creation():
            with self.writing():
                pass  # creating the first generation's files is a write: under the lock
        else:
            self._open_live()
        if self._pending.exists() and self.damage is None:
            with self.lock.try_hold(self._revalidate) as held:
                if held and self._pending.exists():
                    self._recover()  # a writer died mid-write; if one is running, it finishes

    @property
    def redactor(self) -> Redactor:
        if self._redactor is None:
            from streams.core.detectors import build_redactor

            self._redactor = build_redactor(self.settings)
        return self._redactor

    @property
    def ingestor(self) -> Ingestor:
        if self._ingestor is None:
            from streams.ingest.edge import Ingestor

            self._ingestor = Ingestor(
                self.data_dir, self.store, self.dead_letters, self._index_append,
                max_event_bytes=self.settings.max_event_bytes,
                max_file_bytes=self.settings.max_file_bytes, importers=self._importers,
                detect=self._detect)
        return self._ingestor

    # --- the live index generation --------------------------------------------------------------

    @property
    def shards(self) -> ShardSet:
        if self._shards is None:
            raise self.damage or IndexDamaged("the index is not open")
        return self._shards

    @property
    def open_shards(self) -> ShardSet | None:
        """The live shards if they are open (None while the index is damaged)."""
        return self._shards

    def follow_live(self) -> None:
        """For readers (no lock): reopen the index if CURRENT now names another generation
        (another process reindexed). Costs one small file read."""
        if self.lock.held:
            return  # a writer revalidates when it takes the lock
        live = self.generations.live_name()
        if live is not None and live != (self._shards_path.name if self._shards_path else None):
            self._open_live()

    def _needs_creation(self) -> bool:
        if not self.generations.exists():
            return True
        try:
            live = self.generations.current()
        except IndexDamaged:
            return False
        return any(not (live / shard_file_name(i)).exists() for i in range(self.settings.shards))

    def _open_shards(self, path: Path) -> ShardSet:
        return ShardSet(path, index_config(self.settings), key_dir=self.generations.root)

    def _open_live(self) -> None:
        """Open the generation CURRENT names, or record why it cannot be opened."""
        if self._shards is not None:
            self._shards.close()
            self._shards = None
        try:
            path = self.generations.current()
            self._shards = self._open_shards(path)
            self._shards_path = path
            self.damage = None
        except IndexDamaged as exc:
            self.damage = exc
        except IndexOutdated as exc:  # written by an older version: rebuild, never refuse
            self._shards, self._shards_path = self._migrate(exc)
            self.damage = None
        except (SessionQueryError, database.Error) as exc:
            if not _is_damage(exc):
                raise
            self.damage = IndexDamaged("the live index cannot be opened: "
                                       f"{getattr(exc, 'message', exc)}")

    def close(self) -> None:
        if self._shards is not None:
            self._shards.close()
            self._shards = None

    # --- the writer lock ------------------------------------------------------------------------

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the data dir's writer lock for the block (re-entrant). On first entry, caches
        are dropped if another process wrote since, and the live generation is (re)opened."""
        with self.lock.hold(self._revalidate):
            yield

    @contextmanager
    def try_writing(self) -> Iterator[bool]:
        """Like `writing`, but never waits: yields False (nothing held) while another process
        holds the lock."""
        with self.lock.try_hold(self._revalidate) as held:
            yield held

    def _revalidate(self, changed: bool) -> None:
        if changed:
            self.store.invalidate()
            self.dead_letters.invalidate()
            if self._ingestor is not None:
                self._ingestor.invalidate()
        try:
            live = self.generations.current()  # creates the first generation if there is none
        except IndexDamaged as exc:
            self.damage = exc
            return
        if self._shards is None or self._shards_path != live or self._needs_creation():
            self._open_live()
        # Retired generations (each a full index copy) go once their retention ends, at the
        # next write of any command or the watcher's next batch, not at the next reindex.
        self.generations.cleanup(self.settings.snapshot_retention_s)

    # --- writes -------------------------------------------------------------------------------

    def ingest(self, paths: Sequence[Path], *, fmt: str = "auto",
               progress: Callable[[int, int], None] | None = None) -> IngestReport:
        from streams.ingest.edge import iter_log_files

        with self.writing():
            self._require_index()
            self._mark_pending()
            files = list(iter_log_files(paths))
            # index writes overlap reading the next events; a bulk ingest writes them in a
            # process of its own (indexer/writerproc.py), worth its start-up only for many bytes
            with self.shards.pipeline(process=_source_bytes(files) >= WRITER_PROCESS_BYTES):
                report = self.ingestor.ingest(files, fmt=fmt, progress=progress)
            self._pending.unlink(missing_ok=True)
            return report

    def append_events(self, header: Mapping[str, Any],
                      events: Sequence[Mapping[str, Any]]) -> list[int]:
        """Append validated-by-fold events to a session (creating it); returns their seqs."""
        with self.writing():
            self._require_index()
            stored = self.store.check_header(header)
            state = stored.state if stored else SurfaceState()
            steps: list[Step] = []
            for event in events:  # raises FoldError before anything is written
                steps.append(plan(steps[-1].state if steps else state, event))
            after = steps[-1].state if steps else state
            self._mark_pending()
            self.store.append(stored.header if stored else header, events, after)
            self._index_append(stored.header if stored else header, state, events, steps)
            self._pending.unlink(missing_ok=True)
            return [int(e["seq"]) for e in events]

    def _require_index(self) -> None:
        if self.damage is not None:
            raise self.damage

    def _index_append(self, header: Mapping[str, Any], before: SurfaceState,
                      events: Sequence[Mapping[str, Any]], steps: Sequence[Step] | None = None,
                      raws: Sequence[bytes | None] | None = None, *,
                      shards: ShardSet | None = None) -> None:
        session_id = str(header["id"])
        records: list[IndexRecord] = []
        if before.next_seq == 0:
            records.append(HeaderRecord(session_id, dict(header)))
        if steps is not None and len(steps) == len(events):
            if raws is None:
                raws = [None] * len(events)
            # one scan of the batch's raw lines finds the events redaction could touch; the
            # others skip the per-event call (compact JSON lines hold no newline)
            hinted = self.redactor.hinted_lines(b"\n".join(r or b"" for r in raws)) \
                if any(raws) else None
            quiet = NO_REDACTION
            records.extend(
                event_record(session_id, e, s, raw=r, redactor=quiet if (
                    hinted is not None and r is not None and i not in hinted) else self.redactor)
                for i, (e, s, r) in enumerate(zip(events, steps, raws, strict=True)))
            next_seq = steps[-1].state.next_seq if steps else before.next_seq
        else:
            state, event_records = fold_records(session_id, before, events,
                                                redactor=self.redactor)
            records.extend(event_records)
            next_seq = state.next_seq
        # The index may commit these events only once the store holds them durably (an
        # index ahead of the store could not be repaired by replay): the writer syncs first.
        (shards or self.shards).submit(records, {store_position_key(session_id): next_seq},
                                       before=self.store.sync)

    def _mark_pending(self) -> None:
        with open_private(self._pending, "wb") as f:
            f.flush()
            os.fsync(f.fileno())

    # --- replay -------------------------------------------------------------------------------

    def _recover(self) -> None:
        """Index what a writer that died left unindexed. If that fails on the index itself,
        the index is damaged (every command says so, and `recall reindex` rebuilds it from the
        store) rather than every command, reindex included, failing on the same write."""
        try:
            self.catch_up()
        except (SessionQueryError, database.Error) as exc:
            if not _is_damage(exc):
                raise
            self.damage = IndexDamaged("the index could not be caught up with the store: "
                                       f"{getattr(exc, 'message', exc)}")

    def catch_up(self, progress: Callable[[int, int], None] | None = None, *,
                 shards: ShardSet | None = None) -> int:
        """Index whatever the store holds beyond each session's tracking position; returns the
        number of events indexed. Idempotent: a fully indexed store indexes nothing."""
        with self.writing():
            target = shards or self.shards
            ids = self.store.session_ids()
            with target.pipeline():
                indexed = self._catch_up(target, ids, progress)
            if target is self._shards:
                self._pending.unlink(missing_ok=True)
            return indexed

    def _catch_up(self, target: ShardSet, ids: Sequence[str],
                  progress: Callable[[int, int], None] | None) -> int:
        indexed = 0
        for done, session_id in enumerate(ids, start=1):
            position = target.tracking_position(store_position_key(session_id)) or 0
            header, events = self.store.read(session_id)
            if position < len(events):
                state = SurfaceState()
                for event in events[:position]:
                    state = apply(state, event)
                self._index_append(header, state, events[position:], shards=target)
                indexed += len(events) - position
            if progress is not None:
                progress(done, len(ids))
        return indexed

    def _migrate(self, reason: IndexOutdated) -> tuple[ShardSet, Path]:
        """Rebuild an index an older version wrote (schema change) from the store, under the
        writer lock, reporting progress on stderr, and make it the live generation."""
        with self.lock.hold():
            try:  # another process may have migrated while this one waited for the lock
                live = self.generations.current()
                return self._open_shards(live), live
            except IndexOutdated:
                pass
            print(f"recall: {reason.message}; rebuilding the index from the store",
                  file=sys.stderr)
            path, indexed = self._build(_stderr_progress("rebuilding the index"))
            self.generations.promote(path)
            print(f"recall: index rebuilt ({indexed} events)", file=sys.stderr)
            live = self.generations.current()
            return self._open_shards(live), live

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Build a complete new index generation from the store beside the live one, then swap
        atomically. Resumable: an interrupted build is continued, not restarted. A damaged live
        generation is moved aside (named in `movedAside`), never deleted."""
        with self.writing():
            path, indexed = self._build(progress)
            live = self._shards_path
            damaged = self.damage is not None or (
                live is not None and bool(_check_generation(live, self.settings.shards)))
            if self._shards is not None:
                self._shards.close()
                self._shards = None
            old = self.generations.promote(path)
            moved: list[str] = []
            if damaged and old != path and old.exists():
                moved.append(str(self.generations.move_aside(old).relative_to(self.data_dir)))
            self._open_live()
            if self.damage is not None:
                raise self.damage
            self._pending.unlink(missing_ok=True)
            removed = self.generations.cleanup(self.settings.snapshot_retention_s)
            return {"generation": path.name, "previous": old.name, "eventsIndexed": indexed,
                    "removed": removed, "movedAside": moved, **_index_digest(self.shards)}

    def _build(self, progress: Callable[[int, int], None] | None) -> tuple[Path, int]:
        """Fill the generation being built from the store; a resumed build whose files are
        damaged (a crash mid-creation, a truncated file) is discarded and started over."""
        for attempt in range(2):
            path = self.generations.building()
            try:
                build = self._open_shards(path)
                try:
                    return path, self.catch_up(progress, shards=build)
                finally:
                    build.close()
            except (SessionQueryError, database.Error) as exc:
                if attempt or not _is_damage(exc):
                    raise
                self.generations.discard(path)
        raise AssertionError("unreachable")

    def check(self) -> dict[str, Any]:
        """Integrity of the live generation's files and of the pointers naming it (no lock, no
        writes): what is damaged, and the command that repairs it."""
        problems: list[str] = []
        generation = None
        try:
            live = self.generations.current() if self.generations.exists() else None
        except IndexDamaged as exc:
            live = None
            problems.append(exc.message)
        if live is not None:
            generation = live.name
            problems.extend(_check_generation(live, self.settings.shards))
        elif not problems:
            problems.append("no index generation exists yet")
        if self.damage is not None and self.damage.message not in problems:
            problems.append(self.damage.message)  # e.g. a catch-up that failed on the index
        pending = self._pending.exists() and not self.lock.held
        # read-only (a mount, a copy): reads work; writes and repairs need a writable data dir
        readonly = not os.access(self.data_dir, os.W_OK)
        return {"ok": not problems, "generation": generation, "problems": problems,
                "readOnly": readonly, "pendingCatchUp": pending,
                "damagedGenerations": self.generations.damaged(),
                "fix": None if not problems else
                "recall reindex  (rebuilds the index from the store; damaged files are moved "
                "aside, not deleted)" + (" — in a writable copy of this read-only data dir"
                                         if readonly else "")}


def _stderr_progress(label: str) -> Callable[[int, int], None]:
    """Progress lines on stderr, at most one per 10 % (and the last)."""
    shown = [-1]

    def report(done: int, total: int) -> None:
        tenth = done * 10 // max(total, 1)
        if tenth != shown[0] or done == total:
            shown[0] = tenth
            print(f"recall: {label}: {done}/{total} sessions", file=sys.stderr, flush=True)
    return report
