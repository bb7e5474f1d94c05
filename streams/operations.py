"""Request handling: every facade operation by name over JSON arguments → JSON result.

The embedded facade calls `dispatch` in-process; the Kafka query worker calls the same function
for each request it takes from `<p>.requests`. One code path is why both runtimes answer alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from projections.errors import SessionQueryError, SessionReferenceError
from projections.jsonwire import MAX_JSON_DEPTH, MAX_SAFE_INTEGER


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
    "append_events": lambda b, a: b.reference().append_events(dict(a)),
}


#: The SPEC code for an unusable value, by the argument it sits in (else INVALID_FILTER).
_CODE_BY_KEY = {"seq": "SESSION_QUERY_EVENT_NOT_FOUND", "before": "SESSION_QUERY_INVALID_WINDOW",
                "after": "SESSION_QUERY_INVALID_WINDOW", "limit": "SESSION_QUERY_INVALID_LIMIT",
                "query": "SESSION_QUERY_INVALID_QUERY", "cursor": "SESSION_QUERY_INVALID_CURSOR"}
_REFERENCE_OPS = frozenset({"prepare_reference", "list_candidates"})


def check_args(op: str, args: Any) -> None:
    """Arguments must be JSON every runtime reads alike: objects with string keys, valid
    Unicode text, integers within ±(2^53 − 1), finite numbers, bounded nesting. Anything else
    is the SPEC code of the argument it sits in, before any work (never an OverflowError deep
    in SQLite or a TypeError in a serializer)."""
    stack: list[tuple[Any, str, int]] = [(args, "", 0)]
    while stack:
        value, key, depth = stack.pop()
        problem = None
        if depth > MAX_JSON_DEPTH:
            problem = "is nested too deeply"
        elif isinstance(value, Mapping):
            for k, v in value.items():
                if not isinstance(k, str):
                    problem = "has a key that is not a string"
                    break
                stack.append((v, k, depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((v, key, depth + 1) for v in value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                problem = "is not valid Unicode text"
        elif isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, int):
            if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
                problem = "is an integer outside ±(2^53 − 1)"
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                problem = "is not a finite number"
        else:
            problem = f"is a {type(value).__name__}, not a JSON value"
        if problem is not None:
            message = f"argument {key or 'value'!r} {problem}"
            if op in _REFERENCE_OPS:
                raise SessionReferenceError(message)
            raise SessionQueryError(message,
                                    code=_CODE_BY_KEY.get(key, "SESSION_QUERY_INVALID_FILTER"))


def dispatch(backend: Backend, op: str, args: Mapping[str, Any]) -> Any:
    """Run one operation; unknown names are a stable error, never an AttributeError."""
    handler = OPERATIONS.get(op)
    if handler is None:
        raise SessionQueryError(f"unknown operation {op!r}", code="RECALL_UNKNOWN_OPERATION",
                                hint=f"one of: {', '.join(sorted(OPERATIONS))}")
    check_args(op, args)
    return handler(backend, args)
