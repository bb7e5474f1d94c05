"""Ingest edge: Codex CLI rollout JSONL (raw or .jsonl.zst) → one native session log.

`response_item`s are the model-visible history and become surface events; `event_msg`s are the
UI stream (they duplicate user/agent messages and tool output) and stay log-only. A `compacted`
item replaces the whole current surface with its replacement history (PROTOCOL §1.3 shape).
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

import zstandard

from projections.errors import INGEST_MALFORMED_JSON, INGEST_SCHEMA_VIOLATION
from projections.logformat import Rejection, decompress
from streams.ingest.importers import compaction
from streams.ingest.importers.codex_items import (
    ASSISTANT_ITEMS,
    CALL_ITEMS,
    META_PLUGIN,
    OUTPUT_ITEMS,
    call_block,
    failure,
    is_injected,
    output_content,
    reasoning_blocks,
    text_blocks,
)
from streams.ingest.importers.common import (
    Emitter,
    ImportedSession,
    LineMapper,
    SourceLine,
    as_str,
    feed_each,
    iso_ms,
    make_header,
    orphan_session,
    read_lines,
)
from streams.ingest.importers.registry import ImporterSpec, Location
from streams.ingest.importers.sniffing import envelope_type, head_lines
from streams.ingest.importers.turns import TurnClock

PREFIX = "codex"
_THREAD_ID = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})", re.I)


class _CodexMapper(LineMapper):
    """Maps one rollout's records, in file order, to events through an Emitter."""

    def __init__(self, session_id: str, created_at: int) -> None:
        self.em = Emitter()
        self.session_id = session_id
        self.time = created_at
        self.clock = TurnClock()
        self.calls: dict[str, tuple[int, int]] = {}
        self.model = "unknown"

    def feed(self, line: SourceLine) -> None:
        value = line.value
        self.time = iso_ms(value.get("timestamp")) or self.time
        payload = value.get("payload")
        kind = value["type"]
        handler = {"response_item": self._item, "event_msg": self._event,
                   "compacted": self._compacted}.get(kind)
        if handler is None:
            if isinstance(payload, dict) and isinstance(payload.get("model"), str):
                self.model = payload["model"]  # turn_context names the model per turn
            self._log_only(line, f"{PREFIX}/{kind}", {})
        elif isinstance(payload, dict):
            handler(line, payload)
        else:
            self.em.reject(line, INGEST_SCHEMA_VIOLATION, f"{kind} record without an object "
                                                          "payload")

    # --- response items -------------------------------------------------------------------

    def _item(self, line: SourceLine, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        if not isinstance(kind, str):
            self.em.reject(line, INGEST_SCHEMA_VIOLATION, "response_item payload without a "
                                                          "string `type`")
        elif kind == "message":
            self._message(line, payload)
        elif kind in ASSISTANT_ITEMS:
            self._model_item(line, payload)
        elif kind in OUTPUT_ITEMS:
            self._output(line, payload)
        else:
            self._log_only(line, f"{PREFIX}/{kind}", {})

    def _message(self, line: SourceLine, payload: dict[str, Any]) -> None:
        role = str(payload.get("role", ""))
        content = payload.get("content")
        if role == "assistant":
            self._assistant(line, text_blocks(content))
            return
        self.clock.break_step()
        if is_injected(role, content):
            source: dict[str, Any] = {"kind": "plugin", "plugin": META_PLUGIN}
        else:
            self.clock.prompt()
            self.em.open_step(line, self.clock, self.time)
            source = {"kind": "user"}
        data = {"id": f"{self.session_id}#{line.number}", "role": "user", "source": source,
                "content": text_blocks(content)}
        self.em.emit(line, "user/message", self.time, data, op="append")

    def _assistant(self, line: SourceLine, blocks: list[Any]) -> None:
        self.clock.assistant(PREFIX)
        self.em.open_step(line, self.clock, self.time)
        data = {"turn": self.clock.turn, "step": self.clock.step,
                "message": {"id": f"{self.session_id}#{line.number}", "role": "assistant",
                            "content": blocks}}
        self.em.emit(line, "assistant/message", self.time, data, op="append")

    def _model_item(self, line: SourceLine, payload: dict[str, Any]) -> None:
        if payload.get("type") == "reasoning":
            self._assistant(line, reasoning_blocks(payload))
            return
        block = call_block(payload)
        self._assistant(line, [block])
        if payload.get("type") in CALL_ITEMS:
            self.calls[block["toolCallId"]] = (self.clock.turn, self.clock.step)
            self._log_only(line, "tool/call", {
                "turn": self.clock.turn, "step": self.clock.step,
                "callId": block["toolCallId"], "name": block["name"],
                "arguments": block["arguments"]})

    def _output(self, line: SourceLine, payload: dict[str, Any]) -> None:
        self.clock.break_step()
        call_id = str(payload.get("call_id", ""))
        turn, step = self.calls.get(call_id, (self.clock.turn, self.clock.step))
        output = payload.get("output")
        code = failure(output)
        part = {"type": "tool-result", "toolCallId": call_id, "content": output_content(output),
                "isError": code is not None}
        data: dict[str, Any] = {"turn": turn, "step": step, "message": {
            "id": f"{self.session_id}#{line.number}", "role": "tool", "content": [part]}}
        if code is not None:
            data["error"] = {"name": "ToolError", "code": code}
        self.em.emit(line, "tool/result", self.time, data, op="append")

    # --- event stream ---------------------------------------------------------------------

    def _event(self, line: SourceLine, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        if not isinstance(kind, str):
            self.em.reject(line, INGEST_SCHEMA_VIOLATION, "event_msg payload without a string "
                                                          "`type`")
        elif kind == "task_started":
            self.clock.start_turn()
            self._log_only(line, "turn/start", {"turn": self.clock.turn})
        elif kind in ("task_complete", "turn_complete"):
            self._log_only(line, "turn/end", {"turn": self.clock.turn, "reason": "completed"})
        elif kind == "turn_aborted":
            self._log_only(line, "turn/end", {"turn": self.clock.turn, "reason": "aborted"})
        elif kind == "thread_name_updated" and as_str(
                payload.get("thread_name", payload.get("name"))).strip():
            self._log_only(line, "session/title",
                           {"title": payload.get("thread_name", payload.get("name"))})
        else:
            self._log_only(line, f"{PREFIX}/{kind}", {})

    # --- compaction -----------------------------------------------------------------------

    def _compacted(self, line: SourceLine, payload: dict[str, Any]) -> None:
        """compaction/start, compaction/summary, the checkpoint user/message replacing the whole
        surface, compaction/end. The checkpoint's text is the summary (local compaction) plus
        the readable replacement history (remote compaction keeps user messages verbatim; its
        own summary is encrypted)."""
        cid = f"{self.session_id}#compact-{line.number}"
        pending = compaction.begin(self.em, line, self.time, cid, self.clock.turn)
        summary = as_str(payload.get("message"))
        history = payload.get("replacement_history")
        blocks = [{"type": "text", "text": summary}] if summary else []
        for item in history if isinstance(history, list) else []:
            if isinstance(item, dict) and item.get("type") == "message":
                blocks.extend(b for b in text_blocks(item.get("content"))
                              if isinstance(b, dict) and b.get("type") == "text")
        compaction.summarize(self.em, line, self.time, pending, summary=summary, content=blocks,
                             checkpoint_id=f"{self.session_id}#{line.number}", token_count=0,
                             provider="openai", model=self.model)
        self.clock.break_step()


def _meta(lines: list[SourceLine]) -> dict[str, Any] | None:
    for line in lines:
        if line.value["type"] == "session_meta" and isinstance(line.value.get("payload"), dict):
            payload: dict[str, Any] = line.value["payload"]
            return payload
    return None


def _lineage(meta: dict[str, Any]) -> tuple[str | None, int]:
    """(parentSession, delegationDepth) from `source.subagent.thread_spawn` or `forked_from_id`."""
    source = meta.get("source")
    spawn = source.get("subagent") if isinstance(source, dict) else None
    spawn = spawn.get("thread_spawn") if isinstance(spawn, dict) else None
    if isinstance(spawn, dict) and isinstance(spawn.get("parent_thread_id"), str):
        depth = spawn.get("depth")
        return (f"{PREFIX}:{spawn['parent_thread_id']}",
                depth if isinstance(depth, int) and depth > 0 else 1)
    if isinstance(meta.get("forked_from_id"), str):
        return f"{PREFIX}:{meta['forked_from_id']}", 0
    return None, 0


def _header(lines: list[SourceLine], source_name: str) -> dict[str, Any] | None:
    """From the first session_meta; without one, the thread id in the rollout's file name."""
    meta = _meta(lines) or {}
    thread = meta.get("id")
    if not isinstance(thread, str) or not thread:
        found = _THREAD_ID.findall(PurePath(source_name).name)
        thread = found[-1] if found else None
    stamps = [iso_ms(meta.get("timestamp"))] + [iso_ms(ln.value.get("timestamp"))
                                                  for ln in lines[:1]]
    created = next((s for s in stamps if s is not None), None)
    if thread is None or created is None:
        return None
    parent, depth = _lineage(meta)
    return make_header(f"{PREFIX}:{thread}", created, cwd=meta.get("cwd"), parent=parent,
                       depth=depth)


def import_codex(data: bytes, source_name: str) -> list[ImportedSession]:
    """One Codex rollout (raw or zstd) → one session, `parentSession` set for subagent threads."""
    try:
        text = decompress(data)
    except zstandard.ZstdError as exc:
        return [orphan_session(PREFIX, source_name, [
            Rejection(0, INGEST_MALFORMED_JSON, f"corrupt zstd data: {exc}", data[:4096])])]
    unreadable: list[Rejection] = []
    lines: list[SourceLine] = []
    for item in read_lines(text):
        if isinstance(item, Rejection):
            unreadable.append(item)
        else:
            lines.append(item)
    header = _header(lines, source_name)
    if header is None:
        unreadable.extend(Rejection(ln.number, INGEST_SCHEMA_VIOLATION,
                                    "no session_meta or timestamp identifies this rollout yet",
                                    ln.raw) for ln in lines)
        return [orphan_session(PREFIX, source_name, sorted(unreadable, key=lambda r: r.line))]
    mapper = _CodexMapper(str(header["id"]), int(header["createdAt"]))
    feed_each(lines, mapper.feed, mapper.em, f"{PREFIX}/unmapped")
    rejections = sorted([*mapper.em.rejections, *unreadable], key=lambda r: r.line)
    return [ImportedSession(header, mapper.em.events, rejections)]


# --- registry entry ---------------------------------------------------------------------------

_CODEX_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context",
                          "compacted"})


def sniff(path: PurePath, head: bytes) -> bool:
    """Codex rollout records: `{type, payload}` envelopes of the rollout vocabulary."""
    for value in head_lines(head):
        if isinstance(value, dict):
            kind = value.get("type")
            if isinstance(kind, str) and kind in _CODEX_TYPES and "payload" in value:
                return True
        elif isinstance(value, bytes) and envelope_type(value) in _CODEX_TYPES \
                and b'"payload"' in value[:512]:
            return True  # session_meta carries whole system prompts: longer than the head
    return False


def claims(path: PurePath) -> bool:
    return path.name.startswith("rollout-") and ".jsonl" in path.name


SPEC = ImporterSpec(
    name=PREFIX, load=import_codex, sniff=sniff, claims=claims,
    locations=(Location(".codex/sessions", env="CODEX_HOME", below="sessions"),
               Location(".codex/archived_sessions", env="CODEX_HOME", below="archived_sessions")))
