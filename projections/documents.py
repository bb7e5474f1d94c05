"""Stage 4 of the flow: surface-tagged retrieval documents, one per event with semantic text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from projections.events import as_wire
from projections.extraction import extract_text
from projections.surfaces import Surface, classify_surfaces

if TYPE_CHECKING:
    from projections.eventmodels import Event


@dataclass(frozen=True, slots=True)
class Document:
    """One retrieval row (PROTOCOL §3.5): `{sessionId, seq, type, time, surface, text}`."""

    session_id: str
    seq: int
    type: str
    time: int
    surface: Surface
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"sessionId": self.session_id, "seq": self.seq, "type": self.type,
                "time": self.time, "surface": self.surface.value, "text": self.text}


def document_for(session_id: str, event: Event | Mapping[str, Any],
                 surface: Surface) -> Document | None:
    """The document of one event, or None when it has no semantic text."""
    wire = as_wire(event)
    text = extract_text(wire)
    if not text:
        return None
    return Document(session_id, int(wire["seq"]), str(wire["type"]), int(wire["time"]), surface,
                    text)


def to_documents(session_id: str, events: Sequence[Event | Mapping[str, Any]],
                 surfaces: Sequence[Surface] | None = None) -> list[Document]:
    """Documents of a whole log, in seq order; surfaces are derived from the fold when not given."""
    wires = [as_wire(e) for e in events]
    tags = list(surfaces) if surfaces is not None else classify_surfaces(wires)
    docs = (document_for(session_id, e, s) for e, s in zip(wires, tags, strict=True))
    return [d for d in docs if d is not None]
