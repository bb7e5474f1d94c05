"""The facade's request side, light enough for the fast read path (streams/facade_read.py):
a face's search options made one PROTOCOL §3.2 request, and a request from keyword arguments.
`streams.facade` re-exports them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

_CAMEL = {"session_filters": "sessionFilters", "event_filters": "eventFilters",
          "session_id": "sessionId"}


def build_request(query: str | None, request: Mapping[str, Any] | None,
                  **kwargs: Any) -> dict[str, Any]:
    """A spec request (camelCase) from a request dict and/or snake_case keyword arguments."""
    out: dict[str, Any] = dict(request or {})
    if query is not None:
        out["query"] = query
    for key, value in kwargs.items():
        if value is not None:
            out[_CAMEL.get(key, key)] = value
    return out


class SearchOptions(NamedTuple):
    """A search as the faces take it (CLI options, MCP tool arguments, the web form), made one
    PROTOCOL §3.2 request by `search_request`. Times are epoch ms (a fraction: finer); an empty
    or None option asks for nothing. With `session_id` the search is within that session and
    the session options do not apply. (A NamedTuple, changed with `_replace`: a dataclass
    compiles its generated methods as its module loads, at every command's start.)"""

    query: str | None = None
    session_id: str | None = None
    # which sessions
    cwd: str | None = None  # exactly this workspace
    cwd_trees: Sequence[str] = ()  # these directories and everything under them
    agents: Sequence[str] = ()
    session_ids: Sequence[str] = ()
    created_from: float | None = None
    created_to: float | None = None
    availability: Sequence[str] = ()
    parents: Sequence[str | None] = ()  # None: a root session
    # which events
    seq_from: int | None = None
    seq_to: int | None = None
    surfaces: Sequence[str] = ()
    types: Sequence[str] = ()
    no_injected: bool = False  # leave out context a plugin, the harness or a reference put in
    time_from: float | None = None
    time_to: float | None = None
    # the page
    limit: int | None = None
    cursor: str | None = None  # an empty cursor is an invalid cursor, not "page 1"
    substring: bool = False
    #: "lexical" (the default ranking), "semantic" or "hybrid" (vectors; docs/semantic.md)
    mode: str | None = None
    snapshot: bool = False


def _session_filters(options: SearchOptions) -> list[dict[str, Any]]:
    filters: list[dict[str, Any]] = []
    if options.cwd is not None:
        filters.append({"kind": "cwd", "values": [options.cwd]})
    if options.session_ids:
        filters.append({"kind": "id", "values": list(options.session_ids)})
    if options.cwd_trees:
        filters.append({"kind": "cwd-tree", "values": list(options.cwd_trees)})
    if options.agents:
        filters.append({"kind": "agent", "values": list(options.agents)})
    if (options.created_from, options.created_to) != (None, None):
        filters.append({"kind": "created-at", "from": options.created_from,
                        "to": options.created_to})
    if options.availability:
        filters.append({"kind": "availability", "values": list(options.availability)})
    if options.parents:
        filters.append({"kind": "parent", "values": list(options.parents)})
    return filters


def _event_filters(options: SearchOptions) -> list[dict[str, Any]]:
    from projections.titles import NOT_INJECTED

    filters: list[dict[str, Any]] = []
    if (options.seq_from, options.seq_to) != (None, None):
        filters.append({"kind": "seq", "from": options.seq_from, "to": options.seq_to})
    if options.surfaces:
        filters.append({"kind": "surface", "values": list(options.surfaces)})
    if options.types:
        filters.append({"kind": "type", "values": list(options.types)})
    if options.no_injected:
        filters.append({"kind": "source", "values": list(NOT_INJECTED)})
    if (options.time_from, options.time_to) != (None, None):
        filters.append({"kind": "time", "from": options.time_from, "to": options.time_to})
    return filters


def _add_filters(request: dict[str, Any], key: str, filters: list[dict[str, Any]]) -> None:
    """The options' filters after the request's own (null: none). A value that is not an array
    is left for the request's validation to reject with its code."""
    given = request.get(key)
    if filters and (given is None or isinstance(given, list)):
        request[key] = [*(given or []), *filters]


def search_request(options: SearchOptions,
                   request: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The request (camelCase) for `Recall.search_sessions`, or for `Recall.search_events` when
    it names a session (`options.session_id` or the given request's `sessionId`): `request`'s
    own fields, then the options over them, their filters after its filters."""
    out: dict[str, Any] = dict(request or {})
    if options.query is not None:
        out["query"] = options.query
    if options.session_id is not None:
        out["sessionId"] = options.session_id
    within = "sessionId" in out
    if not within:
        _add_filters(out, "sessionFilters", _session_filters(options))
    _add_filters(out, "filters" if within else "eventFilters", _event_filters(options))
    if options.limit is not None:
        out["limit"] = options.limit
    if options.cursor is not None:
        out["cursor"] = options.cursor
    if options.substring:
        out["mode"] = "substring"
    if options.mode is not None:
        out["mode"] = options.mode
    if options.snapshot:
        out["consistency"] = "snapshot"
    return out
