"""Storage and read side: a digest of the logical index contents, independent of layout.

Per session (in id order): the header, every event's seq/type/time/surface/text and the fold
state re-derived from the stored raw events. Shard count, SQLite page order, generations and
epochs do not enter it, so two indexes built from the same events have the same digest however
they were built (ingest, replay, reindex, Kafka or embedded, killed and resumed). Shards can
digest their sessions separately (`session_digests`) and anyone can combine the parts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from indexer.blocks import read_raws
from indexer.database import Conn
from indexer.eventrows import session_rows
from indexer.shard import Shard
from indexer.writer import text_of
from projections.fold import encode_state, fold_surface


def session_digests(shards: Iterable[Shard]) -> dict[str, list[Any]]:
    """`{sessionId: [hex digest, event count]}` for every session with a header."""
    out: dict[str, list[Any]] = {}
    for shard in shards:
        with shard.reader() as conn:
            conn.execute("BEGIN")  # one snapshot of the shard
            try:
                out.update(_shard_digests(shard, conn))
            finally:
                conn.execute("COMMIT")
    return out


def _shard_digests(shard: Shard, conn: Conn) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    sessions = conn.execute("SELECT no, id, header FROM sessions WHERE header IS NOT NULL"
                            " ORDER BY no").fetchall()
    for no, sid, header in sessions:
        session = hashlib.blake2b(digest_size=32)
        canonical = orjson.dumps(orjson.loads(header), option=orjson.OPT_SORT_KEYS)
        session.update(orjson.dumps(str(sid)) + b"\n" + canonical + b"\n")
        rows = session_rows(conn, int(no))
        raws_by_seq = read_raws(conn, shard.epoch, ((int(no), r.seq) for r in rows))
        raws = []
        for r in rows:
            raw = raws_by_seq[(int(no), r.seq)]
            session.update(orjson.dumps([r.seq, r.type, r.time, r.surface, text_of(raw)]) + b"\n")
            raws.append(orjson.loads(raw))
        state = encode_state(fold_surface(raws).state)
        session.update(orjson.dumps({k: state[k].decode() for k in sorted(state)}))
        out[str(sid)] = [session.hexdigest(), len(raws)]
    return out


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


def index_digest(shards: Iterable[Shard]) -> dict[str, Any]:
    """`{digest, sessions, events}` of a whole index."""
    return combine_digests([session_digests(shards)])
