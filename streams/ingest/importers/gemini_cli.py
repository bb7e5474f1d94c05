"""Ingest edge: Gemini CLI chat files → native session logs: the JSON document Gemini CLI rewrites
whole on every update (`chats/session-*.json`) and the newer append-only JSONL, whose message
lines are re-written under the same id when their tool calls finish.

Both go through one mapper that tracks what each message id has already produced, so a message
seen again (a later JSONL line, a grown document) adds only its new tool calls and results. A
Gemini message is one step: `step/start`, its text and reasoning, then per tool call an
`assistant/message` with the call block and a `tool/call`, then the finished calls' results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from projections.errors import INGEST_SCHEMA_VIOLATION
from projections.logformat import Rejection, decompress
from streams.ingest.importers.common import (
    Emitter,
    ImportedSession,
    SourceLine,
    as_list,
    as_str,
    feed_each,
    iso_ms,
    load_document,
    make_header,
    part_line,
    read_objects,
    split_readable,
    with_rejections,
)
from streams.ingest.importers.gemini_workspace import recover_cwd
from streams.ingest.importers.registry import ImporterSpec, Location
from streams.ingest.importers.sniffing import document_head, head_lines, is_record_stream
from streams.ingest.importers.turns import TurnClock

PREFIX = "gemini-cli"
META_PLUGIN = "gemini-cli-meta"
#: Tool call statuses after which the call's result is final.
_FINAL = {"success": None, "error": "TOOL_ERROR", "cancelled": "CANCELLED"}
_SYNTHETIC = ("System: Please continue.",)


@dataclass(slots=True)
class _Seen:
    """What one message id has produced so far."""

    calls: set[str] = field(default_factory=set)
    results: set[str] = field(default_factory=set)
    turn: int = 0
    step: int = 0


def parts_text(content: Any) -> str:
    """A Gemini `content`: a plain string or a Part list; the text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content
                         if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _has_text(content: Any) -> bool:
    return isinstance(content, str) or (isinstance(content, list) and any(
        isinstance(p, dict) and isinstance(p.get("text"), str) for p in content))


def _result(call: dict[str, Any]) -> tuple[Any, bool]:
    """(content, is_error) of a finished call: the function response's output or error, else
    what the UI displayed."""
    for part in as_list(call.get("result")):
        response = part.get("functionResponse") if isinstance(part, dict) else None
        body = response.get("response") if isinstance(response, dict) else None
        if isinstance(body, dict):
            if "error" in body:
                return body["error"], True
            if "output" in body:
                return body["output"], False
    display = call.get("resultDisplay")
    return (display if isinstance(display, str) else ""), False


