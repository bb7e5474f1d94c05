"""Request handling: every facade operation by name over JSON arguments → JSON result.

The embedded facade calls `dispatch` in-process; the Kafka query worker calls the same function
for each request it takes from `<p>.requests`. One code path is why both runtimes answer alike.

Session ids given short are resolved here, once for both runtimes: an operation naming a session
that does not exist retries with the id a unique prefix (or a bare id without its `agent:`
prefix, such as a Claude Code UUID) names; references resolve their sessions before preparing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from indexer.listing import select_listing
from projections.codec import MAX_JSON_DEPTH, MAX_SAFE_INTEGER
from projections.errors import RecallError, SessionQueryError, SessionReferenceError

SESSION_NOT_FOUND = "SESSION_QUERY_SESSION_NOT_FOUND"
AMBIGUOUS_SESSION = "RECALL_AMBIGUOUS_SESSION"
#: How many of the sessions an ambiguous id matches its error names.
AMBIGUOUS_SHOWN = 10


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


def pick_sessions(text: str, ids: Iterable[str]) -> list[str]:
    """The sessions `text` names among ids it is a prefix of (whole, or after `agent:`): the
    exact id; else the ids that are exactly `text` after their agent prefix (a bare UUID names
    the session, not also its `…/agent-…` subagents); else all of them (sorted)."""
    found = sorted(set(ids))
    if text in found:
        return [text]
    bare = [i for i in found if ":" in i and i.partition(":")[2] == text]
    return bare or found


def resolve_session(backend: Backend, text: str) -> str:
    """The one session id `text` names (module docstring); SESSION_NOT_FOUND when none,
    RECALL_AMBIGUOUS_SESSION (listing them) when several."""
    records = backend.query().filter_sessions([{"kind": "id-prefix", "values": [text]}])
    found = pick_sessions(text, (str(r["header"]["id"]) for r in records))
    if len(found) == 1:
        return found[0]
    if not found:
        raise SessionQueryError(f"session {text!r} not found", code=SESSION_NOT_FOUND,
                                hint="`recall sessions` lists the ids (a unique prefix will do)")
    shown = ", ".join(found[:AMBIGUOUS_SHOWN]) + (" …" if len(found) > AMBIGUOUS_SHOWN else "")
    raise SessionQueryError(f"session id {text!r} is ambiguous: it matches {len(found)} "
                            f"sessions: {shown}", code=AMBIGUOUS_SESSION,
                            hint="give more of the id, or the whole id")


def _list_sessions(backend: Backend, args: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The listing, narrowed by session filters (any PROTOCOL §3.4 kind or extension), a title
    search and a limit."""
    filters = args.get("filters")
    title = args.get("title")
    if title is not None and not isinstance(title, str):
        raise SessionQueryError("title must be a string", code="SESSION_QUERY_INVALID_FILTER")
    # The title search and the limit go to the shards, which then read only what is shown.
    limit = args.get("limit")
    records = (backend.query().filter_sessions(filters, now_ms=_now(args), limit=limit,
                                               title=title)
               if filters is not None
               else backend.query().list_sessions(now_ms=_now(args), limit=limit, title=title))
    return select_listing(list(records), title=title, limit=limit)


#: Where each operation names one session (the argument, or inside `request`).
_SESSION_ARG: dict[str, tuple[str, ...]] = {
    op: ("sessionId",) for op in ("read_session", "read_surface", "read_event", "read_transcript",
                                  "trace_event", "trace_session", "filter_events",
                                  # (the target is looked up before anything is appended)
                                  "append_events")}
_SESSION_ARG["search_events"] = ("request", "sessionId")


def _named_session(op: str, args: Mapping[str, Any]) -> Any:
    value: Any = args
    for key in _SESSION_ARG[op]:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _with_session(op: str, args: Mapping[str, Any], session_id: str) -> dict[str, Any]:
    path = _SESSION_ARG[op]
    out = dict(args)
    if len(path) == 1:
        out[path[0]] = session_id
    else:
        out[path[0]] = {**dict(out[path[0]]), path[1]: session_id}
    return out


