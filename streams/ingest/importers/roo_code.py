"""Ingest edge: Roo Code tasks (a fork of Cline; Cline and Kilo Code keep tasks in files of the
same names) → native session logs.

A task folder (`…/globalStorage/<extension id>/tasks/<task id>/`) holds two JSON arrays the
extension rewrites whole:

- `ui_messages.json` (format `roo-code`): what the person saw, timestamped (`ts`, epoch ms):
  `{type: say|ask, say/ask, text, partial, …}`. The task's first `say: text` is the prompt,
  `user_feedback` the person's later words, other `say: text` / `reasoning` / `completion_result`
  the model's; `ask: tool` / `command` / `use_mcp_server` are tool calls, `command_output` /
  `mcp_server_response` their results; `api_req_started` opens a model request (its JSON text:
  tokens, cost, `cancelReason`, `streamingFailedMessage`); `condense_context` is a compaction.
  This is the session `roo-code:<task id>`.
- `api_conversation_history.json` (format `roo-code-api`): the model's own context,
  `{role, content, ts}` with tool calls as XML in assistant text and results as user text
  (`[tool] Result:`), a compaction summary an assistant message with `isSummary: true`. The
  session `roo-code:<task id>:api`, lineage to the task's session.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

from projections.codec import JSONDecodeError, loads
from projections.logformat import decompress
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
    load_records,
    make_header,
    with_rejections,
)
from streams.ingest.importers.registry import ImporterSpec, Location
from streams.ingest.importers.sniffing import document_head
from streams.ingest.importers.turns import TurnClock

PREFIX = "roo-code"
API_FORMAT = "roo-code-api"
SUBTASK_PLUGIN = "roo-code-subtask"
_RESULT = re.compile(r"^\[(?P<tool>[a-z_]+)(?P<rest>[^\]]*)\] Result:", re.DOTALL)
#: VS Code's global storage folders of Roo Code, Cline and Kilo Code (tasks live below them).
_EXTENSIONS = ("rooveterinaryinc.roo-cline", "saoudrizwan.claude-dev", "kilocode.kilo-code")


def _json_text(text: Any) -> dict[str, Any]:
    """A record's `text` holding a JSON object (tool requests, API request stats), else {}."""
    if not isinstance(text, str) or not text.startswith("{"):
        return {}
    try:
        return as_dict(loads(text))
    except JSONDecodeError:
        return {}


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [{"type": "text", "text": as_str(b.get("text"))}
            if isinstance(b, dict) and b.get("type") == "text" else b for b in as_list(content)]


def _text(content: Any) -> str:
    return "\n".join(as_str(b.get("text")) for b in _blocks(content) if isinstance(b, dict))


class _Mapper(LineMapper):
    def __init__(self, created_at: int) -> None:
        self.em = Emitter()
        self.clock = TurnClock()
        self.time = created_at
        self.calls: dict[str, tuple[int, int]] = {}
        self.last_call: dict[str, str] = {}  # kind of call → id of the last one
        self.first_surface: int | None = None
        self.model = "unknown"

    def feed(self, line: SourceLine) -> None:
        raise NotImplementedError

    def _surface(self, line: SourceLine, kind: str, data: dict[str, Any], key: str) -> None:
        seq = self.em.emit(line, kind, self.time, data, op="append", key=key)
        if self.first_surface is None and seq is not None:
            self.first_surface = seq

    def user(self, line: SourceLine, key: str, blocks: list[Any], source: dict[str, Any]) -> None:
        if source == {"kind": "user"}:
            self.clock.prompt()
            self.em.open_step(line, self.clock, self.time, keyed=True)
        self._surface(line, "user/message", {"id": key, "role": "user", "source": source,
                                             "content": blocks}, key)

    def assistant(self, line: SourceLine, key: str, blocks: list[Any],
                  step_key: str | None = None) -> None:
        self.clock.assistant(step_key)
        self.em.open_step(line, self.clock, self.time, keyed=True)
        self._surface(line, "assistant/message", {
            "turn": self.clock.turn, "step": self.clock.step,
            "message": {"id": key, "role": "assistant", "content": blocks}}, key)
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool-call":
                call_id = str(block["toolCallId"])
                self.calls[call_id] = (self.clock.turn, self.clock.step)
                self.em.emit(line, "tool/call", self.time, {
                    "turn": self.clock.turn, "step": self.clock.step, "callId": call_id,
                    "name": block["name"], "arguments": block["arguments"]},
                    key=f"{key}/call")

    def result(self, line: SourceLine, key: str, call_id: str, text: str,
               failed: bool) -> None:
        self.clock.break_step()
        turn, step = self.calls.get(call_id, (self.clock.turn, self.clock.step))
        data: dict[str, Any] = {"turn": turn, "step": step, "message": {
            "id": key, "role": "tool", "content": [{"type": "tool-result", "toolCallId": call_id,
                                                    "content": text, "isError": failed}]}}
        if failed:
            data["error"] = {"name": "ToolError", "code": "TOOL_ERROR"}
        self._surface(line, "tool/result", data, key)

    def condense(self, line: SourceLine, key: str, summary: str, tokens: int) -> None:
        """Roo keeps the task's first message: what follows it on the surface is shadowed."""
        pending = compaction.begin(self.em, line, self.time, f"{PREFIX}:{key}",
                                   self.clock.turn, key=key)
        nodes = self.em.nodes()
        shadowed = [s for s in nodes if self.first_surface is None or s > self.first_surface]
        compaction.summarize(self.em, line, self.time, pending, summary=summary,
                             content=[{"type": "text", "text": summary}],
                             checkpoint_id=f"{key}/checkpoint", token_count=tokens,
                             provider="unknown", model=self.model, shadowed=shadowed, key=key)
        self.clock.break_step()


