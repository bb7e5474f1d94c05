"""Ingest edge: OpenCode sessions → native session logs, from an `opencode export` document
(`{info, messages:[{info, parts}]}`, rewritten whole) or from OpenCode's own storage (the
session file `storage/session/<project>/ses_*.json`, its messages and parts beside it).

Parts are the records: `step-start`/`step-finish` bound steps, `text`/`reasoning` are message
text, a `tool` part is the call and (once finished) its result. A `compaction` part starts a
compaction whose summary is the next assistant message marked `summary: true`.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePath
from typing import Any

from projections.codec import JSONDecodeError, dumps, loads
from projections.errors import INGEST_SCHEMA_VIOLATION
from projections.logformat import Rejection, decompress
from streams.ingest.importers import compaction
from streams.ingest.importers.common import (
    Emitter,
    ImportedSession,
    SourceLine,
    as_dict,
    as_str,
    feed_each,
    load_document,
    make_header,
    part_line,
    split_readable,
    with_rejections,
)
from streams.ingest.importers.registry import ImporterSpec, Location
from streams.ingest.importers.sniffing import document_head
from streams.ingest.importers.turns import TurnClock

PREFIX = "opencode"
META_PLUGIN = "opencode-meta"
#: Titles OpenCode gives a session before its real title is generated.
_PLACEHOLDER = re.compile(r"^(New|Child) session - \d{4}-\d\d-\d\dT")
_STORAGE_MAX_FILES = 100_000
#: OpenCode ids; only these become path components when reading its storage.
_STORAGE_ID = re.compile(r"^(ses|msg)_[A-Za-z0-9]{1,64}$")


def _ms(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


class _OpenCodeMapper:
    def __init__(self, created_at: int) -> None:
        self.em = Emitter()
        self.clock = TurnClock()
        self.time = created_at
        self.message: dict[str, Any] = {}
        self.calls: dict[str, tuple[int, int]] = {}
        self.compaction: compaction.Pending | None = None
        self.model = "unknown"

    def feed(self, line: SourceLine) -> None:
        """A record is a message's `info` (marked `_message`) or one of its parts."""
        value = line.value
        if "_message" in value:
            self._message(line, value["_message"])
            return
        kind, pid = value.get("type"), value.get("id")
        if not isinstance(kind, str) or not isinstance(pid, str) or not pid:
            self.em.reject(line, INGEST_SCHEMA_VIOLATION, "part without a string `id` and `type`")
            return
        times = value.get("time")
        self.time = (_ms(times.get("start")) if isinstance(times, dict) else None) or self.time
        role = self.message.get("role")
        if kind == "text" and role == "user":
            self._user_text(line, pid, value)
        elif kind == "compaction":
            self._compaction_start(line, pid)
        elif kind == "step-start":
            self._step_start(line, pid)
        elif kind in ("text", "reasoning"):
            self._model_text(line, pid, kind, value)
        elif kind == "tool":
            self._tool(line, pid, value)
        elif kind == "step-finish":
            usage = value.get("tokens")
            self.em.emit(line, "step/end", self.time, {
                "turn": self.clock.turn, "step": self.clock.step,
                **({"usage": usage} if isinstance(usage, dict) else {})}, key=pid)
        else:
            self.em.emit(line, f"{PREFIX}/{kind}", self.time, {}, key=pid)

    def _message(self, line: SourceLine, info: Any) -> None:
        mid = info.get("id") if isinstance(info, dict) else None
        if not isinstance(mid, str) or not mid or info.get("role") not in ("user", "assistant"):
            self.message = {}
            self.em.reject(line, INGEST_SCHEMA_VIOLATION,
                           "message info without a string `id` and a user/assistant `role`")
            return
        self.message = info
        line = SourceLine(line.number, line.raw, info)  # `raw` is the info as exported
        times = info.get("time")
        self.time = (_ms(times.get("created")) if isinstance(times, dict) else None) or self.time
        if isinstance(info.get("modelID"), str):
            self.model = info["modelID"]
        self.em.emit(line, f"{PREFIX}/message", self.time, {"id": mid, "role": info["role"]},
                     key=mid)
        error = info.get("error")
        if isinstance(error, dict):
            body = error.get("data")
            text = body.get("message") if isinstance(body, dict) else None
            aborted = error.get("name") == "MessageAbortedError"
            self.em.emit(line, "turn/end", self.time, {
                "turn": self.clock.turn, "reason": "aborted" if aborted else "error",
                "error": {"name": error.get("name"), "message": text}},
                key=f"{mid}/error", with_raw=False)

    # --- user side ---------------------------------------------------------------------------

    def _user_text(self, line: SourceLine, pid: str, part: dict[str, Any]) -> None:
        text = part.get("text") if isinstance(part.get("text"), str) else ""
        if part.get("synthetic") is True or self.compaction is not None:
            source: dict[str, Any] = {"kind": "plugin", "plugin": META_PLUGIN}
        else:
            source = {"kind": "user"}
            self.clock.prompt()
            self.em.open_step(line, self.clock, self.time, keyed=True)
        self.em.emit(line, "user/message", self.time, {
            "id": pid, "role": "user", "source": source,
            "content": [{"type": "text", "text": text}]}, op="append", key=pid)

    # --- model side --------------------------------------------------------------------------

    def _step_start(self, line: SourceLine, pid: str) -> None:
        self.clock.assistant(pid)
        due = self.clock.open_step()
        if due is not None:
            self.em.emit(line, "step/start", self.time, {"turn": due[0], "step": due[1]},
                         key=pid)
        else:  # the prompt already opened this step
            self.em.emit(line, f"{PREFIX}/step-start", self.time, {}, key=pid)

    def _model_text(self, line: SourceLine, pid: str, kind: str, part: dict[str, Any]) -> None:
        text = as_str(part.get("text"))
        if self.message.get("summary") is True and kind == "text" \
                and self.compaction is not None:
            self._compaction_summary(line, pid, text)
            return
        block = {"type": "reasoning" if kind == "reasoning" else "text", "text": text}
        self.em.emit(line, "assistant/message", self.time, {
            "turn": self.clock.turn, "step": self.clock.step,
            "message": {"id": pid, "role": "assistant", "content": [block]}},
            op="append", key=pid)

    def _tool(self, line: SourceLine, pid: str, part: dict[str, Any]) -> None:
        state = as_dict(part.get("state"))
        call_id = as_str(part.get("callID"), pid)
        name = as_str(part.get("tool"))
        arguments = state.get("input", {})
        turn, step = self.calls.setdefault(call_id, (self.clock.turn, self.clock.step))
        self.em.emit(line, "assistant/message", self.time, {
            "turn": turn, "step": step, "message": {
                "id": f"{pid}/call", "role": "assistant",
                "content": [{"type": "tool-call", "toolCallId": call_id, "name": name,
                             "arguments": arguments}]}}, op="append", key=f"{pid}/call")
        self.em.emit(line, "tool/call", self.time, {"turn": turn, "step": step,
                                                    "callId": call_id, "name": name,
                                                    "arguments": arguments},
                     key=f"{pid}/tool")
        status = state.get("status")
        if status not in ("completed", "error"):
            return  # still running: its result comes with a later import
        failed = status == "error"
        content = state.get("error") if failed else state.get("output")
        result = {"type": "tool-result", "toolCallId": call_id,
                  "content": content if isinstance(content, str) else
                  dumps(content).decode("utf-8"), "isError": failed}
        data: dict[str, Any] = {"turn": turn, "step": step, "message": {
            "id": f"{pid}/result", "role": "tool", "content": [result]}}
        if failed:
            data["error"] = {"name": "ToolError", "code": "TOOL_ERROR"}
        self.em.emit(line, "tool/result", self.time, data, op="append", key=f"{pid}/result",
                     with_raw=False)

    # --- compaction --------------------------------------------------------------------------

    def _compaction_start(self, line: SourceLine, pid: str) -> None:
        self.compaction = compaction.begin(self.em, line, self.time, f"{PREFIX}:{pid}",
                                           self.clock.turn, key=pid)

    def _compaction_summary(self, line: SourceLine, pid: str, text: str) -> None:
        pending = self.compaction
        assert pending is not None
        self.compaction = None
        tokens = self.message.get("tokens")
        total = tokens.get("input") if isinstance(tokens, dict) else None
        compaction.summarize(
            self.em, line, self.time, pending, summary=text,
            content=[{"type": "text", "text": text}], checkpoint_id=f"{pid}/checkpoint",
            token_count=_ms(total) or 0,
            provider=self.message.get("providerID") or "unknown", model=self.model, key=pid)


