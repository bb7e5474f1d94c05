"""Storage and read side: a digest of the logical index contents, independent of layout.

Per session (in id order): the header, every event's seq/type/time/surface/text and the fold
state re-derived from the stored raw events. Shard count, SQLite page order, generations and
epochs do not enter it, so two indexes built from the same events have the same digest however
they were built (ingest, replay, reindex, Kafka or embedded, killed and resumed). Shards can
digest their sessions separately (`session_digests`) and anyone can combine the parts.

The digest re-folds every event (one decoding per event for its text and the fold), pure
Python: the shards of a large index (`PARALLEL_MIN_BYTES`) are digested by helper processes on
the other cores (indexer/digester.py), each shard file in a read-only snapshot of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable, Mapping
from typing import Any

from indexer.blocks import decode_block
from indexer.database import Conn, connect
from indexer.schema import BLOCK_EVENTS, SEQ_MASK, SURFACE_NAMES, TYPE, block_id
from indexer.shard import Shard
from projections.codec import dumps, dumps_sorted, loads
from projections.extraction import extract_text
from projections.fold import encode_state, fold_surface

#: Shard files (main files + WALs) at least this large together are digested by the helpers;
#: below it a helper's start (once per process) would cost more than the other core saves.
PARALLEL_MIN_BYTES = 4 * 1024 * 1024

#: One session's event rows, in seq order: (seq, type name, time, surface code).
_ROWS = ("SELECT x.seq + e.id - x.first, t.name, e.time, e.kind & 3 FROM extents x"
         " JOIN events e ON e.id BETWEEN x.first AND x.first + x.size - 1"
         f" JOIN types t ON t.code = {TYPE} WHERE x.session = ? ORDER BY x.seq, e.id")


def session_digests(shards: Iterable[Shard], *,
                    parallel: bool | None = None) -> dict[str, list[Any]]:
    """`{sessionId: [hex digest, event count]}` for every session with a header (by the
    helpers if `parallel`; default: for a large index)."""
    shards = list(shards)
    if parallel is None:
        parallel = large_index(shards)
    parts: list[dict[str, list[Any]] | None] = [None] * len(shards)
    if parallel:
        from indexer.digester import digest_files

        parts = digest_files([os.fspath(s.path) for s in shards])
    out: dict[str, list[Any]] = {}
    for shard, part in zip(shards, parts, strict=True):
        if part is None:  # digested here: small, or its helper failed (an error surfaces here)
            with shard.reader() as conn:
                part = _snapshot_digests(conn, shard.epoch)
        out.update(part)
    return out


def shard_file_digests(path: str) -> dict[str, list[Any]]:
    """The session digests of one shard file, read in a connection of its own (what a pool
    process runs)."""
    conn = connect(path)
    try:
        conn.execute("PRAGMA query_only = 1")
        return _snapshot_digests(conn, None)
    finally:
        conn.close()


def _snapshot_digests(conn: Conn, epoch: str | None) -> dict[str, list[Any]]:
    conn.execute("BEGIN")  # one snapshot of the shard
    try:
        if epoch is None:
            epoch = str(conn.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()[0])
        return _shard_digests(conn, epoch)
    finally:
        conn.execute("COMMIT")


def _shard_digests(conn: Conn, epoch: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    surfaces = SURFACE_NAMES
    sessions = conn.execute("SELECT no, id, header FROM sessions WHERE header IS NOT NULL"
                            " ORDER BY no").fetchall()
    for no, sid, header in sessions:
        no = int(no)
        session = hashlib.blake2b(digest_size=32)
        canonical = dumps_sorted(loads(header))
        session.update(dumps(str(sid)) + b"\n" + canonical + b"\n")
        raws = _session_raws(conn, epoch, no)
        lines: list[bytes] = []
        events: list[Any] = []
        for seq, type_name, event_time, surface in conn.execute(_ROWS, (no,)):
            event = loads(raws[seq])  # one decoding for the text and the fold (neither mutates)
            lines.append(dumps([seq, type_name, event_time, surfaces[surface],
                                extract_text(event)]))
            events.append(event)
        if lines:
            session.update(b"\n".join(lines) + b"\n")
        state = encode_state(fold_surface(events).state)
        session.update(dumps({k: state[k].decode() for k in sorted(state)}))
        out[str(sid)] = [session.hexdigest(), len(events)]
    return out


def _session_raws(conn: Conn, epoch: str, no: int) -> dict[int, bytes]:
    """seq → raw bytes of every stored event of session `no`."""
    out: dict[int, bytes] = {}
    base_block = block_id(no, 0)
    for block, data in conn.execute("SELECT id, data FROM blocks WHERE id BETWEEN ? AND ?",
                                    (base_block, block_id(no, SEQ_MASK))):
        base = (int(block) - base_block) * BLOCK_EVENTS
        for index, raw in decode_block(conn, epoch, bytes(data)).items():
            out[base + index] = raw
    return out


def large_index(shards: Iterable[Shard]) -> bool:
    """Whether the helpers should digest these shards (`PARALLEL_MIN_BYTES`)."""
    return sum(_file_bytes(s) for s in shards) >= PARALLEL_MIN_BYTES


def _file_bytes(shard: Shard) -> int:
    total = 0
    for suffix in ("", "-wal"):
        with contextlib.suppress(OSError):
            total += os.stat(os.fspath(shard.path) + suffix).st_size
    return total


def combine_digests(parts: Iterable[Mapping[str, list[Any]]]) -> dict[str, Any]:
    """`{digest, sessions, events}` from per-shard session digests."""
    merged: dict[str, list[Any]] = {}
    for part in parts:
        merged.update(part)
    total = hashlib.blake2b(digest_size=32, person=b"recall-digest")
    for sid in sorted(merged):
        total.update(bytes.fromhex(str(merged[sid][0])))
    return {"digest": total.hexdigest(), "sessions": len(merged),
            "events": sum(int(v[1]) for v in merged.values())}


def index_digest(shards: Iterable[Shard], *, parallel: bool | None = None) -> dict[str, Any]:
    """`{digest, sessions, events}` of a whole index."""
    return combine_digests([session_digests(shards, parallel=parallel)])
