"""Ingest edge: Crush (Charm) sessions, from the SQLite database it keeps in each project
(`<project>/.crush/crush.db`) → native session logs.

Tables `sessions` (id, parent session id, title, token counts, cost, `summary_message_id`: the
compaction pointer, created/updated times) and `messages` (id, session id, role `user` /
`assistant` / `tool`, `parts`, model, provider, created/updated/finished times); `parts` is a
JSON array of `{type, data}`: `text`, `reasoning`, `image_url`/`binary`, `tool_call` (id, name,
input as JSON text), `tool_result` (tool_call_id, content, is_error), `finish` (reason `stop` /
`tool_use` / `end_turn` / `error` / `permission_denied` / `canceled`, with message and details).

Crush may hold the database open and be writing it (WAL mode): it is opened read-only through a
URI (`mode=ro`), read in one short read transaction (a WAL reader never blocks the writer), and
closed. Nothing is written. A WAL database whose `-wal`/`-shm` files are absent (Crush is not
running) is opened `immutable` instead: a read-only reader would otherwise create those files
beside it; with no writer there is no WAL to miss.

A message without a `finish` part is unfinished. The last message of a session, while Crush has
the database open, is still being written: the session is read up to it and the message comes
with a later ingest, whole. Otherwise (messages followed it, or Crush is not running, so nothing
will finish it) it is imported as it stands, marked `crush/finish {reason:"unfinished"}`.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import PurePath
from typing import Any

import apsw

from projections.codec import JSONDecodeError, dumps, loads
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
    make_header,
)
from streams.ingest.importers.registry import ImporterSpec
from streams.ingest.importers.turns import TurnClock

PREFIX = "crush"
#: How long a read waits for a writer's lock (rollback-journal mode only; WAL readers do not).
BUSY_TIMEOUT_MS = 2000
_SESSIONS = ("SELECT id, parent_session_id, title, message_count, prompt_tokens, "
             "completion_tokens, cost, updated_at, created_at, summary_message_id "
             "FROM sessions ORDER BY created_at, rowid")
_MESSAGES = ("SELECT id, session_id, role, parts, model, provider, created_at, updated_at, "
             "finished_at FROM messages ORDER BY rowid")
_SESSION_COLUMNS = ("id", "parent_session_id", "title", "message_count", "prompt_tokens",
                    "completion_tokens", "cost", "updated_at", "created_at", "summary_message_id")
_MESSAGE_COLUMNS = ("id", "session_id", "role", "parts", "model", "provider", "created_at",
                    "updated_at", "finished_at")
#: Finish reasons that end the turn, as PROTOCOL turn/end reasons.
_ENDS = {"error": "error", "canceled": "aborted", "permission_denied": "aborted"}


def as_ms(value: Any) -> int | None:
    """Crush's times: the schema says milliseconds, the rows hold seconds (a value below 10^11,
    i.e. before 1973 in milliseconds, is read as seconds)."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return None
    return value * 1000 if value < 100_000_000_000 else value


def _uri(path: str) -> str:
    """A read-only URI; `immutable` only for a WAL database no process has open (see the
    module docstring)."""
    uri = "file:" + urllib.parse.quote(path) + "?mode=ro"
    with open(path, "rb") as handle:
        head = handle.read(20)
    wal = len(head) == 20 and head[18] == 2 and head[19] == 2
    if wal and not is_open_by_writer(path):
        uri += "&immutable=1"
    return uri


def is_open_by_writer(path: str) -> bool:
    """A WAL database some process has open has its `-wal`/`-shm` files beside it."""
    return os.path.exists(path + "-wal") or os.path.exists(path + "-shm")


