"""Agent tools: the error boundary — every failure becomes a fixed code and a fixed message."""

from __future__ import annotations

import contextlib
import logging

from projections.errors import INVALID_ARGS as INVALID_ARGS
from projections.errors import (
    RECALL_AMBIGUOUS_SESSION,
    SESSION_QUERY_ABORTED,
    SESSION_QUERY_CORRUPT_SESSION,
    SESSION_QUERY_EVENT_NOT_FOUND,
    SESSION_QUERY_INDEX_FAILED,
    SESSION_QUERY_INVALID_CURSOR,
    SESSION_QUERY_INVALID_FILTER,
    SESSION_QUERY_INVALID_LIMIT,
    SESSION_QUERY_INVALID_LINEAGE,
    SESSION_QUERY_INVALID_QUERY,
    SESSION_QUERY_INVALID_SURFACE,
    SESSION_QUERY_INVALID_WINDOW,
    SESSION_QUERY_PERSISTENCE_FAILED,
    SESSION_QUERY_SEARCH_DISABLED,
    SESSION_QUERY_SESSION_NOT_FOUND,
    SESSION_QUERY_STALE_CURSOR,
    SESSION_QUERY_TOOL_FAILED,
    SESSION_QUERY_TOOL_MISSING_AGENT,
    SESSION_QUERY_TOOL_NO_CURRENT_STEP,
    SESSION_QUERY_TOOL_TIMEOUT,
    SESSION_QUERY_TOOL_UNAUTHORIZED,
    SESSION_REFERENCE_BUDGET_EXCEEDED,
    SESSION_REFERENCE_CANCELLED,
    SESSION_REFERENCE_INVALID_REFERENCE,
    SESSION_REFERENCE_READ_FAILED,
    SESSION_REFERENCE_SELF_REFERENCE,
    SESSION_REFERENCE_TOO_MANY,
    RecallError,
    SessionQueryError,
    SessionReferenceError,
)

log = logging.getLogger("recall.mcp")

# Codes the tool layer raises itself (PROTOCOL §6.2); the rest are the service's (PROTOCOL §3.11, 4.9).
UNAUTHORIZED = SESSION_QUERY_TOOL_UNAUTHORIZED
MISSING_AGENT = SESSION_QUERY_TOOL_MISSING_AGENT
NO_CURRENT_STEP = SESSION_QUERY_TOOL_NO_CURRENT_STEP
TOOL_FAILED = SESSION_QUERY_TOOL_FAILED
TIMED_OUT = SESSION_QUERY_TOOL_TIMEOUT
INVALID_QUERY = SESSION_QUERY_INVALID_QUERY
INVALID_FILTER = SESSION_QUERY_INVALID_FILTER
INVALID_CURSOR = SESSION_QUERY_INVALID_CURSOR
INVALID_WINDOW = SESSION_QUERY_INVALID_WINDOW
AMBIGUOUS_SESSION = RECALL_AMBIGUOUS_SESSION

UNAUTHORIZED_MESSAGE = "session target is outside the caller workspace"
REPEATED_CURSOR_MESSAGE = "session-search provider repeated a continuation cursor"
FAILED_MESSAGE = "session query operation failed"

#: Service codes → the one message the model sees. Service messages are never passed through:
#: they can carry ids, paths or internals, and a fixed text keeps hidden and missing identical.
FIXED_MESSAGES: dict[str, str] = {
    UNAUTHORIZED: UNAUTHORIZED_MESSAGE,
    MISSING_AGENT: "session query tools need the calling agent's session",
    NO_CURRENT_STEP: "the current session has no step to search before: no step/start event "
                     "marks its active step (a session written only with `recall append "
                     "--message` has none; its host appends steps with `recall append SESSION "
                     "--events FILE`); session_search works meanwhile",
    TIMED_OUT: "session search timed out; narrow the query or add filters",
    SESSION_QUERY_ABORTED: "session query was cancelled",
    SESSION_QUERY_CORRUPT_SESSION: "the session log is corrupt",
    SESSION_QUERY_EVENT_NOT_FOUND: "event not found in the target session",
    SESSION_QUERY_INDEX_FAILED: "the session index is unavailable",
    INVALID_CURSOR: "session search cursor is invalid",
    INVALID_FILTER: "session query filters are invalid",
    SESSION_QUERY_INVALID_LIMIT: "session query limit is invalid",
    INVALID_QUERY: "query must be non-blank text without NUL characters",
    SESSION_QUERY_INVALID_LINEAGE: "the session lineage contains a cycle",
    SESSION_QUERY_INVALID_SURFACE: "the session log is invalid and cannot be read",
    INVALID_WINDOW: "before and after must be integers from 0 to 50",
    AMBIGUOUS_SESSION: "the session id matches several sessions of this workspace; give more "
                       "of it",
    SESSION_QUERY_PERSISTENCE_FAILED: "session persistence is unavailable",
    SESSION_QUERY_SEARCH_DISABLED: "session search is disabled in this deployment",
    SESSION_QUERY_SESSION_NOT_FOUND: "session not found",
    SESSION_QUERY_STALE_CURSOR:
        "session history changed while paging; retry the complete search call",
    SESSION_REFERENCE_INVALID_REFERENCE: "the session reference is invalid",
    SESSION_REFERENCE_SELF_REFERENCE: "a session cannot reference itself",
    SESSION_REFERENCE_TOO_MANY: "too many referenced sessions (at most 3)",
    SESSION_REFERENCE_READ_FAILED: "a referenced session could not be read",
    SESSION_REFERENCE_BUDGET_EXCEEDED: "a referenced session does not fit its byte budget",
    SESSION_REFERENCE_CANCELLED: "session reference was cancelled",
}


class ToolError(RecallError):
    """A failure the model may see: `code` is stable, `message` is safe to show verbatim (the
    one RecallError whose message is; `to_tool_error` maps every other one to a fixed text)."""

    def __init__(self, code: str, message: str | None = None) -> None:
        super().__init__(message or FIXED_MESSAGES.get(code, FAILED_MESSAGE), code=code)

    def render(self) -> str:
        return f"Error: {self.message}"


def unauthorized() -> ToolError:
    """The one answer for missing, hidden and tampered targets alike."""
    return ToolError(UNAUTHORIZED)


def _describe(exc: BaseException) -> str:
    """The cause chain for the log; an unprintable value gets a placeholder, never a crash."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        try:
            parts.append(f"{type(current).__name__}: {current}")
        except Exception:
            parts.append(f"{type(current).__name__}: <unprintable>")
        current = current.__cause__ or current.__context__
    return " <- ".join(parts)


def to_tool_error(exc: BaseException) -> ToolError:
    """Map any failure to what the model sees. Config and conflict errors, unknown codes and
    foreign exceptions all become SESSION_QUERY_TOOL_FAILED: their details are ours, not its."""
    if isinstance(exc, ToolError):
        return exc
    with contextlib.suppress(Exception):  # logging must never turn one failure into another
        log.warning("session tool failure: %s", _describe(exc))
    if isinstance(exc, SessionQueryError | SessionReferenceError) and isinstance(
            getattr(exc, "code", None), str) and exc.code in FIXED_MESSAGES:
        return ToolError(exc.code)
    return ToolError(TOOL_FAILED, FAILED_MESSAGE)
