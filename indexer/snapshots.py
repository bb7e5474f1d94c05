"""Storage and read side: pinned read snapshots behind `consistency: "snapshot"` cursors.

Each snapshot holds one open WAL read transaction per shard it covers, so later pages read
exactly the generation the first page saw. Limits: it lives in this process only (a restart or
another replica cannot serve it — the cursor then turns STALE), and while pinned the WAL cannot
be checkpointed past it, which is why snapshots expire after a retention window and are capped
in number (the oldest is released first).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from indexer.database import Conn
from indexer.locks import Lock
from indexer.shard import Shard


class Snapshot:
    """Pinned connections by shard index, and when the pin was taken. `lock` is held while a
    request reads them (a connection serves one thread at a time). (A plain class: a
    dataclass compiles its generated methods as its module loads, on the read path too.)"""

    __slots__ = ("conns", "created", "generation", "id", "lock")

    def __init__(self, id: str, conns: dict[int, Conn], created: float,
                 generation: str = "") -> None:
        self.id = id
        self.conns = conns
        self.created = created
        self.generation = generation
        self.lock = Lock()


class SnapshotRegistry:
    """Live snapshots of one QueryService."""

    def __init__(self, retention_s: float, max_count: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.retention_s = retention_s
        self.max_count = max_count
        self.clock = clock
        self._live: dict[str, Snapshot] = {}

    def pin(self, shards: Sequence[Shard]) -> Snapshot:
        self.expire()
        while len(self._live) >= self.max_count:
            self.release(next(iter(self._live)))
        conns: dict[int, Conn] = {}
        for shard in shards:
            conn = shard.open_reader()
            conn.execute("BEGIN")
            # The first read starts the transaction's snapshot; BEGIN alone does not.
            conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
            conns[shard.index] = conn
        import secrets  # (and random): snapshot paging only

        snap = Snapshot(secrets.token_urlsafe(12), conns, self.clock())
        self._live[snap.id] = snap
        return snap

    def get(self, snapshot_id: str | None) -> Snapshot | None:
        self.expire()
        return None if snapshot_id is None else self._live.get(snapshot_id)

    def expire(self) -> None:
        now = self.clock()
        for sid in [s.id for s in self._live.values() if now - s.created > self.retention_s]:
            self.release(sid)

    def release(self, snapshot_id: str) -> None:
        snap = self._live.pop(snapshot_id, None)
        if snap is not None:
            with snap.lock:
                for conn in snap.conns.values():
                    conn.close()

    def __len__(self) -> int:
        return len(self._live)

    def close(self) -> None:
        for sid in list(self._live):
            self.release(sid)
