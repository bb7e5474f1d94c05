"""Embedded runtime: the same pipeline step as the Kafka fold agent, over the local store.

Order of a write: (1) mark the index pending, (2) append + fsync the store, (3) fold the new
events into index records, (4) write them with the store position as tracking in one shard
transaction, (5) clear the mark. A crash between (2) and (4) leaves the mark; the next open
replays the store's tail into the index, and tracking makes that replay harmless.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from indexer import IndexConfig, ShardSet
from indexer.digest import index_digest
from indexer.errors import IndexOutdated
from projections.errors import SessionQueryError
from projections.fold import Step, SurfaceState, apply, plan
from projections.records import HeaderRecord, IndexRecord, event_record, fold_records
from streams.generations import Generations
from streams.ingest import Importer, Ingestor, IngestReport
from streams.settings import Settings
from streams.store import DeadLetters, SessionStore, ensure_private_dir, open_private


def store_position_key(session_id: str) -> str:
    return f"store:{session_id}"


class EmbeddedRuntime:
    """One machine, no Kafka: local append-only logs + the FTS5 shards + dead letters."""

    def __init__(self, settings: Settings, *, importers: Mapping[str, Importer] | None = None,
                 detect: Callable[[Path, bytes], str | None] | None = None) -> None:
        self.settings = settings
        self.data_dir = ensure_private_dir(Path(settings.data_dir))
        self.store = SessionStore(self.data_dir / "store")
        self.dead_letters = DeadLetters(self.data_dir / "dead-letter.jsonl")
        self.generations = Generations(self.data_dir / "index")
        try:
            self.shards = self._open_shards(self.generations.current())
        except IndexOutdated as exc:  # written by an older version: rebuild, never refuse
            self.shards = self._migrate(exc)
        self._pending = self.data_dir / "index-pending"
        self.ingestor = Ingestor(self.data_dir, self.store, self.dead_letters, self._index_append,
                                 max_event_bytes=settings.max_event_bytes, importers=importers,
                                 detect=detect)
        if self._pending.exists():
            self.catch_up()

    def _open_shards(self, path: Path) -> ShardSet:
        return ShardSet(path, index_config(self.settings), key_dir=self.generations.root)

    def close(self) -> None:
        self.shards.close()

    # --- writes -------------------------------------------------------------------------------

    def ingest(self, paths: Sequence[Path], *, fmt: str = "auto",
               progress: Callable[[int, int], None] | None = None) -> IngestReport:
        self._mark_pending()
        with self.shards.pipeline():  # index writes overlap reading the next events
            report = self.ingestor.ingest(paths, fmt=fmt, progress=progress)
        self._pending.unlink(missing_ok=True)
        return report

    def append_events(self, header: Mapping[str, Any],
                      events: Sequence[Mapping[str, Any]]) -> list[int]:
        """Append validated-by-fold events to a session (creating it); returns their seqs."""
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

    def _index_append(self, header: Mapping[str, Any], before: SurfaceState,
                      events: Sequence[Mapping[str, Any]], steps: Sequence[Step] | None = None,
                      *, shards: ShardSet | None = None) -> None:
        session_id = str(header["id"])
        records: list[IndexRecord] = []
        if before.next_seq == 0:
            records.append(HeaderRecord(session_id, dict(header)))
        if steps is not None and len(steps) == len(events):
            records.extend(event_record(session_id, e, s) for e, s in zip(events, steps,
                                                                           strict=True))
            next_seq = steps[-1].state.next_seq if steps else before.next_seq
        else:
            state, event_records = fold_records(session_id, before, events)
            records.extend(event_records)
            next_seq = state.next_seq
        (shards or self.shards).submit(records, {store_position_key(session_id): next_seq})

    def _mark_pending(self) -> None:
        with open_private(self._pending, "wb") as f:
            f.flush()
            os.fsync(f.fileno())

    # --- replay -------------------------------------------------------------------------------

    def catch_up(self, progress: Callable[[int, int], None] | None = None, *,
                 shards: ShardSet | None = None) -> int:
        """Index whatever the store holds beyond each session's tracking position; returns the
        number of events indexed. Idempotent: a fully indexed store indexes nothing."""
        target = shards or self.shards
        ids = self.store.session_ids()
        indexed = 0
        with target.pipeline():
            indexed = self._catch_up(target, ids, progress)
        if target is getattr(self, "shards", None):  # (unset while migrating at open)
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

    def _build(self, progress: Callable[[int, int], None] | None) -> tuple[Path, int]:
        """Fill the generation being built from the store (resumed if interrupted)."""
        path = self.generations.building()
        try:
            build = self._open_shards(path)
        except SessionQueryError:
            self.generations.discard(path)  # half-created by a killed build: start it over
            path = self.generations.building()
            build = self._open_shards(path)
        try:
            return path, self.catch_up(progress, shards=build)
        finally:
            build.close()

    def _migrate(self, reason: IndexOutdated) -> ShardSet:
        """Rebuild an index an older version wrote (schema change) from the store, reporting
        progress on stderr, and make it the live generation."""
        print(f"recall: {reason.message}; rebuilding the index from the store", file=sys.stderr)
        path, indexed = self._build(_stderr_progress("rebuilding the index"))
        self.generations.promote(path)
        print(f"recall: index rebuilt ({indexed} events)", file=sys.stderr)
        return self._open_shards(self.generations.current())

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Build a complete new index generation from the store beside the live one, then swap
        atomically. Resumable: an interrupted build is continued, not restarted."""
        path, indexed = self._build(progress)
        old = self.generations.promote(path)
        self.shards.close()
        self.shards = self._open_shards(self.generations.current())
        removed = self.generations.cleanup(self.settings.snapshot_retention_s)
        return {"generation": path.name, "previous": old.name, "eventsIndexed": indexed,
                "removed": removed, **index_digest(self.shards)}


def _stderr_progress(label: str) -> Callable[[int, int], None]:
    """Progress lines on stderr, at most one per 10 % (and the last)."""
    shown = [-1]

    def report(done: int, total: int) -> None:
        tenth = done * 10 // max(total, 1)
        if tenth != shown[0] or done == total:
            shown[0] = tenth
            print(f"recall: {label}: {done}/{total} sessions", file=sys.stderr, flush=True)
    return report


def index_config(settings: Settings) -> IndexConfig:
    return IndexConfig(shards=settings.shards, default_limit=settings.default_limit,
                       max_limit=settings.max_limit, snippet_chars=settings.snippet_chars,
                       read_window_max=settings.read_window_max,
                       live_window_ms=settings.live_window_ms,
                       snapshot_retention_s=settings.snapshot_retention_s,
                       substring=settings.substring)
