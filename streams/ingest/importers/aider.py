"""Ingest edge: Aider's `.aider.chat.history.md` (Markdown appended across runs) → one native session
per run (`# aider chat started at …`).

The file has no ids, no per-message times and no tool calls. What it has, by Aider's own writer:
`#### ` lines are the person's input, `> ` lines are Aider's output (edits applied, commands run,
commits, token counts, errors; a multi-line message continues on unprefixed lines directly below
its `> ` line), and text after a blank line is the model's reply. A block (a prompt, a run of
consecutive output messages, a reply) is one record and one event. Aider appends an output run
one message at a time, so a grown file is mapped as a continuation of the lines an earlier import
read (`resume_aider`), never re-imported whole: see MAPPING.md, Aider.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any, NamedTuple

from projections.errors import INGEST_INVALID_UTF8, INGEST_SCHEMA_VIOLATION
from projections.logformat import Rejection, decompress
from streams.ingest.importers.common import (
    Emitter,
    ImportedSession,
    SourceLine,
    feed_each,
    make_header,
    with_rejections,
)
from streams.ingest.importers.registry import ImporterSpec
from streams.ingest.importers.turns import TurnClock

PREFIX = "aider"
OUTPUT_PLUGIN = "aider"
HISTORY_NAME = ".aider.chat.history.md"
_START = re.compile(r"^# aider chat started at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*$")


class _Block(NamedTuple):
    kind: str  # "start" | "prompt" | "output" | "reply"
    first: int  # 1-based line number
    lines: list[str]
    origin: int  # a continuation: the first line of the block it continues (else 0)


# Blocks and source lines are built with tuple.__new__: a NamedTuple's generated __new__ is a
# Python frame, about as costly as the rest of a short block's handling.
_new = tuple.__new__


def _hash_kind(line: str) -> str | None:
    """The kind of a line starting with `#`: a prompt, a run's start, or text."""
    if line.startswith("####"):
        return "prompt"
    start = _START.match(line)
    if start and _started_ms(start.group(1)) is not None:
        return "start"
    return None


def _blocks(text: str, cut: int = 0) -> Iterator[_Block]:
    """The file's blocks in order, each line's place decided from the lines before it only (no
    look-ahead): prompt lines join a prompt, output lines (and the unprefixed lines of a
    multi-line message) an output run, any text and paragraph breaks a reply. `cut`: the last
    line an earlier import read; a block that runs across it is split there, the rest a
    continuation (see MAPPING.md, Aider)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    now = ""  # the current block's kind ("" when none)
    begin = 0  # the current block's first line (0-based): blocks are slices, not appends
    origin = 0
    for i, line in enumerate(lines):
        first = line[:1]
        kind: str | None = None
        if first == ">":
            kind = "output"
            joins = now == "output"
        elif first == "#" and (kind := _hash_kind(line)) is not None:
            joins = kind == "prompt" and now == "prompt"
        elif not line or line.isspace():
            joins = now == "reply"  # a paragraph break inside a reply; else the block ends
        else:
            joins = now == "output" or now == "reply"
        if joins:
            if i != cut:  # line number cut + 1
                continue
            yield _new(_Block, (now, begin + 1, lines[begin:i], origin))
            origin = origin or begin + 1
            begin = i
            continue
        if now:
            yield _new(_Block, (now, begin + 1, lines[begin:i], origin))
            now = ""
        if kind is not None or (line and not line.isspace()):
            now = kind or "reply"
            begin = i
            origin = 0
    if now:
        yield _new(_Block, (now, begin + 1, lines[begin:], origin))


@functools.lru_cache(maxsize=64)  # each run's stamp is read when its block is made and mapped
def _started_ms(stamp: str) -> int | None:
    """Aider writes local time without a zone; it is read as UTC (see MAPPING.md). `stamp`
    matched `_START` (fixed-width digits)."""
    try:
        parsed = datetime(int(stamp[:4]), int(stamp[5:7]), int(stamp[8:10]), int(stamp[11:13]),
                          int(stamp[14:16]), int(stamp[17:19]), tzinfo=UTC)
    except ValueError:
        return None
    return int(parsed.timestamp()) * 1000


class _RunMapper:
    def __init__(self, started: int) -> None:
        self.em = Emitter(plain_appends=True)
        self.clock = TurnClock()
        self.time = started

    def feed(self, line: SourceLine) -> None:
        value = line.value
        kind = value["kind"]
        em, clock, time = self.em, self.clock, self.time
        if kind == "start":
            em.emit(line, f"{PREFIX}/start", time, {})
            return
        first = line.number
        origin = value.get("continues")  # a continuation keeps its block's turn and step
        if kind == "reply":
            clock.assistant(f"line-{origin or first}")
            em.open_step(line, clock, time)
            em.emit(line, "assistant/message", time, {
                "turn": clock.turn, "step": clock.step,
                "message": {"id": f"line-{first}", "role": "assistant",
                            "content": [{"type": "text", "text": value["text"].strip()}]}},
                op="append")
            return
        if kind == "prompt":
            source: dict[str, Any] = {"kind": "user"}
            if origin is None:
                clock.prompt()
                em.open_step(line, clock, time)
        else:
            source = {"kind": "plugin", "plugin": OUTPUT_PLUGIN}
            clock.break_step()  # what Aider reports back may make the model go again
        em.emit(line, "user/message", time, {
            "id": f"line-{first}", "role": "user", "source": source,
            "content": [{"type": "text", "text": _strip_text(value["text"], kind)}]}, op="append")


_MARKS = {"prompt": re.compile(r"^#### ?", re.MULTILINE), "output": re.compile(r"^> ?", re.MULTILINE)}
_LINE_BREAK = re.compile(r"  $", re.MULTILINE)


def _strip_text(text: str, kind: str) -> str:
    """The text without Aider's prefixes (`#### `, `> `) and the two-space Markdown line breaks
    it appends to prompt and output lines; an output run's unprefixed lines (a multi-line
    message's continuation) are kept as they are."""
    if "\0" in text:  # the marker below: the regular expressions, which say the same
        body = _LINE_BREAK.sub("", _MARKS[kind].sub("", text))
    else:
        # A MULTILINE pattern is tried at every character; str.replace scans much faster. Where
        # a mark lacks its space, `mark ` becomes NUL first, so the pass for a bare mark cannot
        # reach a second mark (`> > quoted`).
        mark = "\n####" if kind == "prompt" else "\n>"
        body = "\n" + text
        spaced = mark + " "
        if body.count(mark) == body.count(spaced):  # every mark has its space (the usual case)
            body = body.replace(spaced, "\n")
        else:
            body = body.replace(spaced, "\n\0").replace(mark, "\n").replace("\n\0", "\n")
        body = body.replace("  \n", "\n")[1:]
        if body.endswith("  "):
            body = body[:-2]
    return body.rstrip() if kind == "prompt" else body.strip("\n").rstrip()


