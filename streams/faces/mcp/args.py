"""Agent tools: argument schemas (PROTOCOL §6.1) and the checks that turn tool arguments into values.

One table per tool drives both the JSON Schema advertised in `tools/list` and the runtime
check, so what the model is told and what the server enforces cannot drift apart — bounds that
depend on settings (the read window, the sources of a reference) included: both read them from
the same `Limits`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from projections.errors import RECALL_QUERY_TOO_LONG as QUERY_TOO_LONG
from projections.errors import SESSION_REFERENCE_TOO_MANY, SessionQueryError
from streams.facade import normalize_query
from streams.faces.mcp.errors import (
    INVALID_ARGS,
    INVALID_FILTER,
    INVALID_QUERY,
    INVALID_WINDOW,
    ToolError,
)

MAX_SAFE_INTEGER = 2**53 - 1
AVAILABILITY = ("live", "persisted")
SURFACES = ("current", "shadowed", "log-only")
MODES = ("lexical", "hybrid", "semantic")
#: Values a session id / type list may hold: far inside the SQL binding budget (PROTOCOL §3.4:
#: 32,766 bindings) even with every list of a search full.
MAX_LIST_ITEMS = 1000
_TIMESTAMP_HELP = "UTC or offset timestamp, YYYY-MM-DDTHH:MM[:SS[.fraction]](Z|±HH:MM)"
_SESSION_ID_HELP = "a full id, a unique prefix, or the id without its agent prefix"


@dataclass(frozen=True)
class Limits:
    """The server's settings that bound arguments (RECALL_READ_WINDOW_MAX,
    RECALL_MAX_REFERENCES)."""

    read_window_max: int = 50
    max_references: int = 3

    def bound(self, name: str) -> int:
        """A named bound: a field of these limits, or one of the fixed ones."""
        fixed = {"safe": MAX_SAFE_INTEGER, "list": MAX_LIST_ITEMS}
        return fixed[name] if name in fixed else int(getattr(self, name))


@dataclass(frozen=True)
class Arg:
    """One argument: kind is string | timestamp | integer | boolean | strings | enums.
    `maximum` names the bound of an integer, `max_items` that of a list (`Limits.bound`);
    `too_large` is the code a value above `maximum` gets."""

    kind: str
    description: str
    required: bool = False
    choices: tuple[str, ...] = ()
    maximum: str = "safe"
    max_items: str = "list"
    too_large: str = INVALID_ARGS

    def upper(self, limits: Limits) -> int:
        """The largest integer, or the most list items, this argument takes."""
        if self.kind == "integer":
            return limits.bound(self.maximum)
        if self.kind == "enums":
            return len(self.choices)
        return limits.bound(self.max_items)

    def schema(self, limits: Limits) -> dict[str, Any]:
        if self.kind in ("string", "timestamp"):
            out: dict[str, Any] = {"type": "string"}
            if self.choices:
                out["enum"] = list(self.choices)
        elif self.kind == "integer":
            out = {"type": "integer", "minimum": 0, "maximum": self.upper(limits)}
        elif self.kind == "boolean":
            out = {"type": "boolean"}
        elif self.kind == "strings":
            out = {"type": "array", "items": {"type": "string"}, "minItems": 1,
                   "maxItems": self.upper(limits)}
        else:
            out = {"type": "array", "items": {"type": "string", "enum": list(self.choices)},
                   "minItems": 1, "maxItems": self.upper(limits)}
        out["description"] = self.description
        return out


def _target() -> Arg:
    return Arg("string", f"Session id to inspect ({_SESSION_ID_HELP}); defaults to the "
               "calling session.")


def _mode() -> Arg:
    return Arg("string", "lexical (default): the literal phrase, exact ranking; hybrid: also "
               "events that say it in other words (a local embedding model; the server needs "
               "the 'semantic' extra and RECALL_SEMANTIC=1); semantic: by meaning only.",
               choices=MODES)


def _no_injected() -> Arg:
    return Arg("boolean", "Leave out injected context: user messages a plugin, the harness or a "
               "reference put in (AGENTS.md, environment context, system reminders, reference "
               "snapshots). The person's prompts, compaction summaries and all other events "
               "stay.")


SPECS: dict[str, dict[str, Arg]] = {
    "session_search": {
        "query": Arg("string", "Literal phrase to find (whitespace collapsed).", required=True),
        "session_ids": Arg("strings", "Only these session ids."),
        "created_at_from": Arg("timestamp", f"Sessions created at or after; {_TIMESTAMP_HELP}."),
        "created_at_to": Arg("timestamp", f"Sessions created at or before; {_TIMESTAMP_HELP}."),
        "parent_session_ids": Arg("strings", "Only sessions forked from these parents."),
        "include_root_sessions": Arg("boolean", "With parent_session_ids: also root sessions."),
        "availability": Arg("enums", "live and/or persisted.", choices=AVAILABILITY),
        "event_seq_from": Arg("integer", "Matching event seq at least this."),
        "event_seq_to": Arg("integer", "Matching event seq at most this."),
        "event_time_from": Arg("timestamp", f"Matching event at or after; {_TIMESTAMP_HELP}."),
        "event_time_to": Arg("timestamp", f"Matching event at or before; {_TIMESTAMP_HELP}."),
        "event_types": Arg("strings", "Matching event types, e.g. tool/result."),
        "event_surfaces": Arg("enums", "Matching event surfaces.", choices=SURFACES),
        "exclude_injected": _no_injected(),
        "mode": _mode(),
    },
    "session_event_search": {
        "session_id": _target(),
        "query": Arg("string", "Literal phrase to find (whitespace collapsed).", required=True),
        "seq_from": Arg("integer", "Events with seq at least this."),
        "seq_to": Arg("integer", "Events with seq at most this."),
        "time_from": Arg("timestamp", f"Events at or after; {_TIMESTAMP_HELP}."),
        "time_to": Arg("timestamp", f"Events at or before; {_TIMESTAMP_HELP}."),
        "event_types": Arg("strings", "Event types, e.g. tool/result."),
        "surfaces": Arg("enums", "Event surfaces.", choices=SURFACES),
        "exclude_injected": _no_injected(),
        "mode": _mode(),
    },
    "session_trace": {"session_id": _target()},
    "session_event_trace": {
        "session_id": _target(),
        "seq": Arg("integer", "The event to trace.", required=True),
    },
    "session_event_read": {
        "session_id": _target(),
        "seq": Arg("integer", "The event to read.", required=True),
        "before": Arg("integer", "Neighbouring events before the target.",
                      maximum="read_window_max", too_large=INVALID_WINDOW),
        "after": Arg("integer", "Neighbouring events after the target.",
                     maximum="read_window_max", too_large=INVALID_WINDOW),
        "include_raw": Arg("boolean", "Also return data.raw, the original agent record an "
                           "importer kept (often most of the event's bytes); default false."),
    },
    "session_reference": {
        # No message argument: mentions inside a message would name sessions that never
        # passed the workspace check.
        "session_ids": Arg("strings", f"Sessions to reference ({_SESSION_ID_HELP}).",
                           required=True, max_items="max_references"),
    },
}


def input_schema(tool: str, limits: Limits | None = None) -> dict[str, Any]:
    """The JSON Schema of one tool's arguments (no cursor, limit or cwd: by design), with the
    bounds `limits` (the server's settings) put on them."""
    specs = SPECS[tool]
    bounds = limits or Limits()
    return {"type": "object",
            "properties": {name: arg.schema(bounds) for name, arg in specs.items()},
            "required": [name for name, arg in specs.items() if arg.required],
            "additionalProperties": False}


def _invalid(message: str) -> ToolError:
    return ToolError(INVALID_ARGS, f"invalid arguments: {message}")


def _check(name: str, arg: Arg, value: Any, limits: Limits) -> Any:
    if arg.kind in ("string", "timestamp"):
        if not isinstance(value, str):
            raise _invalid(f"{name} must be a string")
        if arg.choices and value not in arg.choices:
            raise _invalid(f"{name} must be one of {', '.join(arg.choices)}")
        return value
    if arg.kind == "boolean":
        if not isinstance(value, bool):
            raise _invalid(f"{name} must be a boolean")
        return value
    if arg.kind == "integer":
        # JSON has one number type: 3.0 is the integer 3, 3.5 is not an integer.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not (
                0 <= value <= MAX_SAFE_INTEGER):
            raise _invalid(f"{name} must be a non-negative safe integer")
        if value > arg.upper(limits):
            if arg.too_large == INVALID_WINDOW:
                raise ToolError(INVALID_WINDOW, "before and after must be integers from 0 to "
                                f"{arg.upper(limits)}")
            raise _invalid(f"{name} must be at most {arg.upper(limits)}")
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _invalid(f"{name} must be an array of strings")
    if len(value) > arg.upper(limits):
        if arg.max_items == "max_references":
            raise ToolError(SESSION_REFERENCE_TOO_MANY, "too many referenced sessions (at "
                            f"most {arg.upper(limits)})")
        raise _invalid(f"{name} holds at most {arg.upper(limits)} values")
    if arg.kind == "enums":
        for v in value:
            if v not in arg.choices:
                raise _invalid(f"{name} values must be one of {', '.join(arg.choices)}")
    return list(value)


