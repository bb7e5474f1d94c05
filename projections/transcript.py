"""Stage 5 of the flow: the model transcript and the human transcript, each derived from the log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from projections.events import SURFACE_TYPES, as_wire
from projections.extraction import message_of
from projections.fold import fold_surface

if TYPE_CHECKING:
    from projections.eventmodels import Event


def derive_event_message(event: Event | Mapping[str, Any]) -> dict[str, Any] | None:
    """The model message an eligible event yields; None when it has no content (PROTOCOL §2)."""
    wire = as_wire(event)
    kind = str(wire.get("type"))
    if kind not in SURFACE_TYPES:
        return None
    message = message_of(kind, wire.get("data"))
    if message is None:
        return None
    content = message.get("content")
    if content is None or content == [] or content == "":
        return None
    return message


def surface_events(events: Sequence[Event | Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The current surface events in surface (model) order: what `read_surface` returns."""
    wires = [as_wire(e) for e in events]
    if not wires:
        return []
    base = int(wires[0]["seq"])
    return [wires[seq - base] for seq in fold_surface(wires, base_seq=base).nodes]


def model_transcript(events: Sequence[Event | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Ledger 1 (PROTOCOL §5.1): messages of the current surface only, in surface order."""
    out = (derive_event_message(e) for e in surface_events(events))
    return [m for m in out if m is not None]


def human_transcript(events: Sequence[Event | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The UI's ledger (PROTOCOL §5.1): append-origin surface events in log order; replacement copies
    are model-only, so what compaction hid from the model stays visible to the person."""
    wires = [as_wire(e) for e in events]
    fold_surface(wires, base_seq=int(wires[0]["seq"]) if wires else 0)  # the log must be valid
    out = (derive_event_message(e) for e in wires
           if e.get("type") in SURFACE_TYPES and e.get("surfaceOp") == "append")
    return [m for m in out if m is not None]
