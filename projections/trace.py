"""Read side of the fold: replacement and citation relationships of one event (PROTOCOL §2, traceEvent)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from projections.errors import SessionQueryError
from projections.events import as_wire
from projections.fold import fold_surface

if TYPE_CHECKING:
    from projections.eventmodels import Event


@dataclass(frozen=True, slots=True)
class EventTrace:
    """How one event relates to the others; every list is a fresh copy."""

    seq: int
    replaced_by: int | None
    replacement_chain: list[int]
    replaced_event_seqs: list[int]
    source_event_seqs: list[int] | None
    derived_event_seqs: list[int]

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "replacedBy": self.replaced_by,
                "replacementChain": list(self.replacement_chain),
                "replacedEventSeqs": list(self.replaced_event_seqs),
                "sourceEventSeqs": None if self.source_event_seqs is None
                else list(self.source_event_seqs),
                "derivedEventSeqs": list(self.derived_event_seqs)}


def trace_event(events: Sequence[Event | Mapping[str, Any]], seq: int) -> EventTrace:
    """Trace `seq`: existence is checked before surface validation (EVENT_NOT_FOUND first)."""
    wires = [as_wire(e) for e in events]
    if not any(e.get("seq") == seq for e in wires):
        raise SessionQueryError(f"event seq {seq} not found", code="SESSION_QUERY_EVENT_NOT_FOUND")
    fold = fold_surface(wires)
    replacer_of: dict[int, int] = {}
    replaced: list[int] = []
    for rep in fold.replacements:
        for shadowed in rep.shadowed_seqs:
            replacer_of[shadowed] = rep.seq
        if rep.seq == seq:
            replaced = list(rep.shadowed_seqs)
    chain: list[int] = []
    cursor = replacer_of.get(seq)
    while cursor is not None:
        chain.append(cursor)
        cursor = replacer_of.get(cursor)
    target = next(e for e in wires if e.get("seq") == seq)
    cited = target.get("sourceEventSeqs")
    derived = [int(e["seq"]) for e in wires
               if isinstance(e.get("sourceEventSeqs"), list) and seq in e["sourceEventSeqs"]]
    return EventTrace(seq, replacer_of.get(seq), chain, replaced,
                      list(cited) if isinstance(cited, list) else None, derived)
