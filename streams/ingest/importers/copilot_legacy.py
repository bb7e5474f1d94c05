"""Ingest edge: pre-1.0 GitHub Copilot CLI sessions (`history-session-state/<id>.json`, one JSON
document rewritten whole) → native session logs.

The `timeline` is the record: `user` prompts, `copilot` replies, `tool_call_completed` items
(call and result in one), `info` notices. The document stores no cwd, model or tokens: the
session has no workspace (still searchable; no workspace-scoped MCP caller sees it).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from projections.errors import INGEST_SCHEMA_VIOLATION
from projections.logformat import Rejection, decompress
from streams.ingest.importers.common import (
    Emitter,
    ImportedSession,
    SourceLine,
    as_dict,
    feed_each,
    iso_ms,
    load_document,
    make_header,
    part_line,
    split_readable,
    with_rejections,
)
from streams.ingest.importers.copilot_cli import PREFIX
from streams.ingest.importers.registry import ImporterSpec, Location
from streams.ingest.importers.sniffing import document_head, is_record_stream
from streams.ingest.importers.turns import TurnClock

NAME = f"{PREFIX}-legacy"


class _LegacyMapper:
    def __init__(self, created_at: int) -> None:
        self.em = Emitter()
        self.clock = TurnClock()
        self.time = created_at

    def feed(self, line: SourceLine) -> None:
        item = line.value
        kind, iid = item.get("type"), item.get("id")
        if not isinstance(kind, str) or not isinstance(iid, str) or not iid:
            self.em.reject(line, INGEST_SCHEMA_VIOLATION,
                           "timeline item without a string `id` and `type`")
            return
        self.time = iso_ms(item.get("timestamp")) or self.time
        text = item.get("text") if isinstance(item.get("text"), str) else ""
        if kind == "user":
            self.clock.prompt()
            self.em.open_step(line, self.clock, self.time, keyed=True)
            self.em.emit(line, "user/message", self.time, {
                "id": iid, "role": "user", "source": {"kind": "user"},
                "content": [{"type": "text", "text": text}]}, op="append", key=iid)
        elif kind == "copilot":
            self._assistant(line, iid, [{"type": "text", "text": text}])
        elif kind == "tool_call_completed":
            self._tool(line, iid, item)
        else:
            self.em.emit(line, f"{PREFIX}/{kind}", self.time, {"text": text}, key=iid)

    def _assistant(self, line: SourceLine, key: str, blocks: list[dict[str, Any]]) -> None:
        # One model response's text and tool calls are written with one timestamp.
        stamp = line.value.get("timestamp")
        self.clock.assistant(stamp if isinstance(stamp, str) else None)
        self.em.open_step(line, self.clock, self.time, keyed=True)
        self.em.emit(line, "assistant/message", self.time, {
            "turn": self.clock.turn, "step": self.clock.step,
            "message": {"id": key, "role": "assistant", "content": blocks}},
            op="append", key=key)

    def _tool(self, line: SourceLine, iid: str, item: dict[str, Any]) -> None:
        call_id = item.get("callId") if isinstance(item.get("callId"), str) else iid
        name = item.get("name") if isinstance(item.get("name"), str) else ""
        arguments = item.get("arguments", {})
        self._assistant(line, f"{iid}/call", [{"type": "tool-call", "toolCallId": call_id,
                                               "name": name, "arguments": arguments}])
        turn, step = self.clock.turn, self.clock.step
        self.em.emit(line, "tool/call", self.time, {"turn": turn, "step": step,
                                                    "callId": call_id, "name": name,
                                                    "arguments": arguments},
                     key=f"{iid}/tool")
        result = as_dict(item.get("result"))
        failed = result.get("type") not in ("success", None)
        log = result.get("log")
        part = {"type": "tool-result", "toolCallId": call_id,
                "content": log if isinstance(log, str) else "", "isError": failed}
        data: dict[str, Any] = {"turn": turn, "step": step, "message": {
            "id": f"{iid}/result", "role": "tool", "content": [part]}}
        if failed:
            data["error"] = {"name": "ToolError", "code": "TOOL_ERROR"}
        self.em.emit(line, "tool/result", self.time, data, op="append", key=f"{iid}/result")


def import_copilot_legacy(data: bytes, source_name: str) -> list[ImportedSession]:
    """One legacy session document → its session."""
    doc = load_document(decompress(data), PREFIX, source_name)
    if isinstance(doc, ImportedSession):
        return [doc]
    found = doc.get("timeline")
    items = [part_line(i + 1, t) for i, t in enumerate(found if isinstance(found, list) else [])]
    lines, unreadable = split_readable(items)
    sid, created = doc.get("sessionId"), iso_ms(doc.get("startTime"))
    if not isinstance(sid, str) or not sid or created is None:
        unreadable.append(Rejection(0, INGEST_SCHEMA_VIOLATION,
                                    "no sessionId and startTime identify this session", data))
        return with_rejections(PREFIX, [], unreadable, source_name)
    mapper = _LegacyMapper(created)
    top = SourceLine(0, b"", {k: v for k, v in doc.items() if k != "timeline"})
    mapper.em.emit(top, f"{PREFIX}/session", created, {}, key="session")
    feed_each(lines, mapper.feed, mapper.em, f"{PREFIX}/unmapped")
    session = ImportedSession(make_header(f"{PREFIX}:{sid}", created), mapper.em.events,
                              mapper.em.rejections)
    return with_rejections(PREFIX, [session], unreadable, source_name)


def sniff(path: PurePath, head: bytes) -> bool:
    squeezed = document_head(head)
    return squeezed.startswith(b"{") and b'"sessionId":' in squeezed \
        and (b'"chatMessages":' in squeezed or b'"timeline":' in squeezed) \
        and b'"projectHash":' not in squeezed and not is_record_stream(head)


SPEC = ImporterSpec(
    name=NAME, load=import_copilot_legacy, sniff=sniff,
    claims=lambda path: path.suffix == ".json" and path.parent.name == "history-session-state",
    locations=(Location(".copilot/history-session-state", env="COPILOT_HOME",
                        below="history-session-state"),),
    whole_document=True)
