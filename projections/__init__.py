"""Pure core of session-recall: events → fold_surface → surfaces → documents (no I/O, no runtime)."""

from projections.documents import Document, document_for, to_documents
from projections.errors import (
    FoldError,
    InputRejected,
    RecallError,
    SessionQueryError,
    SessionReferenceError,
)
from projections.events import (
    KNOWN_EVENT_TYPES,
    SURFACE_TYPES,
    Event,
    SessionHeader,
    parse_event,
    parse_header,
)
from projections.extraction import extract_text
from projections.fold import Replacement, SurfaceFold, SurfaceState, apply, fold_surface, plan
from projections.logformat import ParsedLog, Rejection, parse_log
from projections.surfaces import Surface, classify_surfaces
from projections.trace import EventTrace, trace_event
from projections.transcript import human_transcript, model_transcript, surface_events

__all__ = [
    "KNOWN_EVENT_TYPES",
    "SURFACE_TYPES",
    "Document",
    "Event",
    "EventTrace",
    "FoldError",
    "InputRejected",
    "ParsedLog",
    "RecallError",
    "Rejection",
    "Replacement",
    "SessionHeader",
    "SessionQueryError",
    "SessionReferenceError",
    "Surface",
    "SurfaceFold",
    "SurfaceState",
    "apply",
    "classify_surfaces",
    "document_for",
    "extract_text",
    "fold_surface",
    "human_transcript",
    "model_transcript",
    "parse_event",
    "parse_header",
    "parse_log",
    "plan",
    "surface_events",
    "to_documents",
    "trace_event",
]
