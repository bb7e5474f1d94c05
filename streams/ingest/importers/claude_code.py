"""Ingest edge: Claude Code project JSONL → native session logs (main chain and sidechains).

Records are mapped in file order, so importing a grown file yields the earlier events as an exact
prefix. The parentUuid DAG is honoured without look-ahead: a record that forks from an earlier
point (a rewind/redo) replaces the abandoned span of the surface, so the abandoned records stay in
the log as `shadowed` instead of being merged into what the model saw. Parallel tool calls (sibling
lines of one API message, tool results hanging off their tool_use line) are not forks.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from projections.errors import INGEST_SCHEMA_VIOLATION
from projections.logformat import Rejection, decompress
from streams.ingest.importers.claude_blocks import (
    as_blocks,
    assistant_block,
    command_prompt,
    error_code,
    result_content,
    user_block,
    user_source,
)
from streams.ingest.importers.claude_compaction import CompactionMixin
from streams.ingest.importers.claude_route import PREFIX, Route, header_for, main_id, route
from streams.ingest.importers.common import (
    Emitter,
    ImportedSession,
    SourceLine,
    feed_each,
    iso_ms,
    orphan_session,
    read_lines,
)
from streams.ingest.importers.compaction import Pending
from streams.ingest.importers.registry import ImporterSpec, Location
from streams.ingest.importers.sniffing import envelope_type, head_lines
from streams.ingest.importers.turns import TurnClock

TITLE_TYPES = {"custom-title": "customTitle", "ai-title": "aiTitle"}


class _SessionMapper(CompactionMixin):
    """Maps one session's records, in file order, to events through an Emitter."""

    def __init__(self, created_at: int) -> None:
        self.em = Emitter()
        self.time = created_at
        self.clock = TurnClock()
        self.calls: dict[str, tuple[int, int]] = {}
        self.results: dict[str, int] = {}
        self.anchor: dict[str, int | None] = {}
        self.tip: str | None = None
        self.last_surface: int | None = None
        self.pending: Pending | None = None
        self.titles: set[tuple[str, str]] = set()
        #: leafUuid → summary text, for summaries written before their leaf record.
        self.waiting_titles: dict[str, str] = {}
        self.model = "unknown"
        self.api_message: str | None = None

    # --- dispatch -------------------------------------------------------------------------

    def feed(self, line: SourceLine) -> None:
        value = line.value
        self.time = iso_ms(value.get("timestamp")) or self.time
        kind = value["type"]
        if kind in ("user", "assistant") and self.pending is not None \
                and not value.get("isCompactSummary"):
            self._close_pending(line, "compact boundary without an isCompactSummary record")
        if kind == "user":
            self._user(line, value)
        elif kind == "assistant":
            self._assistant(line, value)
        elif kind == "system" and value.get("subtype") == "compact_boundary":
            self._compact_start(line, value)
        elif kind == "system" and value.get("subtype") == "microcompact_boundary":
            self._microcompact(line, value)
        elif kind == "summary":
            self._summary(line, value)
        elif kind in TITLE_TYPES:
            self._title(line, value)
        else:
            self._log_only(line, f"{PREFIX}/{kind}", {})
        uuid = value.get("uuid")
        if isinstance(uuid, str):
            self.anchor[uuid] = self.last_surface
            self.tip = uuid
            waiting = self.waiting_titles.pop(uuid, None)
            if waiting is not None:
                self._title_from_summary(line, waiting, uuid)

    def _surface(self, line: SourceLine, kind: str, data: dict[str, Any],
                 fork: list[int]) -> int | None:
        """Emit a surface event; the first one of a forking record replaces the abandoned span."""
        # A tool/result may only replace one tool/result, so it never carries the fork.
        if fork and kind != "tool/result" and set(fork) <= set(self.em.nodes()):
            op: Any = {"op": "replace", "start": fork[0], "end": fork[-1]}
            seq = self.em.emit(line, kind, self.time, data, op=op, sources=list(fork))
            fork.clear()
        else:
            seq = self.em.emit(line, kind, self.time, data, op="append")
        if seq is not None:
            self.last_surface = seq
        return seq

    # --- the DAG --------------------------------------------------------------------------

    def _fork_span(self, value: dict[str, Any]) -> list[int]:
        """Current surface nodes made after this record's parent, when the record branches off
        an earlier point; [] when it continues the active chain."""
        parent = value.get("parentUuid")
        if not isinstance(parent, str) or parent == self.tip or parent not in self.anchor:
            return []
        if self._is_companion(value):
            return []
        nodes = self.em.nodes()
        anchor = self.anchor[parent]
        if anchor is None:
            return list(nodes)
        if anchor not in nodes:
            return []  # the parent is itself off the surface: nothing current to abandon
        return nodes[nodes.index(anchor) + 1:]

    def _is_companion(self, value: dict[str, Any]) -> bool:
        """Parallel tool use: another line of the same API message, or tool results only."""
        message = value.get("message")
        if not isinstance(message, dict):
            return True
        if value["type"] == "assistant":
            return message.get("id") is not None and message.get("id") == self.api_message
        blocks = as_blocks(message.get("content"))
        return bool(blocks) and all(isinstance(b, dict) and b.get("type") == "tool_result"
                                    for b in blocks)

    # --- user / assistant -----------------------------------------------------------------

    def _message(self, line: SourceLine, value: dict[str, Any]) -> dict[str, Any] | None:
        message = value.get("message")
        if not isinstance(message, dict) or "content" not in message:
            self.em.reject(line, INGEST_SCHEMA_VIOLATION,
                           f"{value['type']} record without message.content")
            return None
        return message

    def _user(self, line: SourceLine, value: dict[str, Any]) -> None:
        if value.get("isCompactSummary") is True:
            self._compact_summary(line, value)
            return
        message = self._message(line, value)
        if message is None:
            return
        fork = self._fork_span(value)
        pending: list[Any] = []
        results = 0
        for block in as_blocks(message.get("content")):
            if isinstance(block, dict) and block.get("type") == "tool_result":
                self._flush_user(line, value, pending, fork)
                pending = []
                self._tool_result(line, value, block, results, fork)
                results += 1
            else:
                pending.append(block)
        self._flush_user(line, value, pending, fork)

    def _flush_user(self, line: SourceLine, value: dict[str, Any], blocks: list[Any],
                    fork: list[int]) -> None:
        if not blocks:
            return
        source = user_source(value, blocks)
        content = [user_block(b) for b in blocks]
        if source["kind"] == "user":
            self.clock.prompt()
            self.api_message = None
            self.em.open_step(line, self.clock, self.time)
            typed = command_prompt(blocks)
            if typed is not None:
                content = [{"type": "text", "text": typed}]  # the wrapper stays in `raw`
        data = {"id": str(value.get("uuid", f"line-{line.number}")), "role": "user",
                "source": source, "content": content}
        self._surface(line, "user/message", data, fork)

    def _tool_result(self, line: SourceLine, value: dict[str, Any], block: dict[str, Any],
                     index: int, fork: list[int]) -> None:
        call_id = str(block.get("tool_use_id", ""))
        turn, step = self.calls.get(call_id, (self.clock.turn, self.clock.step))
        is_error = block.get("is_error") is True
        uuid = str(value.get("uuid", f"line-{line.number}"))
        part = {"type": "tool-result", "toolCallId": call_id,
                "content": result_content(block.get("content")), "isError": is_error}
        data: dict[str, Any] = {"turn": turn, "step": step, "message": {
            "id": uuid if index == 0 else f"{uuid}#{index}", "role": "tool", "content": [part]}}
        if is_error:
            data["error"] = {"name": "ToolError",
                             "code": error_code(block, value.get("toolUseResult"))}
        seq = self._surface(line, "tool/result", data, fork)
        if seq is not None:
            self.results[call_id] = seq

    def _assistant(self, line: SourceLine, value: dict[str, Any]) -> None:
        message = self._message(line, value)
        if message is None:
            return
        fork = self._fork_span(value)
        api_id = message.get("id") if isinstance(message.get("id"), str) else None
        first = self.clock.assistant(api_id)
        self.api_message = api_id
        self.em.open_step(line, self.clock, self.time)
        if isinstance(message.get("model"), str) and message["model"] != "<synthetic>":
            self.model = message["model"]
        blocks = [assistant_block(b) for b in as_blocks(message.get("content"))]
        data: dict[str, Any] = {"turn": self.clock.turn, "step": self.clock.step, "message": {
            "id": str(value.get("uuid", f"line-{line.number}")), "role": "assistant",
            "content": blocks}}
        # Every line of one API response repeats `usage`; keep it once so sums stay right.
        if first and isinstance(message.get("usage"), dict):
            data["usage"] = message["usage"]
        self._surface(line, "assistant/message", data, fork)
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool-call":
                self._tool_call(line, block)

    def _tool_call(self, line: SourceLine, block: dict[str, Any]) -> None:
        call_id = str(block["toolCallId"])
        self.calls[call_id] = (self.clock.turn, self.clock.step)
        self._log_only(line, "tool/call", {"turn": self.clock.turn, "step": self.clock.step,
                                           "callId": call_id, "name": block["name"],
                                           "arguments": block["arguments"]})

    # --- titles ---------------------------------------------------------------------------

    def _summary(self, line: SourceLine, value: dict[str, Any]) -> None:
        """A `summary` is always kept as `claude-code/summary {summary, leafUuid}`; it titles
        this session once its leaf (the last record of the conversation it names) is a record
        of this session, whether the leaf came before it or comes later (Claude Code often
        writes summaries at the top of a file). A leaf in another file names another session:
        the index side resolves those (it holds every session's record uuids)."""
        text, leaf = value.get("summary"), value.get("leafUuid")
        named = isinstance(text, str) and bool(text.strip()) and isinstance(leaf, str)
        self._log_only(line, f"{PREFIX}/summary",
                       {"summary": text, "leafUuid": leaf} if named else {})
        if not named:
            return
        assert isinstance(text, str) and isinstance(leaf, str)
        if leaf in self.anchor:
            self._title_from_summary(line, text, leaf)
        else:
            self.waiting_titles[leaf] = text  # the latest summary of a leaf wins

    def _title_from_summary(self, line: SourceLine, text: str, leaf: str) -> None:
        if (text, leaf) in self.titles:
            return  # older builds repeat their summaries
        self.titles.add((text, leaf))
        self.em.emit(line, "session/title", self.time,
                     {"title": text, "leafUuid": leaf, "via": "summary"}, with_raw=False)

    def _title(self, line: SourceLine, value: dict[str, Any]) -> None:
        title = value.get(TITLE_TYPES[value["type"]], value.get("title"))
        if isinstance(title, str) and title.strip():
            self._log_only(line, "session/title", {"title": title, "via": value["type"]})
        else:
            self._log_only(line, f"{PREFIX}/{value['type']}", {})


