"""Wire models of the log (stage 0 of the flow): the session header and the event envelope."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
)

from projections.errors import INGEST_SCHEMA_VIOLATION, InputRejected

MAX_SAFE_INTEGER = 2**53 - 1
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


def check_lossless(value: Any, path: str = "data") -> None:
    """Reject values JSON cannot carry exactly (PROTOCOL §1.2): -0, non-finite, unsafe ints, non-JSON types."""
    # Almost every value passes: walk it without building paths, and only when that walk finds
    # something it cannot vouch for, walk again with paths to name the first offender.
    if not _plainly_lossless(value):
        _check_lossless_with_paths(value, path)


def _plainly_lossless(value: Any) -> bool:
    """True if `value` is made only of exact JSON types with lossless numbers; False means
    "look closer" (a failure, or merely a subclass such as an int-valued enum)."""
    stack = [value]
    push = stack.append
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            for key, v in item.items():
                if type(key) is not str:
                    return False
                if type(v) is not str:  # strings (most values) need no visit
                    push(v)
        elif kind is list:
            stack.extend(item)
        elif kind is str or item is None or kind is bool:
            continue
        elif kind is int:
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                return False
        elif kind is float:
            if not math.isfinite(item) or (item == 0.0 and math.copysign(1.0, item) < 0):
                return False
        else:
            return False
    return True


def _check_lossless_with_paths(value: Any, path: str) -> None:
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if item is None or isinstance(item, (bool, str)):
            continue
        if isinstance(item, int):
            if abs(item) > MAX_SAFE_INTEGER:
                raise ValueError(f"{where}: integer {item} is outside the safe range")
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(f"{where}: non-finite number")
            if item == 0.0 and math.copysign(1.0, item) < 0:
                raise ValueError(f"{where}: -0 is not lossless JSON")
            continue
        if isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise ValueError(f"{where}: non-string key {k!r}")
                stack.append((v, f"{where}.{k}"))
            continue
        raise ValueError(f"{where}: {type(item).__name__} is not a JSON value")


class SessionHeader(BaseModel):
    """Line 1 of a native log (PROTOCOL §1.1): immutable, validated storage metadata."""

    # defer_build: the validator is built at the first validation, so a command that reads the
    # index and never validates an event does not pay for it
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              defer_build=True)

    type: Literal["session"]
    version: Literal[0]
    id: str = Field(min_length=1)
    created_at: StrictInt = Field(alias="createdAt", ge=0, le=MAX_SAFE_INTEGER)
    cwd: str | None = None
    parent_session: str | None = Field(default=None, alias="parentSession", min_length=1)
    seed_length: StrictInt | None = Field(default=None, alias="seedLength", ge=0,
                                          le=MAX_SAFE_INTEGER)
    origin: Literal["subagent"] | None = None
    delegation_depth: StrictInt | None = Field(default=None, alias="delegationDepth", ge=0,
                                               le=MAX_SAFE_INTEGER)
    agent_preset: str | None = Field(default=None, alias="agentPreset")
    #: Ours (not in DSH): who writes this log. `"recall"` for sessions created through recall's
    #: own API (recall appends to them: references, `recall append`); absent for every other
    #: log (an agent's file, an external producer): recall never appends to those (PROTOCOL §4.7).
    writer: Literal["recall"] | None = None

    @field_validator("cwd")
    @classmethod
    def _absolute_cwd(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/") and not _is_windows_absolute(value):
            raise ValueError("cwd must be an absolute path")
        return value

    def to_wire(self) -> dict[str, Any]:
        """The header as its JSON line, with exactly the keys the source had."""
        return self.model_dump(by_alias=True, exclude_unset=True)


def _is_windows_absolute(path: str) -> bool:
    return len(path) >= 3 and path[1] == ":" and path[2] in "\\/"


class Event(BaseModel):
    """One log entry (PROTOCOL §1.2). surfaceOp and sourceEventSeqs stay raw: `fold_surface` judges them."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              defer_build=True)

    type: str = Field(min_length=1)
    seq: StrictInt = Field(ge=0, le=MAX_SAFE_INTEGER)
    time: StrictInt = Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)
    data: Any
    surface_op: Any = Field(default=None, alias="surfaceOp")
    source_event_seqs: Any = Field(default=None, alias="sourceEventSeqs")
    ignorable: StrictBool | None = None

    @field_validator("data")
    @classmethod
    def _lossless(cls, value: Any) -> Any:
        check_lossless(value)
        return value

    def to_wire(self) -> dict[str, Any]:
        """The event as its JSON line, with exactly the keys the source had."""
        return self.model_dump(by_alias=True, exclude_unset=True)


def header_key_fields(header: Mapping[str, Any]) -> tuple[Any, ...]:
    """The fields two observations of one id must agree on (PROTOCOL §1.1); absent depth counts as 0.
    Ours: `writer` too, so a log someone else writes can never join a session recall writes (or
    the reverse): two writers of one session are a header conflict."""
    return (header.get("version"), header.get("id"), header.get("createdAt"), header.get("cwd"),
            header.get("parentSession"), header.get("seedLength"),
            header.get("delegationDepth") or 0, header.get("writer"))


def _rejection_from(exc: ValidationError, what: str) -> InputRejected:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or what
    return InputRejected(f"{what} violates the schema at {where}: {first.get('msg')}",
                         code=INGEST_SCHEMA_VIOLATION)


def parse_header(value: Any) -> dict[str, Any]:
    """Validate a header value; return it as a wire dict. Raises InputRejected (schema violation)."""
    if not isinstance(value, dict):
        raise InputRejected("session header must be a JSON object", code=INGEST_SCHEMA_VIOLATION)
    try:
        return SessionHeader.model_validate(value).to_wire()
    except ValidationError as exc:
        raise _rejection_from(exc, "session header") from None


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
    try:
        Event.model_validate(value)
    except ValidationError as exc:
        raise _rejection_from(exc, "event") from None
    return value


def as_wire(event: Event | Mapping[str, Any]) -> Mapping[str, Any]:
    """Accept parsed models or plain wire dicts wherever the core reads events."""
    if type(event) is dict:  # the common case, without the model class's isinstance hook
        return event
    if isinstance(event, Event):
        return event.to_wire()
    return event
