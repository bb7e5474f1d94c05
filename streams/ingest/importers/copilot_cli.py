"""Ingest edge: GitHub Copilot CLI `session-state/<id>/events.jsonl` (1.0.x) → native session logs.

One event per line, a linear log. A person's `user.message` opens a turn, each
`assistant.turn_start` one model call (a step, closed by `assistant.turn_end`). Tool requests
ride on `assistant.message`; `tool.execution_complete` carries the result. Background
compaction (`session.compaction_start` … turns keep running … `session.compaction_complete`)
shadows what was on the surface when it started.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

from projections.errors import INGEST_SCHEMA_VIOLATION
from projections.logformat import Rejection, decompress
from streams.ingest.importers import compaction
from streams.ingest.importers.common import (
    Emitter,
    ImportedSession,
    LineMapper,
    SourceLine,
    as_dict,
    as_list,
    feed_each,
    iso_ms,
    make_header,
    read_lines,
    split_readable,
    with_rejections,
)
from streams.ingest.importers.registry import ImporterSpec, Location
from streams.ingest.importers.sniffing import envelope_type, head_lines
from streams.ingest.importers.turns import TurnClock

PREFIX = "copilot-cli"
META_PLUGIN = "copilot-cli-meta"
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


class _CopilotMapper(LineMapper):
    def __init__(self, created_at: int) -> None:
        self.em = Emitter()
        self.clock = TurnClock()
        self.time = created_at
        self.step_key: str | None = None
        self.calls: dict[str, tuple[int, int]] = {}
        self.model = "unknown"
        self.compaction: compaction.Pending | None = None

    def feed(self, line: SourceLine) -> None:
        record = line.value
        self.time = iso_ms(record.get("timestamp")) or self.time
        kind = record["type"]
        data = record.get("data")
        if not isinstance(data, dict):
            self.em.reject(line, INGEST_SCHEMA_VIOLATION, f"{kind} event without an object `data`")
            return
        if isinstance(data.get("model"), str):
            self.model = data["model"]
        handler = {
            "user.message": self._user, "system.message": self._system,
            "assistant.turn_start": self._step_start, "assistant.turn_end": self._step_end,
            "assistant.message": self._assistant, "tool.execution_start": self._execution,
            "tool.execution_complete": self._result,
            "session.compaction_start": self._compaction_start,
            "session.compaction_complete": self._compaction_complete,
        }.get(kind)
        if handler is not None:
            handler(line, data)
        else:
            if kind == "session.model_change" and isinstance(data.get("newModel"), str):
                self.model = data["newModel"]
            self._log_only(line, f"{PREFIX}/{kind}", {})

    def _id(self, line: SourceLine) -> str:
        rid = line.value.get("id")
        return rid if isinstance(rid, str) and rid else f"line-{line.number}"

    # --- messages ----------------------------------------------------------------------------

    def _user(self, line: SourceLine, data: dict[str, Any]) -> None:
        typed = _text(data.get("content"))
        if not typed.strip() or data.get("source") == "system":
            # An autopilot nudge or a steering reminder: only `transformedContent` is there.
            self._context(line, _text(data.get("transformedContent")) or typed)
            return
        self.clock.prompt()
        self.step_key = None
        self.em.open_step(line, self.clock, self.time)
        # `content` is what the person typed; `transformedContent` (what the model read, with
        # the date and reminders around it) stays in `raw`.
        self.em.emit(line, "user/message", self.time, {
            "id": self._id(line), "role": "user", "source": {"kind": "user"},
            "content": [{"type": "text", "text": typed}]}, op="append")

    def _system(self, line: SourceLine, data: dict[str, Any]) -> None:
        self._context(line, _text(data.get("content")))

    def _context(self, line: SourceLine, text: str) -> None:
        self.em.emit(line, "user/message", self.time, {
            "id": self._id(line), "role": "user",
            "source": {"kind": "plugin", "plugin": META_PLUGIN},
            "content": [{"type": "text", "text": text}]}, op="append")

    def _step_start(self, line: SourceLine, data: dict[str, Any]) -> None:
        self.step_key = self._id(line)
        self.clock.assistant(self.step_key)
        self.em.open_step(line, self.clock, self.time)
        self._log_only(line, f"{PREFIX}/assistant.turn_start", {})

    def _step_end(self, line: SourceLine, data: dict[str, Any]) -> None:
        self._log_only(line, "step/end", {"turn": self.clock.turn, "step": self.clock.step})

    def _assistant(self, line: SourceLine, data: dict[str, Any]) -> None:
        self.clock.assistant(self.step_key)
        self.em.open_step(line, self.clock, self.time)
        blocks: list[dict[str, Any]] = []
        if _text(data.get("reasoningText")):
            blocks.append({"type": "reasoning", "text": data["reasoningText"]})
        if _text(data.get("content")):
            blocks.append({"type": "text", "text": data["content"]})
        requests = [r for r in as_list(data.get("toolRequests")) if isinstance(r, dict)]
        for request in requests:
            blocks.append({"type": "tool-call", "toolCallId": _text(request.get("toolCallId")),
                           "name": _text(request.get("name")),
                           "arguments": request.get("arguments", {})})
        message_id = data.get("messageId") if isinstance(data.get("messageId"), str) \
            else self._id(line)
        event: dict[str, Any] = {"turn": self.clock.turn, "step": self.clock.step,
                                 "message": {"id": message_id, "role": "assistant",
                                             "content": blocks}}
        if isinstance(data.get("outputTokens"), int):
            event["usage"] = {"outputTokens": data["outputTokens"]}
        self.em.emit(line, "assistant/message", self.time, event, op="append")
        for block in blocks:
            if block["type"] == "tool-call":
                self._call(line, block["toolCallId"], block["name"], block["arguments"])

    def _call(self, line: SourceLine, call_id: str, name: str, arguments: Any) -> None:
        if call_id in self.calls:
            return
        self.calls[call_id] = (self.clock.turn, self.clock.step)
        self._log_only(line, "tool/call", {"turn": self.clock.turn, "step": self.clock.step,
                                           "callId": call_id, "name": name,
                                           "arguments": arguments})

    def _execution(self, line: SourceLine, data: dict[str, Any]) -> None:
        """Logged; it is the call's only record when no tool request announced it."""
        self._log_only(line, f"{PREFIX}/tool.execution_start", {})
        call_id = _text(data.get("toolCallId"))
        if call_id and call_id not in self.calls:
            self._call(line, call_id, _text(data.get("toolName")), data.get("arguments", {}))

    def _result(self, line: SourceLine, data: dict[str, Any]) -> None:
        self.clock.break_step()
        call_id = _text(data.get("toolCallId"))
        turn, step = self.calls.get(call_id, (self.clock.turn, self.clock.step))
        result = as_dict(data.get("result"))
        error = as_dict(data.get("error"))
        failed = data.get("success") is False
        content = _text(result.get("content")) or _text(error.get("message")) \
            or _text(result.get("detailedContent"))
        part = {"type": "tool-result", "toolCallId": call_id, "content": content,
                "isError": failed}
        event: dict[str, Any] = {"turn": turn, "step": step, "message": {
            "id": self._id(line), "role": "tool", "content": [part]}}
        if failed:
            event["error"] = {"name": "ToolError", "code": "TOOL_ERROR"}
        self.em.emit(line, "tool/result", self.time, event, op="append")

    # --- compaction --------------------------------------------------------------------------

    def _compaction_start(self, line: SourceLine, data: dict[str, Any]) -> None:
        self.compaction = compaction.begin(self.em, line, self.time, f"{PREFIX}:{self._id(line)}",
                                           self.clock.turn)

    def _compaction_complete(self, line: SourceLine, data: dict[str, Any]) -> None:
        """What was on the surface at `compaction_start` becomes the summary's shadow; turns
        that ran while the summary was being written stay current after it."""
        pending = self.compaction or compaction.unstarted(self.em, f"{PREFIX}:{self._id(line)}",
                                                          self.clock.turn)
        self.compaction = None
        if data.get("success") is False:
            compaction.end(self.em, line, self.time, pending,
                           error=_text(data.get("error")) or "compaction failed")
            return
        summary = _text(data.get("summaryContent"))
        tokens = data.get("preCompactionTokens")
        compaction.summarize(
            self.em, line, self.time, pending, summary=summary,
            content=[{"type": "text", "text": summary}],
            checkpoint_id=f"{self._id(line)}#checkpoint",
            token_count=tokens if isinstance(tokens, int) and tokens >= 0 else 0,
            provider="github-copilot", model=self.model)