class _GeminiMapper:
    """`lines=True` for the JSONL file, where each line is a record kept whole on its first
    event; in a document a message's tool calls may still change, so the message keeps its own
    fields on its first event and each finished call's record rides on its result."""

    def __init__(self, created_at: int, *, lines: bool) -> None:
        self.lines = lines
        self.em = Emitter()
        self.clock = TurnClock()
        self.time = created_at
        self.seen: dict[str, _Seen] = {}

    # --- records -----------------------------------------------------------------------------

    def message(self, line: SourceLine) -> None:
        msg = line.value
        kind, mid = msg.get("type"), msg.get("id")
        if not isinstance(kind, str) or not isinstance(mid, str) or not mid:
            self.em.reject(line, INGEST_SCHEMA_VIOLATION,
                           "message without a string `id` and `type`")
            return
        self.time = iso_ms(msg.get("timestamp")) or self.time
        seen = self.seen.get(mid)
        if seen is not None:
            self._revision(line, mid, seen)
        elif kind == "user":
            self._user(line, mid)
        elif kind == "gemini":
            self._model(line, mid)
        elif kind == "error":
            # A persisted UI error ("[API Error: …]") ends the turn; kept searchable there.
            self.em.emit(line, "turn/end", self.time, {
                "turn": self.clock.turn, "reason": "error",
                "error": {"message": parts_text(msg.get("content"))}}, key=mid)
        else:
            self.em.emit(line, f"{PREFIX}/{kind}", self.time,
                         {"text": parts_text(msg.get("content"))}, key=mid)

    def _user(self, line: SourceLine, mid: str) -> None:
        msg = line.value
        self.seen[mid] = _Seen()
        content = parts_text(msg.get("content"))
        display = msg.get("displayContent")
        typed = parts_text(display) if _has_text(display) else None
        synthetic = (display is not None and typed is None) or content.strip() in _SYNTHETIC
        if synthetic:
            self._user_message(line, mid, content, {"kind": "plugin", "plugin": META_PLUGIN})
            return
        self.clock.prompt()
        self.em.open_step(line, self.clock, self.time, keyed=True)
        if typed is not None and typed.strip() != content.strip():
            # `/init` as typed, then what the CLI expanded it to (what the model read).
            self._user_message(line, mid, typed, {"kind": "user"})
            self._user_message(line, f"{mid}#content", content,
                               {"kind": "plugin", "plugin": META_PLUGIN})
        else:
            self._user_message(line, mid, content, {"kind": "user"})

    def _user_message(self, line: SourceLine, key: str, text: str,
                      source: dict[str, Any]) -> None:
        data = {"id": key, "role": "user", "source": source,
                "content": [{"type": "text", "text": text}]}
        self.em.emit(line, "user/message", self.time, data, op="append", key=key)

    def _model(self, line: SourceLine, mid: str) -> None:
        msg = line.value
        self.clock.assistant(mid)
        self.em.open_step(line, self.clock, self.time, keyed=True)
        seen = self.seen[mid] = _Seen(turn=self.clock.turn, step=self.clock.step)
        blocks: list[dict[str, Any]] = []
        for thought in as_list(msg.get("thoughts")):
            if isinstance(thought, dict):
                text = ": ".join(str(thought[k]) for k in ("subject", "description")
                                 if isinstance(thought.get(k), str) and thought[k])
                blocks.append({"type": "reasoning", "text": text})
        text = parts_text(msg.get("content"))
        if text:
            blocks.append({"type": "text", "text": text})
        data: dict[str, Any] = {"turn": seen.turn, "step": seen.step, "message": {
            "id": mid, "role": "assistant", "content": blocks}}
        if isinstance(msg.get("tokens"), dict):
            data["usage"] = msg["tokens"]
        record = line if self.lines else SourceLine(
            line.number, line.raw, {k: v for k, v in msg.items() if k != "toolCalls"})
        self.em.emit(record, "assistant/message", self.time, data, op="append", key=mid)
        self._calls(line, mid, seen)

    def _revision(self, line: SourceLine, mid: str, seen: _Seen) -> None:
        """The same message id again (JSONL rewrite, grown document): only what is new."""
        before = self.em.next_seq
        if line.value.get("type") == "gemini":
            self._calls(line, mid, seen)
        if self.em.next_seq == before:
            self.em.emit(line, f"{PREFIX}/revision", self.time, {"id": mid},
                         key=f"{mid}@{line.number}")

    def _calls(self, line: SourceLine, mid: str, seen: _Seen) -> None:
        calls = [c for c in as_list(line.value.get("toolCalls")) if isinstance(c, dict)]
        for index, call in enumerate(calls):
            cid = as_str(call.get("id"), f"{mid}#{index}")
            if cid in seen.calls:
                continue
            seen.calls.add(cid)
            name = str(call.get("name", ""))
            args = call.get("args", {})
            block = {"type": "tool-call", "toolCallId": cid, "name": name, "arguments": args}
            self.em.emit(line, "assistant/message", self.time, {
                "turn": seen.turn, "step": seen.step,
                "message": {"id": f"{mid}/call:{cid}", "role": "assistant",
                            "content": [block]}}, op="append", key=f"{mid}/call:{cid}",
                with_raw=self.lines)
            self.em.emit(line, "tool/call", self.time, {
                "turn": seen.turn, "step": seen.step, "callId": cid, "name": name,
                "arguments": args}, key=f"{mid}/call:{cid}/tool", with_raw=False)
        for index, call in enumerate(calls):
            cid = as_str(call.get("id"), f"{mid}#{index}")
            status = call.get("status")
            if cid in seen.results or not isinstance(status, str) or status not in _FINAL:
                continue
            seen.results.add(cid)
            self._result(line, mid, seen, cid, call, _FINAL[status])

    def _result(self, line: SourceLine, mid: str, seen: _Seen, cid: str,
                call: dict[str, Any], code: str | None) -> None:
        content, failed = _result(call)
        code = code or ("TOOL_ERROR" if failed else None)
        part = {"type": "tool-result", "toolCallId": cid,
                "content": content if isinstance(content, (str, list)) else str(content),
                "isError": code is not None}
        data: dict[str, Any] = {"turn": seen.turn, "step": seen.step, "message": {
            "id": f"{mid}/result:{cid}", "role": "tool", "content": [part]}}
        if code is not None:
            data["error"] = {"name": "ToolError", "code": code}
        if not self.lines:
            data["raw"] = call
        self.em.emit(line, "tool/result", self.time, data, op="append",
                     key=f"{mid}/result:{cid}", with_raw=self.lines)


