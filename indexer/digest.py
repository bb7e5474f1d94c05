"""Storage and read side: a digest of the logical index contents, independent of layout.

Per session (in id order): the header, every event's seq/type/time/surface/text and the fold
state re-derived from the stored raw events. Shard count, SQLite page order, generations and
epochs do not enter it, so two indexes built from the same events have the same digest however
they were built (ingest, replay, reindex, Kafka or embedded, killed and resumed).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from indexer.shardset import ShardSet
from projections.fold import encode_state, fold_surface


def index_digest(shardset: ShardSet) -> dict[str, Any]:
    """`{digest, sessions, events}` of the whole index."""
    headers: dict[str, bytes] = {}
    owner: dict[str, Any] = {}
    for shard in shardset:
        for sid, header in shard.conn.execute(
                "SELECT id, header FROM sessions WHERE header IS NOT NULL"):
            headers[str(sid)] = orjson.dumps(orjson.loads(header), option=orjson.OPT_SORT_KEYS)
            owner[str(sid)] = shard.conn
    total = hashlib.blake2b(digest_size=32, person=b"recall-digest")
    events = 0
    for sid in sorted(headers):
        conn = owner[sid]
        session = hashlib.blake2b(digest_size=32)
        session.update(orjson.dumps(sid) + b"\n" + headers[sid] + b"\n")
        raws = []
        for seq, kind, time, surface, text, raw in conn.execute(
                "SELECT seq, type, time, surface, text, raw FROM events WHERE session_id = ?"
                " ORDER BY seq", (sid,)):
            session.update(orjson.dumps([seq, kind, time, surface, text]) + b"\n")
            raws.append(orjson.loads(raw))
        state = encode_state(fold_surface(raws).state)
        session.update(orjson.dumps({k: state[k].decode() for k in sorted(state)}))
        total.update(session.digest())
        events += len(raws)
    return {"digest": total.hexdigest(), "sessions": len(headers), "events": events}
