"""Write stage for sessions recall itself keeps: one writer per session (PROTOCOL §4.7, ours).

Every stored session records who writes its log, in its header: `"writer": "recall"` for a
session created through recall's API (`Recall.create_session`, `recall create`), nothing for
every other log (an agent's file, an external producer on the events topic). The header is line
1 of the log, so the fact survives replay and reindex and every runtime reads it the same way;
`writer` is one of the header's key fields, so a second writer claiming the same id is an
INGEST_HEADER_CONFLICT instead of an interleaved log.

Recall appends only to sessions it writes: `append_events` refuses any other target with
RECALL_NOT_WRITER, and a reference to one returns its two messages instead of appending them
(`delivery: "returned"`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from projections.errors import InputRejected, RecallError, UsageError
from projections.events import parse_event, parse_header
from projections.logformat import check_event_type

WRITER_FIELD = "writer"
RECALL_WRITER = "recall"
RECALL_NOT_WRITER = "RECALL_NOT_WRITER"
RECALL_SESSION_EXISTS = "RECALL_SESSION_EXISTS"
#: The keys an appended event may carry; recall gives `seq` (and `time` when absent).
APPEND_KEYS = ("type", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable")


class NotWriter(RecallError):
    """An append to a session recall does not write (an agent's file, an outside producer)."""

    code = RECALL_NOT_WRITER
    hint = ("recall appends only to sessions it writes (created with `recall create` or "
            "Recall.create_session); deliver the message through the session's own writer")


class SessionExists(RecallError):
    """`create` named a session id that is already stored."""

    code = RECALL_SESSION_EXISTS
    hint = "pick another id (or omit it: recall makes a new one)"


def writes(header: Mapping[str, Any] | None) -> bool:
    """True when recall writes this session's log."""
    return header is not None and header.get(WRITER_FIELD) == RECALL_WRITER


def require_writer(header: Mapping[str, Any]) -> None:
    if not writes(header):
        raise NotWriter(f"session {header.get('id')!r} is written by an outside source "
                        "(an agent's log file or an external producer); recall does not "
                        "append to it")


def new_header(session_id: str | None = None, *, cwd: str | None = None,
               parent_session: str | None = None, agent_preset: str | None = None,
               created_at: int | None = None) -> dict[str, Any]:
    """The header of a new recall-written session (validated: PROTOCOL §1.1 plus `writer`)."""
    header: dict[str, Any] = {
        "type": "session", "version": 0, "id": session_id or f"rs-{uuid.uuid4()}",
        "createdAt": int(time.time() * 1000) if created_at is None else created_at}
    if cwd is not None:
        header["cwd"] = cwd
    if parent_session is not None:
        header["parentSession"] = parent_session
    if agent_preset is not None:
        header["agentPreset"] = agent_preset
    header["delegationDepth"] = 0
    header[WRITER_FIELD] = RECALL_WRITER
    return parse_header(header)


def appended_events(events: Sequence[Any], now_ms: int) -> list[dict[str, Any]]:
    """Events for an append, without seqs (the appender numbers them under the writer lock);
    each is checked against the envelope schema and the known types first, so nothing is
    half-appended."""
    out: list[dict[str, Any]] = []
    for i, event in enumerate(events):
        if not isinstance(event, Mapping):
            raise UsageError(f"event #{i} must be an object")
        extra = sorted(set(event) - set(APPEND_KEYS) - {"seq"})
        if extra:
            raise UsageError(f"event #{i} has keys an appended event cannot carry: {extra}")
        kept = {k: event[k] for k in APPEND_KEYS if k in event}
        kept.setdefault("time", now_ms)
        kept.setdefault("data", {})
        try:
            parse_event({**kept, "seq": 0})  # envelope schema and lossless data
            check_event_type(kept)
        except InputRejected as exc:
            raise RecallError(f"event #{i}: {exc.message}", code=exc.code,
                              hint="nothing was appended; fix the event") from None
        out.append(kept)
    return out


def user_message(text: str, *, message_id: str | None = None) -> dict[str, Any]:
    """A person's text as a `user/message` append (source.kind user)."""
    return {"type": "user/message", "surfaceOp": "append",
            "data": {"id": message_id or f"msg-{uuid.uuid4()}", "role": "user",
                     "source": {"kind": "user"}, "content": [{"type": "text", "text": text}]}}