# --- sessions ------------------------------------------------------------------------------------

def _records(messages: Any) -> list[SourceLine | Rejection]:
    """Each message's info, then its parts, numbered in document order."""
    out: list[SourceLine | Rejection] = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            out.append(part_line(len(out) + 1, message))
            continue
        info = message.get("info")
        out.append(SourceLine(len(out) + 1, dumps(info), {"_message": info}))
        parts = message.get("parts")
        for part in parts if isinstance(parts, list) else []:
            out.append(part_line(len(out) + 1, part))
    return out


def _header(info: dict[str, Any]) -> dict[str, Any] | None:
    sid, times = info.get("id"), info.get("time")
    created = _ms(times.get("created")) if isinstance(times, dict) else None
    if not isinstance(sid, str) or not sid or created is None:
        return None
    parent = info.get("parentID")
    if isinstance(parent, str) and parent:
        return make_header(f"{PREFIX}:{sid}", created, cwd=info.get("directory"),
                           parent=f"{PREFIX}:{parent}", depth=1)
    return make_header(f"{PREFIX}:{sid}", created, cwd=info.get("directory"))


def import_opencode(data: bytes, source_name: str) -> list[ImportedSession]:
    """One export document (or one storage session file) → its session; a real title (not
    OpenCode's "New session - …" placeholder) comes last."""
    doc = load_document(decompress(data), PREFIX, source_name)
    if isinstance(doc, ImportedSession):
        return [doc]
    if "info" not in doc and "messages" not in doc and isinstance(doc.get("id"), str):
        doc = {"info": doc, "messages": read_storage(source_name, doc["id"])}
    info = as_dict(doc.get("info"))
    header = _header(info)
    lines, unreadable = split_readable(_records(doc.get("messages")))
    if header is None:
        unreadable.append(Rejection(0, INGEST_SCHEMA_VIOLATION,
                                    "no session id and creation time identify this export",
                                    data))
        return with_rejections(PREFIX, [], unreadable, source_name)
    mapper = _OpenCodeMapper(int(header["createdAt"]))
    volatile = ("time", "title", "summary", "tokens", "cost")
    top = SourceLine(0, b"", {k: v for k, v in info.items() if k not in volatile})
    mapper.em.emit(top, f"{PREFIX}/session", int(header["createdAt"]), {}, key="session")
    feed_each(lines, mapper.feed, mapper.em, f"{PREFIX}/unmapped")
    title = info.get("title")
    if isinstance(title, str) and title.strip() and not _PLACEHOLDER.match(title):
        mapper.em.emit(top, "session/title", mapper.time, {"title": title},
                       key=f"title:{title}", with_raw=False)
    session = ImportedSession(header, mapper.em.events, mapper.em.rejections)
    return with_rejections(PREFIX, [session], unreadable, source_name)