def import_claude_code(data: bytes, source_name: str) -> list[ImportedSession]:
    """One Claude Code JSONL file → its sessions: the main chain first, then each sidechain run
    (own session, `parentSession` = the main one). Unreadable lines are rejections of the first
    session (or of a header-only placeholder when the file has no session yet)."""
    unreadable: list[Rejection] = []
    lines: list[SourceLine] = []
    for item in read_lines(decompress(data)):
        if isinstance(item, Rejection):
            unreadable.append(item)
        else:
            lines.append(item)
    routes, unclaimed = route(lines)
    main = main_id(routes, source_name)
    sessions: list[ImportedSession] = []
    unreadable.extend(Rejection(ln.number, INGEST_SCHEMA_VIOLATION,
                                "no record of this file names a session yet", ln.raw)
                      for ln in unclaimed)
    for r in routes:
        header = header_for(r, main)
        if header is None:
            unreadable.extend(Rejection(ln.number, INGEST_SCHEMA_VIOLATION,
                                        "no timestamped record names this session yet", ln.raw)
                              for ln in r.lines)
            continue
        sessions.append(_map_route(r, header))
    return _attach(sessions, unreadable, source_name)


def _map_route(r: Route, header: dict[str, Any]) -> ImportedSession:
    mapper = _SessionMapper(int(header["createdAt"]))
    feed_each(r.lines, mapper.feed, mapper.em, f"{PREFIX}/unmapped")
    return ImportedSession(header, mapper.em.events, mapper.em.rejections)


