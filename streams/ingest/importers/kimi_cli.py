"""Ingest edge: Kimi CLI context files (`~/.kimi/sessions/<work dir hash>/<session id>.jsonl`) →
native session logs.

One JSON object per line keyed by `role`: `_checkpoint {id}`, `_usage {token_count}`, `user
{content}`, `assistant {content[], tool_calls[{id, function {name, arguments}}]}`, `tool
{tool_call_id, content[]}` whose status is a leading `<system>…</system>` text part. The file
holds no session metadata and no times: the session id is the file name, `<id>_read_<n>.jsonl`
beside it is a sub-agent's context (lineage to `<id>`), and every event is dated from the file's
modification time when it was read (MAPPING.md says so; a grown file's new events take the later
time, and the first header is kept: `late_time`, `resume`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from projections.codec import JSONDecodeError, loads
from projections.logformat import decompress
from streams.ingest.importers.common import (
    Emitter,
    ImportedSession,
    LineMapper,
    SourceLine,
    as_dict,
    as_list,
    as_str,
    feed_each,
    make_header,
    read_objects,
    split_readable,
    with_rejections,
)
from streams.ingest.importers.filemeta import modified_ms
from streams.ingest.importers.registry import ImporterSpec, Location
from streams.ingest.importers.sniffing import head_lines
from streams.ingest.importers.turns import TurnClock

PREFIX = "kimi-cli"
_ROLES = frozenset({"_checkpoint", "_usage", "user", "assistant", "tool", "system"})
_STATUS = re.compile(r"^<system>(.*?)</system>", re.DOTALL)
_EXIT = re.compile(r"exit code:? (-?\d+)")
_SUBAGENT = re.compile(r"^(?P<parent>.+)_read_(?P<n>\d+)$")


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    out: list[Any] = []
    for block in as_list(content):
        kind = as_dict(block).get("type")
        if kind == "text":
            out.append({"type": "text", "text": as_str(block.get("text"))})
        elif kind == "think":
            out.append({"type": "reasoning", "text": as_str(block.get("think"))})
        else:
            out.append(block)
    return out


def _text(content: Any) -> str:
    return "\n".join(as_str(b.get("text")) for b in _blocks(content)
                     if isinstance(b, dict) and b.get("type") == "text")


def _arguments(value: Any) -> Any:
    """Tool arguments come as JSON text; kept as text when they do not parse."""
    if isinstance(value, str):
        try:
            return loads(value)
        except JSONDecodeError:
            return value
    return value


class _KimiMapper(LineMapper):
    def __init__(self, created_at: int) -> None:
        self.em = Emitter()
        self.clock = TurnClock()
        self.time = created_at
        self.calls: dict[str, tuple[int, int]] = {}

    def feed(self, line: SourceLine) -> None:
        value = line.value
        role = value.get("role")
        mid = f"line-{line.number}"
        if role == "user":
            self.clock.prompt()
            self.em.open_step(line, self.clock, self.time)
            self.em.emit(line, "user/message", self.time, {
                "id": mid, "role": "user", "source": {"kind": "user"},
                "content": _blocks(value.get("content"))}, op="append")
        elif role == "system":
            self.em.emit(line, "user/message", self.time, {
                "id": mid, "role": "user", "source": {"kind": "plugin", "plugin": "kimi-cli-meta"},
                "content": _blocks(value.get("content"))}, op="append")
        elif role == "assistant":
            self._assistant(line, mid, value)
        elif role == "tool":
            self._result(line, mid, value)
        elif role == "_usage":
            self._log_only(line, f"{PREFIX}/usage", {"tokenCount": value.get("token_count")})
        elif role == "_checkpoint":
            self._log_only(line, f"{PREFIX}/checkpoint", {"id": value.get("id")})
        else:
            self._log_only(line, f"{PREFIX}/record", {"role": role})

    def _assistant(self, line: SourceLine, mid: str, value: dict[str, Any]) -> None:
        self.clock.assistant(mid)
        self.em.open_step(line, self.clock, self.time)
        blocks = _blocks(value.get("content"))
        for call in as_list(value.get("tool_calls")):
            function = as_dict(as_dict(call).get("function"))
            blocks.append({"type": "tool-call", "toolCallId": as_str(call.get("id")),
                           "name": as_str(function.get("name")),
                           "arguments": _arguments(function.get("arguments"))})
        self.em.emit(line, "assistant/message", self.time, {
            "turn": self.clock.turn, "step": self.clock.step,
            "message": {"id": mid, "role": "assistant", "content": blocks}}, op="append")
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool-call":
                call_id = str(block["toolCallId"])
                self.calls[call_id] = (self.clock.turn, self.clock.step)
                self._log_only(line, "tool/call", {
                    "turn": self.clock.turn, "step": self.clock.step, "callId": call_id,
                    "name": block["name"], "arguments": block["arguments"]})

    def _result(self, line: SourceLine, mid: str, value: dict[str, Any]) -> None:
        """The leading `<system>` status says how the tool ended: `Command failed with exit code:
        N.` is an error with that exit code, an `ERROR…` status one without."""
        self.clock.break_step()
        call_id = as_str(value.get("tool_call_id"))
        turn, step = self.calls.get(call_id, (self.clock.turn, self.clock.step))
        text = _text(value.get("content"))
        found = _STATUS.match(text)
        status = found.group(1).strip() if found else ""
        exit_code = _EXIT.search(status)
        failed = (exit_code is not None and exit_code.group(1) != "0") \
            or status.upper().startswith("ERROR") or "failed" in status.lower()
        data: dict[str, Any] = {"turn": turn, "step": step, "message": {
            "id": mid, "role": "tool", "content": [{"type": "tool-result", "toolCallId": call_id,
                                                    "content": text, "isError": failed}]}}
        if failed:
            code = f"EXIT_{exit_code.group(1)}" if exit_code else "TOOL_ERROR"
            data["error"] = {"name": "ToolError", "code": code}
        self.em.emit(line, "tool/result", self.time, data, op="append")


def _lineage(stem: str) -> tuple[str | None, int]:
    found = _SUBAGENT.match(stem)
    return (f"{PREFIX}:{found.group('parent')}", 1) if found else (None, 0)


def import_kimi_cli(data: bytes, source_name: str) -> list[ImportedSession]:
    """One context file → one session (a `_read_<n>` file is a sub-agent of its session)."""
    lines, unreadable = split_readable(read_objects(decompress(data)))
    name = PurePath(source_name).name
    stem = name[:-len(".jsonl")] if name.endswith(".jsonl") else PurePath(name).stem
    modified = modified_ms(source_name)
    created = modified if modified is not None else 0
    parent, depth = _lineage(stem)
    header = make_header(f"{PREFIX}:{stem}", created, parent=parent, depth=depth)
    mapper = _KimiMapper(created)
    feed_each(lines, mapper.feed, mapper.em, f"{PREFIX}/unmapped")
    session = ImportedSession(header, mapper.em.events, mapper.em.rejections)
    return with_rejections(PREFIX, [session], unreadable, source_name)


def resume_kimi_cli(data: bytes, source_name: str, done: int,
                    next_seq: Callable[[str], int]) -> list[ImportedSession]:
    """A grown file: the events after those imported before. The mapping has no look-ahead,
    so the first import's events are a prefix of this one's; only their times (the file's
    modification time, which moved) differ, so they are not produced again."""
    out = []
    for session in import_kimi_cli(data, source_name):
        start = next_seq(str(session.header["id"]))
        out.append(ImportedSession(session.header, session.events[start:],
                                   [r for r in session.rejections if r.line > done]))
    return out


def sniff(path: PurePath, head: bytes) -> bool:
    """Records keyed by `role` with Kimi's own `_checkpoint`/`_usage` records among them."""
    found = head_lines(head, limit=5)
    return bool(found) and all(isinstance(v, dict) and v.get("role") in _ROLES
                               for v in found if not isinstance(v, bytes)) \
        and any(isinstance(v, dict) and v.get("role") in ("_checkpoint", "_usage")
                for v in found)


SPEC = ImporterSpec(
    name=PREFIX, load=import_kimi_cli, sniff=sniff,
    claims=lambda path: path.name.endswith(".jsonl") and path.parent.parent.name == "sessions"
    and path.parent.parent.parent.name == ".kimi",
    locations=(Location(".kimi/sessions"),), late_time=True, resume=resume_kimi_cli)
