"""Stage 3 of the flow: the semantic text of one event (PROTOCOL §3.5), the input of every document."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from projections.codec import dumps
from projections.events import as_wire

if TYPE_CHECKING:
    from projections.eventmodels import Event

#: Reserved highlight markers (PROTOCOL §3.3): never allowed in stored text.
HIGHLIGHT_OPEN = "\ufdd0"
HIGHLIGHT_CLOSE = "\ufdd1"
_SANITIZE = str.maketrans({"\x00": "\ufffd", HIGHLIGHT_OPEN: "\ufffd", HIGHLIGHT_CLOSE: "\ufffd"})

STRUCTURAL_TYPES: frozenset[str] = frozenset({
    "turn/start", "step/start", "step/end", "request/header", "session/end-seed",
})


def sanitize_text(text: str) -> str:
    """NUL and the reserved highlight markers become U+FFFD before indexing (PROTOCOL §3.3)."""
    # Three substring searches cost a fraction of translate(), which maps every character.
    if "\x00" not in text and (text.isascii() or (HIGHLIGHT_OPEN not in text
                                                  and HIGHLIGHT_CLOSE not in text)):
        return text
    return text.translate(_SANITIZE)


def message_of(kind: str, data: Any) -> dict[str, Any] | None:
    """The message an eligible event carries. user/message data *is* the UserMessage; the other
    two wrap it in `data.message`. A `message` wrapper on user/message is accepted too."""
    if not isinstance(data, dict):
        return None
    inner = data.get("message")
    if isinstance(inner, dict) and (kind != "user/message" or "content" not in data):
        return inner
    if kind == "user/message":
        return data
    return None


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return dumps(value).decode("utf-8")


def _result_content_pieces(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    pieces: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                pieces.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                pieces.append(_as_text(block.get("text")))
    return pieces


def block_pieces(blocks: Any, *, text_only: bool = False) -> list[str]:
    """Text of message content blocks: text, nested tool-call name+arguments, tool-result content.
    Reasoning and unknown block types contribute nothing."""
    if isinstance(blocks, str):
        return [blocks]
    pieces: list[str] = []
    if not isinstance(blocks, list):
        return pieces
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            pieces.append(_as_text(block.get("text")))
        elif text_only:
            continue
        elif kind == "tool-call":
            pieces.append(_as_text(block.get("name") or block.get("toolName")))
            pieces.append(_as_text(block.get("arguments", block.get("input"))))
        elif kind == "tool-result":
            pieces.extend(_result_content_pieces(block.get("content", block.get("output"))))
    return pieces


def _error_pieces(error: Any) -> list[str]:
    if isinstance(error, dict):
        return [_as_text(error.get("name")), _as_text(error.get("code"))]
    return []


def _turn_end_pieces(data: dict[str, Any]) -> list[str]:
    reason = data.get("reason")
    if reason == "error":
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        return ["error", _as_text(message if message is not None else data.get("message"))]
    if reason in ("aborted", "max-tokens", "interrupted"):
        return [str(reason)]
    return []


def _todo_pieces(data: dict[str, Any]) -> list[str]:
    items = data.get("todos", data.get("items"))
    pieces: list[str] = []
    if isinstance(items, list):
        for item in items:
            if isinstance(item, dict):
                pieces.append(_as_text(item.get("status")))
                pieces.append(_as_text(item.get("content")))
    return pieces


def extract_pieces(event: Event | Mapping[str, Any]) -> list[str]:
    """The raw text pieces of an event, before trimming and joining."""
    wire = as_wire(event)
    kind = wire.get("type")
    data = wire.get("data")
    if not isinstance(data, dict) or not isinstance(kind, str):
        return []
    if kind in ("user/message", "assistant/message"):
        message = message_of(kind, data)
        return block_pieces(message.get("content")) if message else []
    if kind == "tool/result":
        message = message_of(kind, data)
        pieces = block_pieces(message.get("content")) if message else []
        return pieces + _error_pieces(data.get("error"))
    if kind == "tool/call":
        return [_as_text(data.get("name")), _as_text(data.get("arguments"))]
    if kind == "todo/write":
        return _todo_pieces(data)
    if kind == "turn/end":
        return _turn_end_pieces(data)
    return []


def extract_text(event: Event | Mapping[str, Any]) -> str:
    """Pieces trimmed, empties dropped, joined with newlines, sanitized; '' means no document."""
    stripped = [p.strip() for p in extract_pieces(event)]
    return sanitize_text("\n".join(p for p in stripped if p))