# --- sessions ------------------------------------------------------------------------------------

def _compact(stamp: Any) -> str:
    return re.sub(r"[^0-9A-Za-z]", "", stamp) if isinstance(stamp, str) else "unknown"


def _header(meta: dict[str, Any], messages: list[dict[str, Any]],
            source_name: str) -> dict[str, Any] | None:
    """`gemini-cli:<sessionId>`; a subagent run (same sessionId as its parent, `kind:
    "subagent"`) is `…/subagent-<startTime>` with the main session as parent."""
    sid = meta.get("sessionId")
    created = iso_ms(meta.get("startTime")) or next(
        (t for m in messages if (t := iso_ms(m.get("timestamp"))) is not None), None)
    if not isinstance(sid, str) or not sid or created is None:
        return None
    calls = [c for m in messages for c in as_list(m.get("toolCalls")) if isinstance(c, dict)]
    texts = [[m.get("content"), m.get("thoughts")] for m in messages]
    cwd = recover_cwd(meta.get("projectHash"), source_name, meta.get("directories"), calls,
                      texts)
    main = f"{PREFIX}:{sid}"
    if meta.get("kind") == "subagent":
        return make_header(f"{main}/subagent-{_compact(meta.get('startTime'))}", created,
                           cwd=cwd, parent=main, depth=1)
    return make_header(main, created, cwd=cwd)


def import_gemini_document(data: bytes, source_name: str) -> list[ImportedSession]:
    """One `session-*.json` document → its session (the title, when present, comes last)."""
    doc = load_document(decompress(data), PREFIX, source_name)
    if isinstance(doc, ImportedSession):
        return [doc]
    found = doc.get("messages")
    items = [part_line(i + 1, m) for i, m in enumerate(found if isinstance(found, list) else [])]
    lines, unreadable = split_readable(items)
    meta = {k: v for k, v in doc.items() if k != "messages"}
    header = _header(meta, [ln.value for ln in lines], source_name)
    if header is None:
        unreadable.append(Rejection(0, INGEST_SCHEMA_VIOLATION,
                                    "no sessionId and start time identify this chat yet",
                                    data))
        return with_rejections(PREFIX, [], unreadable, source_name)
    mapper = _GeminiMapper(int(header["createdAt"]), lines=False)
    # The document's own fields, minus the ones every rewrite changes (the title has its event).
    top = SourceLine(0, b"", {k: v for k, v in meta.items()
                              if k not in ("lastUpdated", "summary")})
    mapper.em.emit(top, f"{PREFIX}/session", int(header["createdAt"]), {}, key="session")
    feed_each(lines, mapper.message, mapper.em, f"{PREFIX}/unmapped")
    title = doc.get("summary")
    if isinstance(title, str) and title.strip():
        mapper.em.emit(top, "session/title", mapper.time, {"title": title, "via": "summary"},
                       key=f"title:{title}", with_raw=False)
    session = ImportedSession(header, mapper.em.events, mapper.em.rejections)
    return with_rejections(PREFIX, [session], unreadable, source_name)


