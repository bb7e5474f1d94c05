"""Pure core of session-recall: events → fold_surface → surfaces → documents (no I/O, no runtime)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from projections.lazy import lazy_getattr

if TYPE_CHECKING:
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

# Loaded on first use: importing one module (projections.errors) must not build every model.
_WHERE = {
    "Document": "projections.documents",
    "document_for": "projections.documents",
    "to_documents": "projections.documents",
    "FoldError": "projections.errors",
    "InputRejected": "projections.errors",
    "RecallError": "projections.errors",
    "SessionQueryError": "projections.errors",
    "SessionReferenceError": "projections.errors",
    "KNOWN_EVENT_TYPES": "projections.events",
    "SURFACE_TYPES": "projections.events",
    "Event": "projections.events",
    "SessionHeader": "projections.events",
    "parse_event": "projections.events",
    "parse_header": "projections.events",
    "extract_text": "projections.extraction",
    "Replacement": "projections.fold",
    "SurfaceFold": "projections.fold",
    "SurfaceState": "projections.fold",
    "apply": "projections.fold",
    "fold_surface": "projections.fold",
    "plan": "projections.fold",
    "ParsedLog": "projections.logformat",
    "Rejection": "projections.logformat",
    "parse_log": "projections.logformat",
    "Surface": "projections.surfaces",
    "classify_surfaces": "projections.surfaces",
    "EventTrace": "projections.trace",
    "trace_event": "projections.trace",
    "human_transcript": "projections.transcript",
    "model_transcript": "projections.transcript",
    "surface_events": "projections.transcript",
}


__getattr__ = lazy_getattr(globals(), _WHERE)

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
