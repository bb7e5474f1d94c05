"""Ingest edge: Continue (VS Code / JetBrains) sessions (`~/.continue/sessions/<id>.json`) →
native session logs.

One JSON document per session, rewritten whole as it grows: `sessionId`, `title`,
`workspaceDirectory`, `history[]`; each item has `message {id, role, content}` (user content a
list of parts, assistant content a string), `contextItems[]` (files attached to the prompt), an
`editorState` on user turns and `promptLogs[]` (model title, prompt, completion) on assistant
turns. Continue records no times: the session is dated from `sessions.json` beside the document
(`dateCreated`), else from the document's modification time, and every event takes that time.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from projections.codec import JSONDecodeError, loads
from projections.errors import INGEST_SCHEMA_VIOLATION
from projections.logformat import Rejection, decompress
from streams.ingest.importers.common import (
    Emitter,
    ImportedSession,
    LineMapper,
    SourceLine,
    as_dict,
    as_list,
    as_str,
    feed_each,
    load_document,
    make_header,
    part_line,
    split_readable,
    with_rejections,
)
from streams.ingest.importers.filemeta import modified_ms
from streams.ingest.importers.registry import ImporterSpec, Location
from streams.ingest.importers.sniffing import document_head, is_record_stream
from streams.ingest.importers.turns import TurnClock

PREFIX = "continue"
#: Most bytes of `sessions.json` read to date a session (it lists every session: small).
_INDEX_MAX_BYTES = 16 << 20


def _user_block(block: Any) -> Any:
    if isinstance(block, dict) and block.get("type") == "text":
        return {"type": "text", "text": as_str(block.get("text"))}
    return block  # images are kept as they are


class _ContinueMapper(LineMapper):
    def __init__(self, created_at: int) -> None:
        self.em = Emitter()
        self.clock = TurnClock()
        self.time = created_at
        self.model: str | None = None

    def feed(self, line: SourceLine) -> None:
        message = line.value.get("message")
        if not isinstance(message, dict):
            self.em.reject(line, INGEST_SCHEMA_VIOLATION, "history item without an object "
                           "`message`")
            return
        mid = as_str(message.get("id")) or f"item-{line.number}"
        role = message.get("role")
        if role == "user":
            self._user(line, mid, message.get("content"))
        elif role == "assistant":
            self._assistant(line, mid, message.get("content"))
        else:
            self.em.emit(line, f"{PREFIX}/message", self.time, {"role": role}, key=mid)

    def _user(self, line: SourceLine, mid: str, content: Any) -> None:
        self.clock.prompt()
        self.em.open_step(line, self.clock, self.time, keyed=True)
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) \
            else [_user_block(b) for b in as_list(content)]
        self.em.emit(line, "user/message", self.time, {
            "id": mid, "role": "user", "source": {"kind": "user"}, "content": blocks},
            op="append", key=mid)

    def _assistant(self, line: SourceLine, mid: str, content: Any) -> None:
        logs = [as_dict(p) for p in as_list(line.value.get("promptLogs"))]
        model = next((as_str(p.get("modelTitle")) for p in logs if p.get("modelTitle")), None)
        if model is not None and model != self.model:
            self.em.emit(line, f"{PREFIX}/model", self.time, {"model": model},
                         key=f"{mid}/model")
            self.model = model
        self.clock.assistant(mid)
        self.em.open_step(line, self.clock, self.time, keyed=True)
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) \
            else [_user_block(b) for b in as_list(content)]
        self.em.emit(line, "assistant/message", self.time, {
            "turn": self.clock.turn, "step": self.clock.step,
            "message": {"id": mid, "role": "assistant", "content": blocks}},
            op="append", key=mid)


def _dated(session_id: str, source_name: str) -> tuple[int, str]:
    """(createdAt, where it came from): `sessions.json` beside the document, else the
    document's modification time, else 0."""
    index = PurePath(source_name).parent / "sessions.json"
    try:
        with open(index, "rb") as handle:
            listed = loads(handle.read(_INDEX_MAX_BYTES))
    except (OSError, JSONDecodeError):
        listed = None
    for entry in as_list(listed):
        if as_dict(entry).get("sessionId") == session_id:
            created = as_dict(entry).get("dateCreated")
            if isinstance(created, str) and created.isdigit():
                return int(created), "sessions.json dateCreated"
            if isinstance(created, int) and not isinstance(created, bool) and created >= 0:
                return created, "sessions.json dateCreated"
    modified = modified_ms(source_name)
    if modified is not None:
        return modified, "file modification time"
    return 0, "none"


def import_continue(data: bytes, source_name: str) -> list[ImportedSession]:
    """One Continue session document → one session."""
    doc = load_document(decompress(data), PREFIX, source_name)
    if isinstance(doc, ImportedSession):
        return [doc]
    sid = doc.get("sessionId")
    if not isinstance(sid, str) or not sid:
        return with_rejections(PREFIX, [], [Rejection(
            0, INGEST_SCHEMA_VIOLATION, "no sessionId identifies this session", data)],
            source_name)
    items = [part_line(i + 1, m) for i, m in enumerate(as_list(doc.get("history")))]
    lines, unreadable = split_readable(items)
    created, dated_by = _dated(sid, source_name)
    header = make_header(f"{PREFIX}:{sid}", created, cwd=doc.get("workspaceDirectory"))
    mapper = _ContinueMapper(created)
    # The document's own fields (the title has its own event), and how the session was dated.
    top = SourceLine(0, b"", {k: v for k, v in doc.items() if k not in ("history", "title")})
    mapper.em.emit(top, f"{PREFIX}/session", created, {"timeFrom": dated_by}, key="session")
    feed_each(lines, mapper.feed, mapper.em, f"{PREFIX}/unmapped")
    title = doc.get("title")
    if isinstance(title, str) and title.strip():
        mapper.em.emit(top, "session/title", created, {"title": title, "via": "title"},
                       key=f"title:{title}", with_raw=False)
    session = ImportedSession(header, mapper.em.events, mapper.em.rejections)
    return with_rejections(PREFIX, [session], unreadable, source_name)


def sniff(path: PurePath, head: bytes) -> bool:
    squeezed = document_head(head)
    return squeezed.startswith(b'{"sessionId":') and b'"history":' in squeezed \
        and not is_record_stream(head)


SPEC = ImporterSpec(
    name=PREFIX, load=import_continue, sniff=sniff,
    claims=lambda path: path.name.endswith(".json") and path.name != "sessions.json"
    and path.parent.name == "sessions" and path.parent.parent.name == ".continue",
    locations=(Location(".continue/sessions", env="CONTINUE_GLOBAL_DIR", below="sessions"),),
    whole_document=True, late_time=True, reads_beside=("sessions.json",))