def import_aider(data: bytes, source_name: str) -> list[ImportedSession]:
    """One chat history file → one session per run; the cwd is the file's folder (Aider writes
    the history in the directory it runs in, the git root by default)."""
    return _import(data, source_name, 0, None)


def resume_aider(data: bytes, source_name: str, done: int,
                 next_seq: Callable[[str], int]) -> list[ImportedSession]:
    """The events a grown history adds after an import that read its first `done` lines: a
    block that ran across that line continues as a new event, and each session's new events
    are numbered from `next_seq(session id)` (0: nothing of it is stored; all of it is given)."""
    return _import(data, source_name, done, next_seq)


def _import(data: bytes, source_name: str, done: int,
            next_seq: Callable[[str], int] | None) -> list[ImportedSession]:
    raw = decompress(data)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return with_rejections(PREFIX, [], [Rejection(0, INGEST_INVALID_UTF8,
                                                      f"invalid UTF-8: {exc}", raw)], source_name)
    path = PurePath(source_name)
    folder = str(path.parent) if path.is_absolute() else None
    base = hashlib.blake2b(str(path).encode("utf-8"), digest_size=6).hexdigest()
    sessions: list[ImportedSession] = []
    leading: list[Rejection] = []
    runs: list[tuple[dict[str, Any], list[SourceLine]]] = []
    used: dict[str, int] = {}
    for kind, first, block_lines, origin in _blocks(text, done):  # unpacked: no attribute reads
        body = "\n".join(block_lines)
        if origin and not body.strip():
            continue  # a continuation made only of a reply's paragraph breaks
        value: dict[str, Any] = {"kind": kind, "text": body}
        if origin:
            value["continues"] = origin
        line = _new(SourceLine, (first, body.encode("utf-8"), value))
        if kind == "start":
            match = _START.match(block_lines[0])
            assert match is not None
            stamp = match.group(1)
            compact = stamp.replace("-", "").replace(" ", "").replace(":", "")
            used[compact] = used.get(compact, 0) + 1
            suffix = compact if used[compact] == 1 else f"{compact}-{used[compact]}"
            header = make_header(f"{PREFIX}:{base}:{suffix}", _started_ms(stamp) or 0,
                                 cwd=folder)
            runs.append((header, [line]))
        elif runs:
            runs[-1][1].append(line)
        else:
            leading.append(Rejection(first, INGEST_SCHEMA_VIOLATION,
                                     "text before the first `# aider chat started at` line",
                                     line.raw))
    for header, lines in runs:
        mapper = _RunMapper(int(header["createdAt"]))
        if next_seq is None:
            feed_each(lines, mapper.feed, mapper.em, f"{PREFIX}/unmapped")
            sessions.append(ImportedSession(header, mapper.em.events, mapper.em.rejections))
            continue
        seq = next_seq(str(header["id"]))
        done_here = done if seq else 0  # nothing of this session is stored: all of it
        # The lines read before are mapped again (for the turn and step clock), not given.
        feed_each([ln for ln in lines if ln.number <= done_here], mapper.feed, mapper.em,
                  f"{PREFIX}/unmapped")
        fresh_from = len(mapper.em.events)
        feed_each([ln for ln in lines if ln.number > done_here], mapper.feed, mapper.em,
                  f"{PREFIX}/unmapped")
        events = [{**e, "seq": seq + i} for i, e in enumerate(mapper.em.events[fresh_from:])]
        sessions.append(ImportedSession(header, events, mapper.em.rejections))
    return with_rejections(PREFIX, sessions, leading, source_name)


def sniff(path: PurePath, head: bytes) -> bool:
    start = head.lstrip()[:64]
    return start.startswith(b"# aider chat started at ")


SPEC = ImporterSpec(
    name=PREFIX, load=import_aider, sniff=sniff,
    claims=lambda path: path.name == HISTORY_NAME, resume=resume_aider)
