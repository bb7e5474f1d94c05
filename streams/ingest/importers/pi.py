"""Ingest edge: Pi coding agent sessions (`~/.pi/agent/sessions/<cwd slug>/<time>_<id>.jsonl`)
→ native session logs.

Line 1 is Pi's own session header (`{type: "session", id, timestamp, cwd, provider, modelId,
thinkingLevel, branchedFrom?}`: the same `type` as a native header, but no `version` or
`createdAt`); then `message` records (roles `user`, `assistant`, `toolResult`, `bashExecution`),
`compaction` records (`summary`, `firstKeptEntryIndex`: the 0-based index, header included, of
the first entry the model still sees), `model_change` and `thinking_level_change`.
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
    as_str,
    feed_each,
    iso_ms,
    make_header,
    read_lines,
    split_readable,
    with_rejections,
)
from streams.ingest.importers.registry import ImporterSpec, Location
from streams.ingest.importers.sniffing import head_lines
from streams.ingest.importers.turns import TurnClock

PREFIX = "pi"
BASH_PLUGIN = "pi-bash"
_ID_IN_NAME = re.compile(r"_([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$",
                         re.I)


def _ms(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def is_pi_header(value: Any) -> bool:
    """Pi's header: `type: "session"` with an ISO `timestamp`, and no native `createdAt`."""
    return isinstance(value, dict) and value.get("type") == "session" \
        and isinstance(value.get("timestamp"), str) and "createdAt" not in value \
        and isinstance(value.get("id"), str)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(as_str(b.get("text")) for b in as_list(content)
                     if isinstance(b, dict) and b.get("type") == "text")


def _user_block(block: Any) -> Any:
    if isinstance(block, dict) and block.get("type") == "text":
        return {"type": "text", "text": as_str(block.get("text"))}
    return block  # images are kept as they are


def _assistant_block(block: Any) -> Any:
    """text; thinking → reasoning (kept, never indexed); toolCall → tool-call."""
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": as_str(block.get("text"))}
    if kind == "thinking":
        return {"type": "reasoning", "text": as_str(block.get("thinking"))}
    if kind == "toolCall":
        return {"type": "tool-call", "toolCallId": as_str(block.get("id")),
                "name": as_str(block.get("name")), "arguments": block.get("arguments", {})}
    return block


