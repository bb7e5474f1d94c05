"""Tool calls across a session's events: which tool/call event names a call id, which assistant
messages hold nothing but calls. The human transcript (the UI's session page) shows such a
message through its tool/call events instead of twice; the index keeps these facts per event
(the `calls` table) so a page of a long transcript is found without reading the whole log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from projections.extraction import block_pieces, message_of

TOOL_CALL = "tool/call"
ASSISTANT_MESSAGE = "assistant/message"


def blocks(event: Mapping[str, Any]) -> list[Any]:
    """The content blocks of the message an event carries ([] when it carries none)."""
    message = message_of(str(event.get("type")), event.get("data")) or {}
    found = message.get("content")
    return found if isinstance(found, list) else []


def call_ids(event: Mapping[str, Any]) -> list[str]:
    """The ids of the tool calls an assistant message makes."""
    return [str(b.get("id") or b.get("toolCallId")) for b in blocks(event)
            if isinstance(b, dict) and b.get("type") == "tool-call"]


def own_words(event: Mapping[str, Any]) -> str:
    """A message's own text blocks (its calls left out)."""
    return "\n".join(p for p in block_pieces(blocks(event), text_only=True) if p)


def named_call(event: Mapping[str, Any]) -> str | None:
    """The call id a tool/call event names (None for any other event)."""
    data = event.get("data")
    if event.get("type") == TOOL_CALL and isinstance(data, dict):
        return str(data.get("callId"))
    return None


def call_name(event: Mapping[str, Any]) -> str:
    """The tool name a tool/call event gives its call."""
    data = event.get("data")
    return str(data.get("name") or "") if isinstance(data, dict) else ""


def tool_names(events: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Call id → tool name over a log (a later tool/call naming the same id wins)."""
    names: dict[str, str] = {}
    for event in events:
        call = named_call(event)
        if call is not None:
            names[call] = call_name(event)
    return names


def calls_only(event: Mapping[str, Any]) -> list[str]:
    """The calls of an assistant message that has no words of its own ([] for any other event):
    the transcript leaves it out when every one of them has a tool/call event and it is not
    shadowed."""
    if event.get("type") != ASSISTANT_MESSAGE:
        return []
    calls = call_ids(event)
    if not calls or own_words(event).strip():
        return []
    return calls


def result_call_id(event: Mapping[str, Any]) -> str | None:
    """The call id a tool/result answers (its first tool-result block's)."""
    message = message_of("tool/result", event.get("data")) or {}
    for block in message.get("content") or []:
        if isinstance(block, dict) and block.get("toolCallId") is not None:
            return str(block["toolCallId"])
    return None
