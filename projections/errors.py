"""Errors for every stage of the flow: one root, stable codes from SPEC.md, and what to do next."""

from __future__ import annotations

from typing import Any

# Codes for rejected input records (ours: SPEC.md names only query/reference codes). They are
# stable: dead-letter records and `--json` output carry them, and scripts match on them.
INGEST_MALFORMED_JSON = "INGEST_MALFORMED_JSON"
INGEST_INVALID_UTF8 = "INGEST_INVALID_UTF8"
INGEST_SCHEMA_VIOLATION = "INGEST_SCHEMA_VIOLATION"
INGEST_MISSING_HEADER = "INGEST_MISSING_HEADER"
INGEST_HEADER_CONFLICT = "INGEST_HEADER_CONFLICT"
INGEST_SEQ_GAP = "INGEST_SEQ_GAP"
INGEST_DUPLICATE_CONFLICT = "INGEST_DUPLICATE_CONFLICT"
INGEST_OVERSIZED_EVENT = "INGEST_OVERSIZED_EVENT"
INGEST_INVALID_SURFACE = "INGEST_INVALID_SURFACE"
INGEST_UNKNOWN_EVENT_TYPE = "INGEST_UNKNOWN_EVENT_TYPE"
INGEST_REWRITTEN_SOURCE = "INGEST_REWRITTEN_SOURCE"
INGEST_AFTER_REJECTED = "INGEST_AFTER_REJECTED"
INGEST_UNSUPPORTED_FORMAT = "INGEST_UNSUPPORTED_FORMAT"


class RecallError(Exception):
    """Root of every error session-recall raises on purpose; `code` is stable, `hint` says what to do."""

    code: str = "RECALL_ERROR"
    hint: str = ""

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None,
                 cause: BaseException | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        if hint is not None:
            self.hint = hint
        self.message = message
        if cause is not None:
            self.__cause__ = cause

    def to_json(self) -> dict[str, Any]:
        """The wire form printed by the CLI and carried in replies: `{"code", "message"}`."""
        text = self.message if not self.hint else f"{self.message} ({self.hint})"
        return {"code": self.code, "message": text}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class SessionQueryError(RecallError):
    """A search or read request failed; `code` is one of SPEC 3.11's SESSION_QUERY_* strings."""

    code = "SESSION_QUERY_INDEX_FAILED"


class FoldError(SessionQueryError):
    """`fold_surface` rejected an event: the log breaks SPEC 2 (surface ops, provenance, contiguity)."""

    code = "SESSION_QUERY_INVALID_SURFACE"
    hint = "the log is invalid from this event on; fix or drop the offending event and re-ingest"

    def __init__(self, message: str, *, seq: int | None = None, index: int | None = None) -> None:
        super().__init__(message)
        self.seq = seq
        self.index = index


class SessionReferenceError(RecallError):
    """Preparing a cross-session reference failed; `code` is one of SPEC 4.9's SESSION_REFERENCE_*."""

    code = "SESSION_REFERENCE_INVALID_REFERENCE"


class InputRejected(RecallError):
    """An input record cannot enter the log; it is parked in the dead letters with this code."""

    code = INGEST_SCHEMA_VIOLATION
    hint = "the record was parked in the dead letters with its original bytes"
