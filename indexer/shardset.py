"""Storage and read side: N shard files under one root — routing, batched writes, lifecycle."""

from __future__ import annotations

import os
import secrets
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from indexer.config import IndexConfig
from indexer.errors import INDEX_FAILED, query_error
from indexer.routing import shard_file_name, shard_of
from indexer.shard import Shard
from indexer.writer import apply_positions, apply_records, bump_generation
from projections.records import IndexRecord

KEY_FILE = "cursor.key"
#: Tracking sources of one session's store position, e.g. `store:<sid>`.
SESSION_SOURCE_PREFIX = "store:"


def _load_key(root: Path) -> bytes:
    """The HMAC key that signs cursors; created once, owner-only, kept beside the shards."""
    path = root / KEY_FILE
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return path.read_bytes()
    with os.fdopen(fd, "wb") as handle:
        handle.write(secrets.token_bytes(32))
    return path.read_bytes()


class ShardSet:
    """The shards of one index root. Writes: `write_batch`; reads go through QueryService."""

    def __init__(self, root: str | os.PathLike[str], config: IndexConfig | None = None, *,
                 key_dir: str | os.PathLike[str] | None = None) -> None:
        """`key_dir` holds the cursor-signing key (default: `root`). Generations of one index
        share it, so a cursor from a replaced generation is STALE rather than INVALID."""
        self.config = config or IndexConfig()
        self.root = Path(root)
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)
            self.key = _load_key(Path(key_dir) if key_dir is not None else self.root)
        except OSError as exc:
            raise query_error(INDEX_FAILED, f"cannot open index root {self.root}: {exc}") from exc
        self.shards: list[Shard] = []
        try:
            for i in range(self.config.shards):
                self.shards.append(Shard(self.root / shard_file_name(i), i, self.config.shards,
                                         substring=self.config.substring))
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
        begun: list[Shard] = []
        changed_any = False
        try:
            for shard in self.shards:
                if shard.index not in by_shard and shard.index not in pos_by_shard:
                    continue
                shard.conn.execute("BEGIN IMMEDIATE")
                begun.append(shard)
                changed = apply_records(shard.conn, by_shard.get(shard.index, []),
                                        substring=shard.substring)
                apply_positions(shard.conn, pos_by_shard.get(shard.index, {}))
                if changed:
                    bump_generation(shard.conn)
                changed_any = changed_any or changed
        except BaseException as exc:
            for shard in begun:
                shard.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise query_error(INDEX_FAILED, f"write failed: {exc}") from exc
            raise
        for shard in begun:
            shard.conn.execute("COMMIT")
        return changed_any

    def tracking_position(self, source: str) -> int | None:
        """Where to resume `source`: the minimum over its shards, None if any lacks it."""
        values = [shard.tracking().get(source) for shard in self._position_shards(source)]
        if any(v is None for v in values):
            return None
        return min(v for v in values if v is not None)

    def generation_vector(self) -> str:
        return ",".join(f"{m.epoch}:{m.generation}" for m in (s.meta() for s in self.shards))

    def close(self) -> None:
        for shard in self.shards:
            shard.close()
        self.shards = []

    def __enter__(self) -> ShardSet:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
