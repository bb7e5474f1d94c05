"""The pydantic wire models of the log (projections/events.py loads them when a value needs the
model's verdict): the session header and the event envelope."""

from __future__ import annotations

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
from projections.lossless import MAX_SAFE_INTEGER, check_lossless


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


def _rejection_from(exc: ValidationError, what: str) -> InputRejected:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or what
    return InputRejected(f"{what} violates the schema at {where}: {first.get('msg')}",
                         code=INGEST_SCHEMA_VIOLATION)



def validate_header(value: dict[str, Any]) -> dict[str, Any]:
    """The header as its wire dict, or InputRejected naming the first schema violation."""
    try:
        return SessionHeader.model_validate(value).to_wire()
    except ValidationError as exc:
        raise _rejection_from(exc, "session header") from None


def validate_event(value: dict[str, Any]) -> None:
    """InputRejected naming the first schema violation of the event envelope, if any."""
    try:
        Event.model_validate(value)
    except ValidationError as exc:
        raise _rejection_from(exc, "event") from None
