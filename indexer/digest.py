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

from indexer.shard import Shard
from projections.fold import encode_state, fold_surface


def session_digests(shards: Iterable[Shard]) -> dict[str, list[Any]]:
    """`{sessionId: [hex digest, event count]}` for every session with a header."""
    out: dict[str, list[Any]] = {}
    for shard in shards:
        conn = shard.conn
        for sid, header in conn.execute("SELECT id, header FROM sessions WHERE header IS NOT NULL"):
            session = hashlib.blake2b(digest_size=32)
            canonical = orjson.dumps(orjson.loads(header), option=orjson.OPT_SORT_KEYS)
            session.update(orjson.dumps(str(sid)) + b"\n" + canonical + b"\n")
            raws = []
            for seq, kind, time, surface, text, raw in conn.execute(
                    "SELECT seq, type, time, surface, text, raw FROM events WHERE session_id = ?"
                    " ORDER BY seq", (sid,)):
                session.update(orjson.dumps([seq, kind, time, surface, text]) + b"\n")
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
