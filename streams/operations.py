"""Request handling: every facade operation by name over JSON arguments → JSON result.

The embedded facade calls `dispatch` in-process; the Kafka query worker calls the same function
for each request it takes from `<p>.requests`. One code path is why both runtimes answer alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from projections.errors import SessionQueryError


class Backend(Protocol):
    """What an operation needs: a query service and (for references) appends to a session."""

    def query(self) -> Any: ...

    def reference(self) -> Any: ...

    def generation(self) -> str: ...


def _req(args: Mapping[str, Any], key: str) -> Any:
    if key not in args:
        raise SessionQueryError(f"missing argument {key!r}", code="SESSION_QUERY_INVALID_FILTER")
    return args[key]


def _session_id(args: Mapping[str, Any]) -> str:
    value = _req(args, "sessionId")
    if not isinstance(value, str):
        raise SessionQueryError("sessionId must be a string", code="SESSION_QUERY_INVALID_FILTER")
    return value


def _seq(args: Mapping[str, Any]) -> int:
    value = _req(args, "seq")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SessionQueryError("seq must be a non-negative integer",
                                code="SESSION_QUERY_EVENT_NOT_FOUND")
    return value


def _now(args: Mapping[str, Any]) -> int | None:
    value = args.get("nowMs")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


OPERATIONS: dict[str, Callable[[Backend, Mapping[str, Any]], Any]] = {
    "search_sessions": lambda b, a: b.query().search_sessions(_req(a, "request"), now_ms=_now(a)),
    "search_events": lambda b, a: b.query().search_events(_req(a, "request"), now_ms=_now(a)),
    "list_sessions": lambda b, a: b.query().list_sessions(now_ms=_now(a)),
    "read_session": lambda b, a: b.query().read_session(_session_id(a)),
    "read_surface": lambda b, a: b.query().read_surface(_session_id(a)),
    "read_event": lambda b, a: b.query().read_event(dict(a)),
    "trace_event": lambda b, a: b.query().trace_event(_session_id(a), _seq(a)),
    "trace_session": lambda b, a: b.query().trace_session(_session_id(a)),
    "filter_sessions": lambda b, a: b.query().filter_sessions(_req(a, "filters"), now_ms=_now(a)),
    "filter_events": lambda b, a: b.query().filter_events(_session_id(a), _req(a, "filters")),
    "index_digest": lambda b, a: b.query().index_digest(),
    "index_generation": lambda b, a: {"generation": b.generation()},
    "prepare_reference": lambda b, a: b.reference().prepare(dict(a)),
    "list_candidates": lambda b, a: b.reference().candidates(dict(a)),
}


def dispatch(backend: Backend, op: str, args: Mapping[str, Any]) -> Any:
    """Run one operation; unknown names are a stable error, never an AttributeError."""
    handler = OPERATIONS.get(op)
    if handler is None:
        raise SessionQueryError(f"unknown operation {op!r}", code="RECALL_UNKNOWN_OPERATION",
                                hint=f"one of: {', '.join(sorted(OPERATIONS))}")
    return handler(backend, args)
