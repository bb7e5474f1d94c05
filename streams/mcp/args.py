"""Agent tools: argument schemas (SPEC 6.1) and the checks that turn tool arguments into values.

One table per tool drives both the JSON Schema advertised in `tools/list` and the runtime
check, so what the model is told and what the server enforces cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from indexer.normalize import normalize_query
from projections.errors import SessionQueryError
from streams.mcp.errors import INVALID_ARGS, INVALID_FILTER, INVALID_QUERY, ToolError

MAX_SAFE_INTEGER = 2**53 - 1
AVAILABILITY = ("live", "persisted")
SURFACES = ("current", "shadowed", "log-only")
_TIMESTAMP_HELP = "UTC or offset timestamp, YYYY-MM-DDTHH:MM[:SS[.fraction]](Z|±HH:MM)"


@dataclass(frozen=True)
class Arg:
    """One argument: kind is string | timestamp | integer | boolean | strings | enums."""

    kind: str
    description: str
    required: bool = False
    choices: tuple[str, ...] = ()

    def schema(self) -> dict[str, Any]:
        if self.kind in ("string", "timestamp"):
            out: dict[str, Any] = {"type": "string"}
        elif self.kind == "integer":
            out = {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER}
        elif self.kind == "boolean":
            out = {"type": "boolean"}
        elif self.kind == "strings":
            out = {"type": "array", "items": {"type": "string"}, "minItems": 1}
        else:
            out = {"type": "array", "items": {"type": "string", "enum": list(self.choices)},
                   "minItems": 1}
        out["description"] = self.description
        return out


def _target() -> Arg:
    return Arg("string", "Session id to inspect; defaults to the calling session.")


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
    },
    "session_trace": {"session_id": _target()},
    "session_event_trace": {
        "session_id": _target(),
        "seq": Arg("integer", "The event to trace.", required=True),
    },
    "session_event_read": {
        "session_id": _target(),
        "seq": Arg("integer", "The event to read.", required=True),
        "before": Arg("integer", "Neighbouring events before the target (0-50)."),
        "after": Arg("integer", "Neighbouring events after the target (0-50)."),
    },
    "session_reference": {
        # No message argument: mentions inside a message would name sessions that never
        # passed the workspace check.
        "session_ids": Arg("strings", "Sessions (up to three) to reference.", required=True),
    },
}


def input_schema(tool: str) -> dict[str, Any]:
    """The JSON Schema of one tool's arguments (no cursor, limit or cwd: by design)."""
    specs = SPECS[tool]
    return {"type": "object",
            "properties": {name: arg.schema() for name, arg in specs.items()},
            "required": [name for name, arg in specs.items() if arg.required],
            "additionalProperties": False}


def _invalid(message: str) -> ToolError:
    return ToolError(INVALID_ARGS, f"invalid arguments: {message}")


def _check(name: str, arg: Arg, value: Any) -> Any:
    if arg.kind in ("string", "timestamp"):
        if not isinstance(value, str):
            raise _invalid(f"{name} must be a string")
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
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _invalid(f"{name} must be an array of strings")
    if arg.kind == "enums":
        for v in value:
            if v not in arg.choices:
                raise _invalid(f"{name} values must be one of {', '.join(arg.choices)}")
    return list(value)


def parse_args(tool: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """The schema check of the tool runtime: types, enums and unknown names are INVALID_ARGS.
    A null value counts as omitted (several hosts send null for unset optional fields)."""
    specs = SPECS[tool]
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
        out[name] = _check(name, arg, value)
    return out


def query_text(value: str) -> str:
    """The service's trim/collapse rules, applied before anything is read (SPEC 3.3 step 5)."""
    try:
        return normalize_query(value)
    except SessionQueryError as exc:
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