class _PiMapper(LineMapper):
    def __init__(self, header: dict[str, Any], created_at: int) -> None:
        self.em = Emitter()
        self.clock = TurnClock()
        self.time = created_at
        self.model = as_str(header.get("modelId"), "unknown")
        self.provider = as_str(header.get("provider"), "unknown")
        self.calls: dict[str, tuple[int, int]] = {}
        #: seq of each surface event → the source line it came from (for `firstKeptEntryIndex`)
        self.line_of: dict[int, int] = {}

    def feed(self, line: SourceLine) -> None:
        record = line.value
        self.time = iso_ms(record.get("timestamp")) or self.time
        kind = record["type"]
        if kind == "message":
            message = record.get("message")
            if not isinstance(message, dict):
                self.em.reject(line, INGEST_SCHEMA_VIOLATION, "message record without an object "
                               "`message`")
                return
            self.time = _ms(message.get("timestamp")) or self.time
            handler = {"user": self._user, "assistant": self._assistant,
                       "toolResult": self._tool_result,
                       "bashExecution": self._bash}.get(as_str(message.get("role")))
            if handler is None:
                self._log_only(line, f"{PREFIX}/message", {"role": message.get("role")})
            else:
                handler(line, message)
        elif kind == "compaction":
            self._compaction(line, record)
        elif kind == "model_change":
            self.model = as_str(record.get("modelId"), self.model)
            self.provider = as_str(record.get("provider"), self.provider)
            self._log_only(line, f"{PREFIX}/model_change",
                           {"provider": self.provider, "model": self.model})
        elif kind == "thinking_level_change":
            self._log_only(line, f"{PREFIX}/thinking_level_change",
                           {"thinkingLevel": record.get("thinkingLevel")})
        else:  # the header, and record types this importer does not know
            self._log_only(line, f"{PREFIX}/{kind}", {})

    def _surface(self, line: SourceLine, kind: str, data: dict[str, Any]) -> int | None:
        seq = self.em.emit(line, kind, self.time, data, op="append")
        if seq is not None:
            self.line_of[seq] = line.number
        return seq

    def _user(self, line: SourceLine, message: dict[str, Any]) -> None:
        self.clock.prompt()
        self.em.open_step(line, self.clock, self.time)
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) \
            else [_user_block(b) for b in as_list(content)]
        self._surface(line, "user/message", {
            "id": f"line-{line.number}", "role": "user", "source": {"kind": "user"},
            "content": blocks})

    def _bash(self, line: SourceLine, message: dict[str, Any]) -> None:
        """A `!command` the person ran in Pi's shell: its command, output and exit code, as
        the context the model then sees."""
        parts = [f"$ {as_str(message.get('command'))}", as_str(message.get("output"))]
        if message.get("cancelled") is True:
            parts.append("(cancelled)")
        elif message.get("exitCode") is not None:
            parts.append(f"(exit code {message.get('exitCode')})")
        if message.get("truncated") is True:
            parts.append("(output truncated)")
        self.clock.prompt()
        self.em.open_step(line, self.clock, self.time)
        self._surface(line, "user/message", {
            "id": f"line-{line.number}", "role": "user",
            "source": {"kind": "plugin", "plugin": BASH_PLUGIN},
            "content": [{"type": "text", "text": "\n".join(p for p in parts if p)}]})

    def _assistant(self, line: SourceLine, message: dict[str, Any]) -> None:
        self.clock.assistant(f"line-{line.number}")
        self.em.open_step(line, self.clock, self.time)
        if isinstance(message.get("model"), str):
            self.model = message["model"]
        blocks = [_assistant_block(b) for b in as_list(message.get("content"))]
        if blocks:
            data: dict[str, Any] = {"turn": self.clock.turn, "step": self.clock.step,
                                    "message": {"id": f"line-{line.number}", "role": "assistant",
                                                "content": blocks}}
            if isinstance(message.get("usage"), dict):
                data["usage"] = message["usage"]
            self._surface(line, "assistant/message", data)
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool-call":
                call_id = str(block["toolCallId"])
                self.calls[call_id] = (self.clock.turn, self.clock.step)
                self._log_only(line, "tool/call", {
                    "turn": self.clock.turn, "step": self.clock.step, "callId": call_id,
                    "name": block["name"], "arguments": block["arguments"]})
        reason = message.get("stopReason")
        if reason == "aborted":
            self._log_only(line, "turn/end", {"turn": self.clock.turn, "reason": "aborted"})
        elif reason == "error":
            self._log_only(line, "turn/end", {
                "turn": self.clock.turn, "reason": "error",
                "error": {"message": as_str(message.get("errorMessage"), "error")}})

    def _tool_result(self, line: SourceLine, message: dict[str, Any]) -> None:
        self.clock.break_step()
        call_id = as_str(message.get("toolCallId"))
        turn, step = self.calls.get(call_id, (self.clock.turn, self.clock.step))
        failed = message.get("isError") is True
        part = {"type": "tool-result", "toolCallId": call_id,
                "content": _text_of(message.get("content")), "isError": failed}
        data: dict[str, Any] = {"turn": turn, "step": step, "message": {
            "id": f"line-{line.number}", "role": "tool", "content": [part]}}
        if failed:
            data["error"] = {"name": "ToolError", "code": "TOOL_ERROR"}
        self._surface(line, "tool/result", data)

    def _compaction(self, line: SourceLine, record: dict[str, Any]) -> None:
        """What came from entries before `firstKeptEntryIndex` (line = index + 1) is shadowed
        by the summary; the kept entries stay current after it."""
        kept = _ms(record.get("firstKeptEntryIndex"))
        first_kept_line = kept + 1 if kept is not None else line.number
        cid = f"{PREFIX}:line-{line.number}"
        pending = compaction.begin(self.em, line, self.time, cid, self.clock.turn)
        nodes = self.em.nodes()
        before = [s for s in nodes if self.line_of.get(s, 0) < first_kept_line]
        shadowed = nodes[:nodes.index(before[-1]) + 1] if before else []
        summary = as_str(record.get("summary"))
        seq = compaction.summarize(
            self.em, line, self.time, pending, summary=summary,
            content=[{"type": "text", "text": summary}], checkpoint_id=f"line-{line.number}",
            token_count=_ms(record.get("tokensBefore")) or 0, provider=self.provider,
            model=self.model, shadowed=shadowed)
        if seq is not None:
            self.line_of[seq] = line.number
        self.clock.break_step()


def _parent(header: dict[str, Any]) -> str | None:
    """`branchedFrom` names the session file this one was branched from; its id ends the name."""
    match = _ID_IN_NAME.search(as_str(header.get("branchedFrom")))
    return f"{PREFIX}:{match.group(1)}" if match else None


def import_pi(data: bytes, source_name: str) -> list[ImportedSession]:
    """One Pi session file → one session (a branch names its parent as lineage)."""
    lines, unreadable = split_readable(read_lines(decompress(data)))
    first = lines[0].value if lines else None
    if first is None or not is_pi_header(first):
        unreadable.extend(Rejection(ln.number, INGEST_SCHEMA_VIOLATION,
                                    "no Pi session header on the first line", ln.raw)
                          for ln in lines)
        return with_rejections(PREFIX, [], unreadable, source_name)
    created = iso_ms(first.get("timestamp")) or 0
    header = make_header(f"{PREFIX}:{first['id']}", created, cwd=first.get("cwd"),
                         parent=_parent(first))
    mapper = _PiMapper(first, created)
    feed_each(lines, mapper.feed, mapper.em, f"{PREFIX}/unmapped")
    session = ImportedSession(header, mapper.em.events, mapper.em.rejections)
    return with_rejections(PREFIX, [session], unreadable, source_name)


def sniff(path: PurePath, head: bytes) -> bool:
    for value in head_lines(head, limit=1):
        return is_pi_header(value) and ("cwd" in as_dict(value) or "modelId" in as_dict(value))
    return False


SPEC = ImporterSpec(
    name=PREFIX, load=import_pi, sniff=sniff,
    claims=lambda path: path.name.endswith(".jsonl") and path.parts[-5:-2] == (
        ".pi", "agent", "sessions"),
    locations=(Location(".pi/agent/sessions"),))
