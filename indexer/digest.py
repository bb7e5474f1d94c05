"""Storage and read side: a digest of the logical index contents, independent of layout.

Per session (in id order): the header, every event's seq/type/time/surface/text and the fold
state re-derived from the stored raw events. Shard count, SQLite page order, generations and
epochs do not enter it, so two indexes built from the same events have the same digest however
they were built (ingest, replay, reindex, Kafka or embedded, killed and resumed). Shards can
digest their sessions separately (`session_digests`) and anyone can combine the parts.

The substring (trigram) index's coverage enters it too, as a state rather than bytes: whether
the shards have substring coverage and how many documents their trigram index misses
(`substring_coverage`). A trigram index that missed documents answers substring searches
wrongly while every event is there, so two indexes that differ in it must not digest alike;
summed over the shards, equal contents still digest alike whatever the shard count.

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
from indexer.schema import BLOCK_EVENTS, CJK, SEQ_MASK, SURFACE_NAMES, TRIGRAM_DOCS, TYPE, block_id
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

        parts = digest_files([s.file for s in shards])
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
            total += os.stat(shard.file + suffix).st_size
    return total


def shard_substring_coverage(conn: Conn) -> tuple[bool, int, int | None]:
    """One shard's substring index: (substring coverage claimed, documents it should hold,
    documents it holds — None on a shard from before the count, whose index cannot be counted
    without writing a temporary table). It should hold every document once the shard has
    substring coverage, else those with CJK text."""
    conn.execute("BEGIN")  # the count and the documents from one snapshot
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('substring', ?)",
                                 (TRIGRAM_DOCS,)).fetchall())
        built = meta.get("substring") == "1"
        counted = TRIGRAM_DOCS in meta
        # The index itself only knows documents with a trigram (three code points or more).
        where = f"e.len >= {1 if counted else 3}" + ("" if built else f" AND {CJK} = 1")
        expected = int(conn.execute(f"SELECT count(*) FROM events e WHERE {where}"
                                    ).fetchone()[0])
        return built, expected, int(meta[TRIGRAM_DOCS]) if counted else None
    finally:
        conn.execute("COMMIT")


def shard_coverage(shard: Shard) -> dict[str, Any]:
    """`{built, missing}` of one shard's substring index (what `merge_coverage` combines): a
    shard from before the count is taken as complete (`index check` counts it the hard way)."""
    with shard.reader() as conn:
        built, expected, held = shard_substring_coverage(conn)
    return {"built": built, "missing": 0 if held is None else max(0, expected - held)}


def merge_coverage(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """`{built, missing}` of a whole index from its shards' `shard_coverage`: `built` is "all",
    "none" or "partial" (shards that disagree: an interrupted build), `missing` the documents
    the trigram indexes lack, summed (so the shard count does not enter it)."""
    states: set[bool] = set()
    missing = 0
    for part in parts:
        states.add(bool(part["built"]))
        missing += int(part["missing"])
    state = "partial" if len(states) > 1 else "all" if states == {True} else "none"
    return {"built": state, "missing": missing}


def substring_coverage(shards: Iterable[Shard]) -> dict[str, Any]:
    """`merge_coverage` of these shards."""
    return merge_coverage(shard_coverage(s) for s in shards)


def combine_digests(parts: Iterable[Mapping[str, list[Any]]],
                    substring: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`{digest, sessions, events}` from per-shard session digests (and `substring`, the
    index's `substring_coverage`, when given: it enters the digest)."""
    merged: dict[str, list[Any]] = {}
    for part in parts:
        merged.update(part)
    total = hashlib.blake2b(digest_size=32, person=b"recall-digest")
    for sid in sorted(merged):
        total.update(bytes.fromhex(str(merged[sid][0])))
    out: dict[str, Any] = {"sessions": len(merged),
                           "events": sum(int(v[1]) for v in merged.values())}
    if substring is not None:
        total.update(b"substring\n" + dumps_sorted(dict(substring)))
        out["substring"] = dict(substring)
    return {"digest": total.hexdigest(), **out}


def index_digest(shards: Iterable[Shard], *, parallel: bool | None = None) -> dict[str, Any]:
    """`{digest, sessions, events, substring}` of a whole index."""
    shards = list(shards)
    return combine_digests([session_digests(shards, parallel=parallel)],
                           substring_coverage(shards))