def read_storage(source_name: str, session_id: str) -> list[dict[str, Any]]:
    """OpenCode's own storage (`storage/session/<project>/<id>.json` beside `storage/message/<id>/`
    and `storage/part/<message id>/`) assembled into the export's `messages` shape. Unreadable
    files are skipped here; their absence shows as a message without parts."""
    storage = Path(source_name).parent.parent.parent
    if not _STORAGE_ID.match(session_id):
        return []  # never a path component from untrusted text
    messages: list[dict[str, Any]] = []
    for info in _json_files(storage / "message" / session_id):
        mid = info.get("id")
        parts = _json_files(storage / "part" / mid) \
            if isinstance(mid, str) and _STORAGE_ID.match(mid) else []
        messages.append({"info": info, "parts": parts})
    return messages


def _json_files(folder: Path) -> list[dict[str, Any]]:
    """The JSON objects in a folder, by file name (OpenCode ids sort by creation time)."""
    try:
        names = sorted(p for p in folder.iterdir() if p.suffix == ".json")[:_STORAGE_MAX_FILES]
    except OSError:
        return []
    found: list[dict[str, Any]] = []
    for path in names:
        try:
            value = loads(path.read_bytes())
        except (OSError, JSONDecodeError):
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def sniff(path: PurePath, head: bytes) -> bool:
    squeezed = document_head(head)
    return squeezed.startswith((b'{"info":{"id":"ses_', b'{"id":"ses_')) \
        and b'"projectID":' in squeezed


def claims(path: PurePath) -> bool:
    return path.name.startswith("ses_") and path.suffix == ".json"


SPEC = ImporterSpec(
    name=PREFIX, load=import_opencode, sniff=sniff, claims=claims,
    locations=(Location(".local/share/opencode/storage/session", env="XDG_DATA_HOME",
                        below="opencode/storage/session"),),
    whole_document=True)