def read_database(path: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(sessions, messages) as rows, from one read transaction on a read-only connection."""
    uri = _uri(path)
    connection = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    try:
        connection.set_busy_timeout(BUSY_TIMEOUT_MS)
        with connection:  # one snapshot for both reads (BEGIN … COMMIT, read only)
            sessions = [dict(zip(_SESSION_COLUMNS, row, strict=True))
                        for row in connection.execute(_SESSIONS)]
            messages = [dict(zip(_MESSAGE_COLUMNS, row, strict=True))
                        for row in connection.execute(_MESSAGES)]
    finally:
        connection.close()
    return sessions, messages


def _parts(value: Any) -> list[dict[str, Any]]:
    try:
        parsed = loads(value) if isinstance(value, (str, bytes)) else value
    except JSONDecodeError:
        return []
    return [p for p in as_list(parsed) if isinstance(p, dict)]


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return loads(value)
        except JSONDecodeError:
            return value
    return value


class _CrushMapper(LineMapper):
    def __init__(self, session: dict[str, Any], created_at: int) -> None:
        self.em = Emitter()
        self.clock = TurnClock()
        self.time = created_at
        self.session = session
        self.calls: dict[str, tuple[int, int]] = {}
        self.model: tuple[str, str] | None = None

    def feed(self, line: SourceLine) -> None:
        row = line.value
        self.time = as_ms(row.get("created_at")) or self.time
        mid = as_str(row.get("id")) or f"row-{line.number}"
        parts = as_list(row.get("parts"))
        if mid == self.session.get("summary_message_id"):
            self._summary(line, mid, parts)
            return
        role = row.get("role")
        if role == "user":
            self._user(line, mid, parts)
        elif role == "assistant":
            self._assistant(line, mid, row, parts)
        elif role == "tool":
            self._results(line, mid, parts)
        else:
            self.em.emit(line, f"{PREFIX}/message", self.time, {"role": role}, key=mid)

    def _user(self, line: SourceLine, mid: str, parts: list[Any]) -> None:
        self.clock.prompt()
        self.em.open_step(line, self.clock, self.time, keyed=True)
        blocks = [{"type": "text", "text": as_str(as_dict(p.get("data")).get("text"))}
                  if p.get("type") == "text" else p for p in parts if p.get("type") != "finish"]
        self.em.emit(line, "user/message", self.time, {
            "id": mid, "role": "user", "source": {"kind": "user"}, "content": blocks},
            op="append", key=mid)

    def _assistant(self, line: SourceLine, mid: str, row: dict[str, Any],
                   parts: list[Any]) -> None:
        model = (as_str(row.get("provider")), as_str(row.get("model")))
        if model[1] and model != self.model:
            self.em.emit(line, f"{PREFIX}/model", self.time,
                         {"provider": model[0], "model": model[1]}, key=f"{mid}/model")
            self.model = model
        self.clock.assistant(mid)
        self.em.open_step(line, self.clock, self.time, keyed=True)
        blocks: list[Any] = []
        finish: dict[str, Any] = {"reason": "unfinished"}
        for part in parts:
            kind, data = part.get("type"), as_dict(part.get("data"))
            if kind == "text":
                blocks.append({"type": "text", "text": as_str(data.get("text"))})
            elif kind == "reasoning":
                blocks.append({"type": "reasoning",
                               "text": as_str(data.get("thinking"), as_str(data.get("text")))})
            elif kind == "tool_call":
                blocks.append({"type": "tool-call", "toolCallId": as_str(data.get("id")),
                               "name": as_str(data.get("name")),
                               "arguments": _arguments(data.get("input"))})
            elif kind == "finish":
                finish = data
            else:
                blocks.append(part)
        if blocks:
            self.em.emit(line, "assistant/message", self.time, {
                "turn": self.clock.turn, "step": self.clock.step,
                "message": {"id": mid, "role": "assistant", "content": blocks}},
                op="append", key=mid)
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool-call":
                call_id = str(block["toolCallId"])
                self.calls[call_id] = (self.clock.turn, self.clock.step)
                self.em.emit(line, "tool/call", self.time, {
                    "turn": self.clock.turn, "step": self.clock.step, "callId": call_id,
                    "name": block["name"], "arguments": block["arguments"]},
                    key=f"{mid}/call:{call_id}")
        self._finish(line, mid, finish)

    def _finish(self, line: SourceLine, mid: str, finish: dict[str, Any]) -> None:
        reason = as_str(finish.get("reason"))
        self.em.emit(line, f"{PREFIX}/finish", as_ms(finish.get("time")) or self.time,
                     {"reason": reason}, key=f"{mid}/finish")
        end = _ENDS.get(reason)
        if end is None:
            return
        data: dict[str, Any] = {"turn": self.clock.turn, "reason": end}
        message = "\n".join(t for t in (as_str(finish.get("message")),
                                        as_str(finish.get("details"))) if t)
        if message:
            data["error"] = {"message": message, "code": reason}
        self.em.emit(line, "turn/end", self.time, data, key=f"{mid}/end", with_raw=False)

    def _results(self, line: SourceLine, mid: str, parts: list[Any]) -> None:
        self.clock.break_step()
        results = [as_dict(p.get("data")) for p in parts if p.get("type") == "tool_result"]
        for index, data in enumerate(results):
            call_id = as_str(data.get("tool_call_id"))
            turn, step = self.calls.get(call_id, (self.clock.turn, self.clock.step))
            failed = data.get("is_error") is True
            event: dict[str, Any] = {"turn": turn, "step": step, "message": {
                "id": mid if index == 0 else f"{mid}#{index}", "role": "tool",
                "content": [{"type": "tool-result", "toolCallId": call_id,
                             "content": as_str(data.get("content")), "isError": failed}]}}
            if failed:
                event["error"] = {"name": "ToolError", "code": "TOOL_ERROR"}
            self.em.emit(line, "tool/result", self.time, event, op="append",
                         key=f"{mid}/result:{index}")
        if not results:
            self.em.emit(line, f"{PREFIX}/message", self.time, {"role": "tool"}, key=mid)

    def _summary(self, line: SourceLine, mid: str, parts: list[Any]) -> None:
        """The session's `summary_message_id`: everything before it is shadowed by it."""
        text = "\n".join(as_str(as_dict(p.get("data")).get("text")) for p in parts
                         if p.get("type") == "text")
        pending = compaction.begin(self.em, line, self.time, f"{PREFIX}:{mid}",
                                   self.clock.turn, key=mid)
        provider, model = self.model or ("unknown", "unknown")
        compaction.summarize(self.em, line, self.time, pending, summary=text,
                             content=[{"type": "text", "text": text}],
                             checkpoint_id=f"{mid}/checkpoint", token_count=0,
                             provider=provider or "unknown", model=model or "unknown", key=mid)
        self.clock.break_step()


def _cwd(source_name: str) -> str | None:
    """Crush keeps its database in `<project>/.crush/`: the project is the session's cwd."""
    path = PurePath(source_name)
    return str(path.parent.parent) if path.parent.name == ".crush" else None


def import_crush(data: bytes, source_name: str) -> list[ImportedSession]:
    """Every session of the database at `source_name` (the bytes are not used: the database is
    read through SQLite, see the module docstring)."""
    live = is_open_by_writer(source_name)
    sessions, messages = read_database(source_name)
    by_session: dict[str, list[dict[str, Any]]] = {}
    for row in messages:
        by_session.setdefault(as_str(row.get("session_id")), []).append(row)
    out: list[ImportedSession] = []
    cwd = _cwd(source_name)
    for session in sessions:
        sid = as_str(session.get("id"))
        created = as_ms(session.get("created_at")) or 0
        parent = as_str(session.get("parent_session_id")) or None
        header = make_header(f"{PREFIX}:{sid}", created, cwd=cwd,
                             parent=f"{PREFIX}:{parent}" if parent else None,
                             depth=1 if parent else 0)
        mapper = _CrushMapper(session, created)
        top = SourceLine(0, b"", {k: session[k] for k in ("id", "parent_session_id", "title")})
        mapper.em.emit(top, f"{PREFIX}/session", created, {}, key="session")
        lines: list[SourceLine] = []
        rows = by_session.get(sid, [])
        for number, row in enumerate(rows, start=1):
            parts = _parts(row.get("parts"))
            if not any(p.get("type") == "finish" for p in parts) and number == len(rows) \
                    and live:
                break  # still being written: it comes whole with a later ingest
            value = {**row, "parts": parts}
            lines.append(SourceLine(number, dumps(value), value))
        feed_each(lines, mapper.feed, mapper.em, f"{PREFIX}/unmapped")
        title = session.get("title")
        if isinstance(title, str) and title.strip():
            mapper.em.emit(top, "session/title", mapper.time, {"title": title, "via": "title"},
                           key=f"title:{title}", with_raw=False)
        out.append(ImportedSession(header, mapper.em.events, mapper.em.rejections))
    return out


SQLITE_MAGIC = b"SQLite format 3\x00"


def sniff(path: PurePath, head: bytes) -> bool:
    return head.startswith(SQLITE_MAGIC) and path.name == "crush.db"


SPEC = ImporterSpec(
    name=PREFIX, load=import_crush, sniff=sniff, claims=lambda path: path.name == "crush.db",
    whole_document=True, reads_source=True, companions=("-wal",))
