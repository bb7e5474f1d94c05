"""Stage 3 of the flow, for listings: what names a session — its agent, its titles, its first
prompt — and who wrote a message (source kind), read from the header and events alone (pure).

A session's title, in order of preference (resolved by the index, `indexer/listing.py`):
1. the latest `session/title` event of the session (an agent-provided title);
2. a Claude Code `summary` kept in *another* session's log (`claude-code/summary {summary,
   leafUuid}`) whose leaf uuid is a record of this session;
3. the first `user/message` whose source is the person (`source.kind: user`), shortened.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from projections.extraction import message_of
from projections.hashing import blake2b

#: Session id prefixes of the importers (`<agent>:<id>`); anything else is a native log.
AGENT_PREFIXES: frozenset[str] = frozenset({
    "aider", "claude-code", "codex", "continue", "copilot-cli", "crush", "gemini-cli",
    "kimi-cli", "opencode", "openhands", "pi", "roo-code",
})
NATIVE_AGENT = "dsh"

TITLE_EVENT = "session/title"
SUMMARY_EVENT = "claude-code/summary"
CLAUDE_AGENT = "claude-code"
#: A title made from a prompt keeps this many code points (then `…`).
PROMPT_TITLE_CHARS = 100

#: Who wrote a user/message, as the index stores it (3 bits): its `source.kind`, with the compact
#: checkpoints (`plugin` source, plugin `compact`: a compaction summary, PROTOCOL §1.4) told apart
#: from other plugin injections. 0: not a user message, or no source kind; OTHER: a kind outside
#: these names.
SOURCE_CODES: dict[str, int] = {"user": 1, "plugin": 2, "session-reference": 3, "compaction": 4}
OTHER_SOURCE = 5
NO_SOURCE = 0
SOURCE_NAMES: dict[int, str | None] = {NO_SOURCE: None, **{c: n for n, c in SOURCE_CODES.items()},
                                       OTHER_SOURCE: "other"}
#: The sources that are not injected context: the person, compaction summaries, and every event
#: that is not a user message.
NOT_INJECTED: tuple[str | None, ...] = ("user", "compaction", None)
#: Bits of a uuid key: JSON-safe integers (≤ 2^53 − 1), so they travel between workers as numbers.
UUID_KEY_BITS = 53


def agent_of(session_id: str) -> str:
    """The agent that wrote a session: its importer's id prefix, else `dsh` (a native log)."""
    prefix, sep, _ = session_id.partition(":")
    return prefix if sep and prefix in AGENT_PREFIXES else NATIVE_AGENT


def source_code(event: Mapping[str, Any]) -> int:
    """The stored source code of an event (non-zero only for user/message)."""
    if event.get("type") != "user/message":
        return NO_SOURCE
    message = message_of("user/message", event.get("data"))
    source = message.get("source") if message is not None else None
    kind = source.get("kind") if isinstance(source, dict) else None
    if not isinstance(kind, str):
        return NO_SOURCE
    if kind == "plugin" and isinstance(source, dict) and source.get("plugin") == "compact":
        return SOURCE_CODES["compaction"]
    return SOURCE_CODES.get(kind, OTHER_SOURCE)


def shorten(text: str, limit: int = PROMPT_TITLE_CHARS) -> str:
    """One line: whitespace runs collapsed, cut at a word boundary to `limit` code points + `…`."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[:limit]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def own_title(event: Mapping[str, Any]) -> str | None:
    """The title a `session/title` event sets (non-blank), else None."""
    if event.get("type") != TITLE_EVENT:
        return None
    data = event.get("data")
    title = data.get("title") if isinstance(data, dict) else None
    return title if isinstance(title, str) and title.strip() else None


def summary_of(event: Mapping[str, Any]) -> tuple[str, str] | None:
    """(leaf uuid, summary) of a `claude-code/summary` event, else None."""
    if event.get("type") != SUMMARY_EVENT:
        return None
    data = event.get("data")
    if not isinstance(data, dict):
        return None
    summary, leaf = data.get("summary"), data.get("leafUuid")
    if isinstance(summary, str) and summary.strip() and isinstance(leaf, str) and leaf:
        return leaf, summary
    return None


def record_uuid(event: Mapping[str, Any]) -> str | None:
    """The Claude Code record uuid an imported event carries (`data.id` of a user message,
    `data.message.id` of the others), which a summary's `leafUuid` names."""
    data = event.get("data")
    if not isinstance(data, dict):
        return None
    found = data.get("id")
    if not isinstance(found, str):
        message = data.get("message")
        found = message.get("id") if isinstance(message, dict) else None
    return found if isinstance(found, str) and found else None


def uuid_key(uuid: str) -> int:
    """A 53-bit key of a uuid. Two uuids sharing a key is a ~1e-6 chance even for 10^4
    summaries over 10^6 records (n·m / 2^53), and would only mis-title a session."""
    digest = blake2b(uuid.encode("utf-8"), digest_size=8, person=b"recall-uuid").digest()
    return int.from_bytes(digest, "big") >> (64 - UUID_KEY_BITS)


def is_prompt(event_type: str, source: int) -> bool:
    """A person's own prompt: the candidates for a title made from the first prompt."""
    return event_type == "user/message" and source == SOURCE_CODES["user"]