def parse_args(tool: str, arguments: Mapping[str, Any] | None,
               limits: Limits | None = None) -> dict[str, Any]:
    """The schema check of the tool runtime: types, enums, bounds and unknown names are
    INVALID_ARGS (a read window beyond its bound is SESSION_QUERY_INVALID_WINDOW, too many
    reference sources SESSION_REFERENCE_TOO_MANY, as the service would say). A null value
    counts as omitted (several hosts send null for unset optional fields)."""
    specs = SPECS[tool]
    bounds = limits or Limits()
    raw = dict(arguments or {})
    for name in sorted(raw):
        if name not in specs:
            raise _invalid(f"unknown argument {name[:64]!r}")
    out: dict[str, Any] = {}
    for name, arg in specs.items():
        value = raw.get(name)
        if value is None:
            if arg.required:
                raise _invalid(f"{name} is required")
            continue
        out[name] = _check(name, arg, value, bounds)
    return out


def query_text(value: str) -> str:
    """The service's trim/collapse rules, applied before anything is read (PROTOCOL §3.3 step 5)."""
    try:
        return normalize_query(value)
    except SessionQueryError as exc:
        if exc.code == QUERY_TOO_LONG:
            raise ToolError(exc.code, exc.message) from exc
        raise ToolError(INVALID_QUERY) from exc


def non_empty(args: Mapping[str, Any], *names: str) -> None:
    """A supplied array must hold at least one value (an empty list would match nothing)."""
    for name in names:
        if name in args and not args[name]:
            raise ToolError(INVALID_FILTER, f"{name} must not be empty")


def int_range(args: Mapping[str, Any], low: str, high: str) -> tuple[int | None, int | None]:
    start, end = args.get(low), args.get(high)
    if start is not None and end is not None and start > end:
        raise ToolError(INVALID_FILTER, f"{low} must not exceed {high}")
    return start, end
