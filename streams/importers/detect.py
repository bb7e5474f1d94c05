"""Ingest edge: tell a file's format from its name and first bytes (native DSH, Claude Code, Codex)."""

from __future__ import annotations

import re
from pathlib import PurePath

import orjson
import zstandard

from projections.logformat import ZSTD_MAGIC

Format = str  # "dsh" | "claude-code" | "codex"

_CLAUDE_TYPES = frozenset({"user", "assistant", "system", "summary", "file-history-snapshot",
                           "queue-operation", "progress", "custom-title", "ai-title",
                           "attachment", "pr-link", "agent-name", "last-prompt",
                           "permission-mode", "saved_hook_context"})
_CODEX_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context",
                          "compacted"})
_TYPE = re.compile(rb'"type"\s*:\s*"([^"]{1,64})"')


def _plain_prefix(first_bytes: bytes) -> bytes:
    """Decompress as much of a zstd prefix as the bytes allow; plain bytes pass through."""
    if not first_bytes.startswith(ZSTD_MAGIC):
        return first_bytes
    try:
        out: bytes = zstandard.ZstdDecompressor().decompressobj().decompress(first_bytes)
        return out
    except zstandard.ZstdError:
        return b""


def _from_record(value: object) -> Format | None:
    if not isinstance(value, dict):
        return None
    kind = value.get("type")
    if kind == "session" and "version" in value:
        return "dsh"
    if kind in _CODEX_TYPES and "payload" in value:
        return "codex"
    if kind in _CLAUDE_TYPES or "parentUuid" in value or "leafUuid" in value:
        return "claude-code"
    return None


def _from_partial(line: bytes) -> Format | None:
    """A first line longer than the bytes we got (Codex session_meta carries whole system
    prompts): judge by the envelope's leading keys."""
    head = line[:512]
    found = _TYPE.search(head)
    kind = found.group(1).decode("utf-8", "replace") if found else None
    if kind == "session" and b'"version"' in head:
        return "dsh"
    if kind in _CODEX_TYPES and b'"payload"' in head:
        return "codex"
    if b'"parentUuid"' in head or b'"sessionId"' in head or kind in _CLAUDE_TYPES:
        return "claude-code"
    return None


def detect_format(path: str | PurePath, first_bytes: bytes) -> Format | None:
    """"dsh", "claude-code", "codex", or None when neither the content nor the name tells."""
    text = _plain_prefix(first_bytes)
    for line in text.split(b"\n")[:5]:
        if not line.strip():
            continue
        try:
            found = _from_record(orjson.loads(line))
        except orjson.JSONDecodeError:
            found = _from_partial(line)
        if found:
            return found
    name = PurePath(path).name
    if name.startswith("rollout-") and ".jsonl" in name:
        return "codex"
    if "/.claude/projects/" in PurePath(path).as_posix():
        return "claude-code"
    return None
