"""Storage and read side: an event's trace (PROTOCOL §2, traceEvent) from the stored rows, without
folding the log: what projections/trace.py answers from the whole log.

- What shadowed an event, and what shadowed that, and so on: the surface is ordered by the order
  keys, unique on it, and a replacement of start..end removes exactly the surface events whose
  keys lie between those of start and end (indexer/transcript.py); so the first replacement
  after an event that covers its key shadowed it, and the chain goes on from there with the
  replacement's own key (its start's).
- What a replacement shadowed: the events it cites (a replacement must cite all it shadows)
  that were on the surface with a key in its span, less those an earlier replacement covered.
- What cites an event: the events after it that carry sourceEventSeqs (the `citing` table)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from indexer.blocks import read_raws
from indexer.database import Conn
from indexer.errors import EVENT_NOT_FOUND, query_error
from indexer.schema import SHADOWED
from indexer.transcript import SessionRows, replacements_after
from projections.codec import loads
from projections.trace import EventTrace


def _cited(event: Mapping[str, Any]) -> list[int] | None:
    cited = event.get("sourceEventSeqs")
    return list(cited) if isinstance(cited, list) else None


def _chain(s: SessionRows, epoch: str, seq: int, key: int | None) -> list[int]:
    chain: list[int] = []
    if key is None:  # a log-only event: never on the surface
        return chain
    for r in replacements_after(s, epoch, seq):
        if r.start_key <= key <= r.end_key:
            chain.append(r.seq)
            key = r.start_key  # the replacement takes its start's place
    return chain


def _shadowed_by(s: SessionRows, epoch: str, seq: int, event: Mapping[str, Any],
                 start_key: int) -> list[int]:
    op = event.get("surfaceOp")
    cited = _cited(event)
    if not isinstance(op, dict) or not cited:
        return []
    end = op.get("end")
    end_row = s.kinds([end]).get(end) if isinstance(end, int) else None
    if end_row is None or end_row[1] is None:
        return []
    end_key = end_row[1]
    rows = s.kinds(c for c in cited if isinstance(c, int) and c < seq)
    waiting = {c: key for c, (kind, key) in rows.items()
               if kind & 3 == SHADOWED and key is not None and start_key <= key <= end_key}
    if waiting:
        for r in replacements_after(s, epoch, min(waiting), until=seq):
            for c in [c for c, key in waiting.items() if c < r.seq and
                      r.start_key <= key <= r.end_key]:
                del waiting[c]  # an earlier replacement took it off the surface
    return sorted(waiting, key=lambda c: waiting[c])  # surface (model) order


def _derived(s: SessionRows, epoch: str, seq: int) -> list[int]:
    citing = [int(c) for (c,) in s.conn.execute(
        "SELECT seq FROM citing WHERE session = ? AND seq > ? ORDER BY seq", (s.number, seq))]
    raws = read_raws(s.conn, epoch, ((s.number, c) for c in citing))
    return [c for c in citing
            if (s.number, c) in raws and seq in (_cited(loads(raws[(s.number, c)])) or ())]


def trace_stored_event(conn: Conn, epoch: str, number: int, seq: int) -> EventTrace:
    """The trace of event `seq` of session `number` (EVENT_NOT_FOUND when it has none)."""
    s = SessionRows(conn, number)
    row = s.kinds([seq]).get(seq) if seq >= 0 else None
    raw = read_raws(conn, epoch, [(number, seq)]).get((number, seq)) if row else None
    if row is None or raw is None:
        raise query_error(EVENT_NOT_FOUND, f"event seq {seq} not found")
    event = loads(raw)
    _, key = row
    chain = _chain(s, epoch, seq, key)
    replaced = (_shadowed_by(s, epoch, seq, event, key)
                if key is not None and key != seq else [])
    return EventTrace(seq, chain[0] if chain else None, chain, replaced, _cited(event),
                      _derived(s, epoch, seq))