# --- ui_messages.json ----------------------------------------------------------------------------

class _UiMapper(_Mapper):
    #: The model request (`api_req_started`) the model's records belong to: one step each.
    request: str | None = None

    def feed(self, line: SourceLine) -> None:
        record = line.value
        ts = record.get("ts")
        if isinstance(ts, int) and not isinstance(ts, bool) and ts >= 0:
            self.time = ts
        kind = as_str(record.get("say") if record.get("type") == "say" else record.get("ask"))
        key = f"ui:{line.number}:{ts}"
        text = as_str(record.get("text"))
        blocks = [{"type": "text", "text": text}]
        if record.get("type") == "say":
            self._say(line, key, kind, text, blocks, record)
        elif kind in ("tool", "command", "use_mcp_server"):
            self._call(line, key, kind, text)
        elif kind == "followup":
            question = as_str(_json_text(text).get("question"), text)
            self.assistant(line, key, [{"type": "text", "text": question}], self.request)
        elif kind == "api_req_failed":
            self.em.emit(line, "turn/end", self.time, {
                "turn": self.clock.turn, "reason": "error", "error": {"message": text}}, key=key)
        else:  # resume_task, completion_result (the button), …
            self.em.emit(line, f"{PREFIX}/ask", self.time, {"ask": kind}, key=key)

    def _say(self, line: SourceLine, key: str, kind: str, text: str, blocks: list[Any],
             record: dict[str, Any]) -> None:
        if kind == "text" and self.first_surface is None:
            self.user(line, key, blocks, {"kind": "user"})  # the task's prompt
        elif kind == "user_feedback":
            self.request = None
            self.user(line, key, blocks, {"kind": "user"})
        elif kind in ("text", "completion_result"):
            self.assistant(line, key, blocks, self.request)
        elif kind == "reasoning":
            self.assistant(line, key, [{"type": "reasoning", "text": text}], self.request)
        elif kind == "subtask_result":
            self.user(line, key, blocks, {"kind": "plugin", "plugin": SUBTASK_PLUGIN})
        elif kind == "command_output":
            self.result(line, key, self.last_call.get("command", ""), text, False)
        elif kind == "mcp_server_response":
            self.result(line, key, self.last_call.get("use_mcp_server", ""), text,
                        text.lstrip().startswith("Error"))
        elif kind == "api_req_started":
            self._request(line, key, text)
        elif kind == "condense_context":
            condense = as_dict(record.get("contextCondense"))
            tokens = condense.get("prevContextTokens")
            self.condense(line, key, as_str(condense.get("summary")),
                          tokens if isinstance(tokens, int) and tokens >= 0 else 0)
        elif kind == "error":
            self.em.emit(line, "turn/end", self.time, {
                "turn": self.clock.turn, "reason": "error", "error": {"message": text}}, key=key)
        else:
            self.em.emit(line, f"{PREFIX}/say", self.time, {"say": kind}, key=key)

    def _request(self, line: SourceLine, key: str, text: str) -> None:
        """A model request: a new step; its stats kept; a cancel or a failed stream ends the
        turn."""
        stats = _json_text(text)
        self.request = key
        self.clock.assistant(key)
        self.em.open_step(line, self.clock, self.time, keyed=True)
        kept: dict[str, Any] = {k: stats[k] for k in ("tokensIn", "tokensOut", "cacheReads", "cacheWrites",
                                      "cost", "cancelReason", "streamingFailedMessage")
                if k in stats}
        self.em.emit(line, f"{PREFIX}/api_req_started", self.time, kept, key=key)
        if stats.get("cancelReason") is not None:
            self.em.emit(line, "turn/end", self.time, {
                "turn": self.clock.turn, "reason": "aborted"}, key=f"{key}/end", with_raw=False)
        elif stats.get("streamingFailedMessage"):
            self.em.emit(line, "turn/end", self.time, {
                "turn": self.clock.turn, "reason": "error",
                "error": {"message": as_str(stats["streamingFailedMessage"])}},
                key=f"{key}/end", with_raw=False)

    def _call(self, line: SourceLine, key: str, kind: str, text: str) -> None:
        request = _json_text(text)
        if kind == "command":
            name, arguments = "execute_command", {"command": text}
        elif kind == "use_mcp_server":
            name = f"mcp:{as_str(request.get('serverName'))}/{as_str(request.get('toolName'))}"
            arguments = request
        else:
            name = as_str(request.get("tool"), "tool")
            arguments = {k: v for k, v in request.items() if k != "tool"}
        self.last_call[kind] = key
        self.assistant(line, key, [{"type": "tool-call", "toolCallId": key, "name": name,
                                    "arguments": arguments}], self.request)


