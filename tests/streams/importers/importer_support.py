"""Test support for the importer tests: excerpt loading and log checks (no I/O outside tests/data)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from projections import classify_surfaces, fold_surface
from projections.logformat import dump_log, parse_log
from streams.ingest.importers import ImportedSession

DATA = Path(__file__).resolve().parents[2] / "data" / "realdata"
CC_1098 = "claude-code-1.0.98-sidechains.jsonl"
CC_2114 = "claude-code-2.1.14-compaction.jsonl"
CC_215 = "claude-code-2.1.5-compaction.jsonl"
CODEX = "codex-0.125-parent.jsonl"

Importer = Callable[[bytes, str], list[ImportedSession]]


def load(name: str) -> bytes:
    return (DATA / name).read_bytes()


def records(name: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in load(name).splitlines() if line.strip()]


def to_bytes(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(v) + b"\n" for v in lines)


def types(session: ImportedSession) -> Counter[str]:
    return Counter(e["type"] for e in session.events)


def surfaces(session: ImportedSession) -> list[str]:
    return [str(s) for s in classify_surfaces(session.events)]


def by_type(session: ImportedSession, kind: str) -> list[dict[str, Any]]:
    return [e for e in session.events if e["type"] == kind]


def dumped(session: ImportedSession) -> bytes:
    """The session as native log bytes."""
    events: list[Mapping[str, Any]] = list(session.events)
    return dump_log(session.header, events)


def assert_valid_log(session: ImportedSession) -> None:
    """The session folds, and its bytes read back through the native reader unchanged."""
    fold_surface(session.events)
    parsed = parse_log(dumped(session))
    assert parsed.rejections == []
    assert parsed.header == session.header
    assert parsed.events == session.events
    for event in session.events:
        if event["type"] not in ("user/message", "assistant/message", "tool/result"):
            assert "surfaceOp" not in event and "sourceEventSeqs" not in event


def line_of(event: dict[str, Any]) -> dict[str, Any]:
    raw: dict[str, Any] = event["data"]["raw"]
    return raw


AGENTS = DATA.parent / "agents"
GEMINI_MAIN = "gemini-cli-0.34/session-2026-03-18T01-46-50316244.json"
GEMINI_SUB1 = "gemini-cli-0.34/session-2026-03-18T01-47-50316244.json"
GEMINI_SUB2 = "gemini-cli-0.34/session-2026-03-18T01-49-50316244.json"
GEMINI_2025 = "gemini-cli-2025-10-pomodoro.json"
GEMINI_ERRORS = "gemini-cli-2026-03-control-flash.json"
GEMINI_JSONL = "gemini-cli-2026-04.jsonl"
COPILOT = "copilot-cli-1.0.34-events.jsonl"
COPILOT_COMPACTION = "copilot-cli-1.0.74-compaction.jsonl"
COPILOT_LEGACY = "copilot-cli-2025-10-legacy.json"
OPENCODE_ERROR = "opencode/ses_20be19bd6ffeHn5B6DdBVxU8TR.json"
OPENCODE_RUNNING = "opencode/ses_20c685993ffe8NJ44bWWcyosxi.json"
OPENCODE_CHILD = "opencode/ses_2bef25635ffe8EzID0I1Oeymal.json"
AIDER = "aider-0.85/.aider.chat.history.md"
PI = "pi/before-compaction.jsonl"
CONTINUE = "continue/5d3764fb-da1f-4d6b-b170-9a6601afa210.json"
ROO_UI = "roo-code/ac8aa7b4-319c-4925-a139-4f4adca81921/ui_messages.json"
ROO_API = "roo-code/ac8aa7b4-319c-4925-a139-4f4adca81921/api_conversation_history.json"
KIMI = "kimi-cli/00d5060aaec3fda180930ea52304b87b/d8447fa8-9d8e-41af-9fc6-a12e4a196b6c.jsonl"
OPENHANDS = "openhands/basic_gui_mode.json"
CRUSH = "crush/.crush/crush.db"


def agent(name: str) -> bytes:
    return (AGENTS / name).read_bytes()


def document(name: str) -> dict[str, Any]:
    value: dict[str, Any] = orjson.loads(agent(name))
    return value


def with_raw(session: ImportedSession) -> list[dict[str, Any]]:
    """The events that carry an original record."""
    return [e for e in session.events if "raw" in e["data"]]


def assert_steps_announced(session: ImportedSession) -> None:
    """Every (turn, step) an assistant message names was announced by a `step/start` before it,
    and each `step/start` is announced once."""
    announced: list[tuple[int, int]] = []
    for event in session.events:
        data = event["data"]
        if event["type"] == "step/start":
            announced.append((data["turn"], data["step"]))
        elif event["type"] == "assistant/message":
            assert (data["turn"], data["step"]) in announced, event["seq"]
    assert len(announced) == len(set(announced))