def _attach(sessions: list[ImportedSession], unreadable: list[Rejection],
            source_name: str) -> list[ImportedSession]:
    if not unreadable:
        return sessions
    unreadable.sort(key=lambda r: r.line)
    if not sessions:
        return [orphan_session(PREFIX, source_name, unreadable)]
    first = sessions[0]
    merged = sorted([*first.rejections, *unreadable], key=lambda r: r.line)
    return [ImportedSession(first.header, first.events, merged), *sessions[1:]]


# --- registry entry ---------------------------------------------------------------------------

_CLAUDE_TYPES = frozenset({"user", "assistant", "system", "summary", "file-history-snapshot",
                           "queue-operation", "progress", "custom-title", "ai-title",
                           "attachment", "pr-link", "agent-name", "last-prompt",
                           "permission-mode", "saved_hook_context"})


def sniff(path: PurePath, head: bytes) -> bool:
    """Claude Code records: a known record type, or the `parentUuid`/`leafUuid` chain keys."""
    for value in head_lines(head):
        if isinstance(value, dict):
            kind = value.get("type")
            if (isinstance(kind, str) and kind in _CLAUDE_TYPES) or "parentUuid" in value \
                    or "leafUuid" in value:
                return True
        elif isinstance(value, bytes):
            kind = envelope_type(value)
            start = value[:512]
            if b'"parentUuid"' in start or b'"sessionId"' in start or kind in _CLAUDE_TYPES:
                return True
    return False


def claims(path: PurePath) -> bool:
    return "/.claude/projects/" in path.as_posix() and path.name.endswith(
        (".jsonl", ".jsonl.zst", ".jsonl.zstd"))


SPEC = ImporterSpec(
    name=PREFIX, load=import_claude_code, sniff=sniff, claims=claims,
    locations=(Location(".claude/projects", env="CLAUDE_CONFIG_DIR", below="projects"),))