def _header(lines: list[SourceLine], source_name: str) -> dict[str, Any] | None:
    """From `session.start`; without it (a cut file), the session folder's name."""
    start = next((as_dict(ln.value.get("data")) for ln in lines
                  if ln.value["type"] == "session.start"), {})
    sid = start.get("sessionId")
    if not isinstance(sid, str) or not sid:
        folder = PurePath(source_name).parent.name
        sid = folder if _UUID.match(folder) else None
    created = iso_ms(start.get("startTime")) or next(
        (t for ln in lines if (t := iso_ms(ln.value.get("timestamp"))) is not None), None)
    if sid is None or created is None:
        return None
    context = start.get("context")
    cwd = context.get("cwd") if isinstance(context, dict) else None
    return make_header(f"{PREFIX}:{sid}", created, cwd=cwd)


def import_copilot_cli(data: bytes, source_name: str) -> list[ImportedSession]:
    """One `events.jsonl` → one session."""
    lines, unreadable = split_readable(read_lines(decompress(data)))
    header = _header(lines, source_name)
    if header is None:
        unreadable.extend(Rejection(ln.number, INGEST_SCHEMA_VIOLATION,
                                    "no session.start or session folder identifies this log yet",
                                    ln.raw) for ln in lines)
        return with_rejections(PREFIX, [], unreadable, source_name)
    mapper = _CopilotMapper(int(header["createdAt"]))
    feed_each(lines, mapper.feed, mapper.em, f"{PREFIX}/unmapped")
    session = ImportedSession(header, mapper.em.events, mapper.em.rejections)
    return with_rejections(PREFIX, [session], unreadable, source_name)


def sniff(path: PurePath, head: bytes) -> bool:
    """Copilot events: `{type: "<area>.<name>", data, id, parentId}` lines."""
    for value in head_lines(head, limit=2):
        if isinstance(value, dict):
            kind = value.get("type")
            return isinstance(kind, str) and "." in kind and "data" in value \
                and "parentId" in value
        if isinstance(value, bytes):  # a first line longer than the head
            kind = envelope_type(value)
            return kind is not None and kind.startswith(("session.", "user.", "assistant.")) \
                and b'"data"' in value[:512]
    return False


SPEC = ImporterSpec(
    name=PREFIX, load=import_copilot_cli, sniff=sniff,
    claims=lambda path: path.name == "events.jsonl" and path.parent.parent.name == "session-state",
    locations=(Location(".copilot/session-state", env="COPILOT_HOME", below="session-state"),))