def import_gemini_jsonl(data: bytes, source_name: str) -> list[ImportedSession]:
    """One append-only JSONL chat file → its session: the header line, message lines (a later
    line with a known id adds what changed), and `$set` patches (a `summary` patch titles it)."""
    lines, unreadable = split_readable(read_objects(decompress(data)))
    meta = next((ln.value for ln in lines if "sessionId" in ln.value and "id" not in ln.value),
                {})
    messages = [ln.value for ln in lines if "id" in ln.value and "type" in ln.value]
    header = _header(meta, messages, source_name)
    if header is None:
        unreadable.extend(Rejection(ln.number, INGEST_SCHEMA_VIOLATION,
                                    "no header line identifies this chat yet", ln.raw)
                          for ln in lines)
        return with_rejections(PREFIX, [], unreadable, source_name)
    mapper = _GeminiMapper(int(header["createdAt"]), lines=True)

    def feed(line: SourceLine) -> None:
        value = line.value
        if "$set" in value:
            patch = value["$set"]
            title = patch.get("summary") if isinstance(patch, dict) else None
            mapper.em.emit(line, f"{PREFIX}/set", mapper.time, {})
            if isinstance(title, str) and title.strip():
                mapper.em.emit(line, "session/title", mapper.time,
                               {"title": title, "via": "summary"}, with_raw=False)
        elif "id" in value and "type" in value:
            mapper.message(line)
        elif value is meta:
            mapper.em.emit(line, f"{PREFIX}/session", mapper.time, {})
            title = value.get("summary")
            if isinstance(title, str) and title.strip():
                mapper.em.emit(line, "session/title", mapper.time,
                               {"title": title, "via": "summary"}, with_raw=False)
        else:
            mapper.em.emit(line, f"{PREFIX}/record", mapper.time, {})

    feed_each(lines, feed, mapper.em, f"{PREFIX}/unmapped")
    session = ImportedSession(header, mapper.em.events, mapper.em.rejections)
    return with_rejections(PREFIX, [session], unreadable, source_name)


# --- registry entries ------------------------------------------------------------------------------

def sniff_document(path: PurePath, head: bytes) -> bool:
    squeezed = document_head(head)
    return squeezed.startswith(b"{") and b'"sessionId":' in squeezed \
        and b'"projectHash":' in squeezed and b'"messages":' in squeezed \
        and not is_record_stream(head)


def sniff_jsonl(path: PurePath, head: bytes) -> bool:
    first = head_lines(head, limit=1)
    return bool(first) and isinstance(first[0], dict) and "sessionId" in first[0] \
        and "projectHash" in first[0] and "messages" not in first[0]


def _chat_file(path: PurePath, suffix: str) -> bool:
    return path.name.startswith("session-") and path.name.endswith(suffix) \
        and path.parent.name == "chats"


_LOCATIONS = (Location(".gemini/tmp"),)

SPEC = ImporterSpec(
    name=PREFIX, load=import_gemini_document, sniff=sniff_document,
    claims=lambda path: _chat_file(path, ".json"), locations=_LOCATIONS, whole_document=True,
    late_cwd=True)
JSONL_SPEC = ImporterSpec(
    name=f"{PREFIX}-jsonl", load=import_gemini_jsonl, sniff=sniff_jsonl,
    claims=lambda path: _chat_file(path, ".jsonl"), locations=_LOCATIONS, late_cwd=True)
