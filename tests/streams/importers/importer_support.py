"""Test support for the importer tests: excerpt loading and log checks (no I/O outside tests/data)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from projections import classify_surfaces, fold_surface
from projections.logformat import dump_log, parse_log
from streams.importers import ImportedSession

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