def _resolve_references(backend: Backend, args: Mapping[str, Any]) -> dict[str, Any]:
    """A reference's target and sources, resolved before anything is prepared (a reference
    appends, so it is never retried). Ids naming nothing are left for the service to report."""
    out = dict(args)

    def resolved(value: Any) -> Any:
        if not isinstance(value, str) or not value:
            return value
        try:
            return resolve_session(backend, value)
        except RecallError as exc:
            if exc.code == SESSION_NOT_FOUND:
                return value
            raise

    if "targetSessionId" in out:
        out["targetSessionId"] = resolved(out["targetSessionId"])
    references = out.get("references")
    if isinstance(references, list):
        out["references"] = [{**ref, "sessionId": resolved(ref.get("sessionId"))}
                             if isinstance(ref, Mapping) else ref for ref in references]
    return out


OPERATIONS: dict[str, Callable[[Backend, Mapping[str, Any]], Any]] = {
    "search_sessions": lambda b, a: b.query().search_sessions(_req(a, "request"), now_ms=_now(a)),
    "search_events": lambda b, a: b.query().search_events(_req(a, "request"), now_ms=_now(a)),
    "list_sessions": _list_sessions,
    "resolve_session": lambda b, a: {"sessionId": resolve_session(b, _session_id(a))},
    "read_session": lambda b, a: b.query().read_session(_session_id(a)),
    "read_surface": lambda b, a: b.query().read_surface(_session_id(a)),
    "read_event": lambda b, a: b.query().read_event(dict(a)),
    "read_transcript": lambda b, a: b.query().read_transcript(dict(a)),
    "trace_event": lambda b, a: b.query().trace_event(_session_id(a), _seq(a)),
    "trace_session": lambda b, a: b.query().trace_session(_session_id(a)),
    "filter_sessions": lambda b, a: b.query().filter_sessions(_req(a, "filters"), now_ms=_now(a)),
    "filter_events": lambda b, a: b.query().filter_events(_session_id(a), _req(a, "filters")),
    "index_digest": lambda b, a: b.query().index_digest(),
    "index_generation": lambda b, a: {"generation": b.generation()},
    "substring_index": lambda b, a: b.query().substring_index(),
    # a write (the one that builds what substring searches read); searches never build it
    # over Kafka, where only a key for every workspace may ask for it
    "build_substring_index": lambda b, a: b.query().build_substring_index(),
    "prepare_reference": lambda b, a: b.reference().prepare(dict(a)),
    "list_candidates": lambda b, a: b.reference().candidates(dict(a)),
    "append_events": lambda b, a: b.reference().append_events(dict(a)),
}


#: The protocol's code for an unusable value, by the argument it sits in (else INVALID_FILTER).
_CODE_BY_KEY = {"seq": "SESSION_QUERY_EVENT_NOT_FOUND", "before": "SESSION_QUERY_INVALID_WINDOW",
                "after": "SESSION_QUERY_INVALID_WINDOW", "limit": "SESSION_QUERY_INVALID_LIMIT",
                "query": "SESSION_QUERY_INVALID_QUERY", "cursor": "SESSION_QUERY_INVALID_CURSOR"}
_REFERENCE_OPS = frozenset({"prepare_reference", "list_candidates"})


def check_args(op: str, args: Any) -> None:
    """Arguments must be JSON every runtime reads alike: objects with string keys, valid
    Unicode text, integers within ±(2^53 − 1), finite numbers, bounded nesting. Anything else
    is the protocol's code of the argument it sits in, before any work (never an OverflowError deep
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
    if op in _REFERENCE_OPS:
        return handler(backend, _resolve_references(backend, args))
    try:
        return handler(backend, args)
    except RecallError as exc:
        named = _named_session(op, args) if op in _SESSION_ARG else None
        if exc.code != SESSION_NOT_FOUND or not isinstance(named, str) or not named:
            raise
        resolved = resolve_session(backend, named)
        if resolved == named:
            raise  # the session exists: what was not found is something else
        return handler(backend, _with_session(op, args, resolved))


def listing_args(*, cwd: str | None = None, agent: str | None = None, title: str | None = None,
                 limit: int | None = None, filters: Sequence[Mapping[str, Any]] | None = None,
                 now_ms: int | None = None) -> dict[str, Any]:
    """The `list_sessions` operation's arguments for `Recall.list_sessions`' options."""
    clauses = [dict(f) for f in filters or []]
    if cwd is not None:
        clauses.append({"kind": "cwd-tree", "values": [cwd]})
    if agent is not None:
        clauses.append({"kind": "agent", "values": [agent]})
    args: dict[str, Any] = {}
    if clauses or filters is not None:
        args["filters"] = clauses
    if title is not None:
        args["title"] = title
    if limit is not None:
        args["limit"] = limit
    if now_ms is not None:
        args["nowMs"] = now_ms
    return args