# --- api_conversation_history.json -----------------------------------------------------------------

class _ApiMapper(_Mapper):
    def feed(self, line: SourceLine) -> None:
        record = line.value
        ts = record.get("ts")
        if isinstance(ts, int) and not isinstance(ts, bool) and ts >= 0:
            self.time = ts
        key = f"msg:{line.number}"
        role = record.get("role")
        content = record.get("content")
        if role == "assistant" and record.get("isSummary") is True:
            self.condense(line, key, _text(content), 0)
        elif role == "assistant":
            self.assistant(line, key, _blocks(content), key)
        elif role == "user":
            text = _text(content)
            found = _RESULT.match(text)
            if found is None:
                self.user(line, key, _blocks(content), {"kind": "user"})
                return
            # The call is XML in the previous assistant text; the result names it.
            call_id = f"{key}/call"
            tool = found.group("tool")
            self.calls[call_id] = (self.clock.turn, self.clock.step)
            self.em.emit(line, "tool/call", self.time, {
                "turn": self.clock.turn, "step": self.clock.step, "callId": call_id,
                "name": tool, "arguments": {"described": found.group("rest").strip()}},
                key=call_id)
            failed = "[ERROR]" in text[:2000] or text[found.end():].lstrip().startswith("Error")
            self.result(line, key, call_id, text, failed)
        else:
            self.em.emit(line, f"{PREFIX}/message", self.time, {"role": role}, key=key)


def _task_id(source_name: str) -> str:
    return PurePath(source_name).parent.name


def _import(data: bytes, source_name: str, api: bool) -> list[ImportedSession]:
    found = load_records(decompress(data), PREFIX, source_name)
    if isinstance(found, ImportedSession):
        return [found]
    lines, unreadable = found
    task = _task_id(source_name)
    created = next((ts for ln in lines if isinstance(ts := ln.value.get("ts"), int)
                    and not isinstance(ts, bool) and ts >= 0), 0)
    if api:
        header = make_header(f"{PREFIX}:{task}:api", created, parent=f"{PREFIX}:{task}")
        mapper: _Mapper = _ApiMapper(created)
    else:
        header = make_header(f"{PREFIX}:{task}", created)
        mapper = _UiMapper(created)
    feed_each(lines, mapper.feed, mapper.em, f"{PREFIX}/unmapped")
    session = ImportedSession(header, mapper.em.events, mapper.em.rejections)
    return with_rejections(PREFIX, [session], unreadable, source_name)


def import_roo_ui(data: bytes, source_name: str) -> list[ImportedSession]:
    """A task's `ui_messages.json` → the task's session."""
    return _import(data, source_name, api=False)


def import_roo_api(data: bytes, source_name: str) -> list[ImportedSession]:
    """A task's `api_conversation_history.json` → the model-context session of the task."""
    return _import(data, source_name, api=True)


def _sniff(head: bytes, first_keys: tuple[bytes, ...]) -> bool:
    squeezed = document_head(head)
    return squeezed.startswith(b"[{") and any(squeezed.startswith(b"[{" + k) for k in first_keys)


def sniff_ui(path: PurePath, head: bytes) -> bool:
    squeezed = document_head(head)
    return _sniff(head, (b'"ts":',)) and (b'"say":' in squeezed or b'"ask":' in squeezed) \
        and b'"type":"' in squeezed


def sniff_api(path: PurePath, head: bytes) -> bool:
    squeezed = document_head(head)
    return _sniff(head, (b'"role":',)) and b'"content":' in squeezed \
        and path.name == "api_conversation_history.json"


#: VS Code's global storage: `%APPDATA%\\Code\\User\\globalStorage` on Windows, `~/Library/Application
#: Support/Code/User/globalStorage` on macOS, `~/.config/Code/User/globalStorage` on Linux.
_LOCATIONS = tuple(
    loc for ext in _EXTENSIONS for loc in (
        Location(f".config/Code/User/globalStorage/{ext}/tasks", env="APPDATA",
                 below=f"Code/User/globalStorage/{ext}/tasks"),
        Location(f"Library/Application Support/Code/User/globalStorage/{ext}/tasks")))

SPEC = ImporterSpec(
    name=PREFIX, load=import_roo_ui, sniff=sniff_ui,
    claims=lambda path: path.name == "ui_messages.json" and path.parent.parent.name == "tasks",
    locations=_LOCATIONS, whole_document=True)
API_SPEC = ImporterSpec(
    name=API_FORMAT, load=import_roo_api, sniff=sniff_api,
    claims=lambda path: path.name == "api_conversation_history.json"
    and path.parent.parent.name == "tasks",
    locations=_LOCATIONS, whole_document=True)
