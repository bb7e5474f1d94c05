"""Wire models of the log (stage 0 of the flow): the session header and the event envelope."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from projections.errors import INGEST_SCHEMA_VIOLATION, InputRejected
from projections.lossless import MAX_SAFE_INTEGER as MAX_SAFE_INTEGER
from projections.lossless import _check_lossless_with_paths as _check_lossless_with_paths
from projections.lossless import _plainly_lossless
from projections.lossless import check_lossless as check_lossless

# The pydantic models live in projections/eventmodels.py and load with the first validation
# that needs them: a command that only reads the index never imports pydantic.
if TYPE_CHECKING:
    from projections.eventmodels import Event as Event
    from projections.eventmodels import SessionHeader as SessionHeader

_MODELS = frozenset({"Event", "SessionHeader", "_rejection_from"})


def __getattr__(name: str) -> Any:
    if name not in _MODELS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from projections import eventmodels

    return getattr(eventmodels, name)


SESSION_FORMAT_VERSION = 0

#: The three surface-eligible types (PROTOCOL §1.2): they produce model messages and carry surfaceOp.
SURFACE_TYPES: frozenset[str] = frozenset({"user/message", "assistant/message", "tool/result"})

#: DSH's KNOWN_SESSION_EVENT_TYPES (PROTOCOL §1.2): 3 surface + 10 core log-only + 35 plugin = 48.
KNOWN_EVENT_TYPES: frozenset[str] = SURFACE_TYPES | frozenset({
    "turn/start", "turn/end", "step/start", "step/end", "assistant/chunk", "tool/call",
    "todo/write", "request/header", "request/context", "session/end-seed",
    "agent/inbox/spliced", "agent-preset/selected", "approval/asked", "approval/decided",
    "approval/policy", "command/run", "command/done", "compaction/start", "compaction/summary",
    "compaction/end", "compaction/prune", "feedback/record", "goal/change", "hook/invoked",
    "hook/result", "llm/retry", "llm/retry-started", "permission/preset", "plan/mode",
    "sandbox/mode", "schedule/change", "session/title", "session/title-llm-request",
    "subagent/descriptor", "team/member", "team/message/delivered", "team/message/queued",
    "team/task", "tool/code-dispatch", "tool/code-dispatch-start", "tool-workflow/agent-start",
    "tool-workflow/agent-end", "tool-workflow/run-start", "tool-workflow/run-end",
    "web/deepseek-search-llm-request",
})

#: Packed chunk rows (PROTOCOL §0.1): one row stands for a run of `assistant/chunk` events.
CHUNK_ROW_TYPES: frozenset[str] = frozenset({"text-chunks", "reasoning-chunks", "tool-call-chunks"})


def is_chunk_row(value: Any) -> bool:
    """A decoded line that is a packed chunk row (its `type` may be anything on hostile input:
    a list or a dict must not reach the set lookup)."""
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    return isinstance(kind, str) and kind in CHUNK_ROW_TYPES


def header_key_fields(header: Mapping[str, Any]) -> tuple[Any, ...]:
    """The fields two observations of one id must agree on (PROTOCOL §1.1); absent depth counts as 0.
    Ours: `writer` too, so a log someone else writes can never join a session recall writes (or
    the reverse): two writers of one session are a header conflict."""
    return (header.get("version"), header.get("id"), header.get("createdAt"), header.get("cwd"),
            header.get("parentSession"), header.get("seedLength"),
            header.get("delegationDepth") or 0, header.get("writer"))


def parse_header(value: Any) -> dict[str, Any]:
    """Validate a header value; return it as a wire dict. Raises InputRejected (schema violation)."""
    if not isinstance(value, dict):
        raise InputRejected("session header must be a JSON object", code=INGEST_SCHEMA_VIOLATION)
    from projections.eventmodels import validate_header

    return validate_header(value)


#: The envelope keys the fast check vouches for (by alias); anything else goes to the model.
_ENVELOPE_KEYS = frozenset({"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs",
                            "ignorable"})


def _plainly_valid(value: dict[str, Any], canonical: bytes | None) -> bool:
    """True only if `Event.model_validate(value)` would accept `value`: the common shapes,
    checked by hand; False means "ask the model" (which then gives the one rejection message).
    `canonical`: the line `value` was parsed from, if orjson writes `value` back as exactly
    those bytes (projections.codec.loads_canonical): its numbers are then safe integers or
    finite floats, so `data` is lossless unless the line spells a negative zero."""
    kind = value.get("type")
    seq = value.get("seq")
    time_ = value.get("time")
    if (type(kind) is not str or not kind or type(seq) is not int or type(time_) is not int
            or not 0 <= seq <= MAX_SAFE_INTEGER
            or not -MAX_SAFE_INTEGER <= time_ <= MAX_SAFE_INTEGER
            or "data" not in value or not _ENVELOPE_KEYS.issuperset(value)):
        return False
    ignorable = value.get("ignorable")
    if ignorable is not None and type(ignorable) is not bool:
        return False
    if canonical is not None and b"-0.0" not in canonical:
        return True
    return _plainly_lossless(value["data"])


def parse_event(value: Any, *, canonical: bytes | None = None) -> dict[str, Any]:
    """Validate an event envelope; return the original wire dict. Raises InputRejected.
    `canonical`: see `_plainly_valid` (a fast path only: the verdict is the model's)."""
    if not isinstance(value, dict):
        raise InputRejected("event must be a JSON object", code=INGEST_SCHEMA_VIOLATION)
    if _plainly_valid(value, canonical):
        return value
    from projections.eventmodels import validate_event

    validate_event(value)
    return value


def as_wire(event: Event | Mapping[str, Any]) -> Mapping[str, Any]:
    """Accept parsed models or plain wire dicts wherever the core reads events."""
    if type(event) is dict:  # the common case, without the model class's isinstance hook
        return event
    models = sys.modules.get("projections.eventmodels")  # no model exists before it loads
    if models is not None and isinstance(event, models.Event):
        wire: dict[str, Any] = event.to_wire()
        return wire
    return cast("Mapping[str, Any]", event)  # no Event exists before its module loads
