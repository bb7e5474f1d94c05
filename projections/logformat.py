"""Stage 0 of the flow: native log bytes (raw JSONL or concatenated zstd frames) → header + events.

Pure: it takes bytes, never paths. A bad line becomes a structured Rejection with its original
bytes, never an exception that loses the rest of the file. Once an event is rejected, the events
after it cannot fold (their seqs would not be contiguous), so they are parked as well, each with
INGEST_AFTER_REJECTED: nothing is dropped, nothing is silently merged.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import zstandard

from projections.codec import dumps, loads_canonical
from projections.errors import (
    INGEST_AFTER_REJECTED,
    INGEST_CORRUPT_COMPRESSION,
    INGEST_DUPLICATE_CONFLICT,
    INGEST_FILE_TOO_LARGE,
    INGEST_INVALID_SURFACE,
    INGEST_MISSING_HEADER,
    INGEST_OVERSIZED_EVENT,
    INGEST_SCHEMA_VIOLATION,
    INGEST_SEQ_GAP,
    INGEST_UNKNOWN_EVENT_TYPE,
    FoldError,
    InputRejected,
)
from projections.events import KNOWN_EVENT_TYPES, is_chunk_row, parse_event, parse_header
from projections.fold import Step, SurfaceState, plan

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: Default cap on one event's encoded size; larger lines are parked, not indexed.
DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024
#: Default cap on a whole file's decompressed size (a zstd bomb stops here).
DEFAULT_MAX_FILE_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Rejection:
    """A line that could not enter the log: where it was, why (stable code), and its bytes.

    A record too large to keep is *bounded*: `raw` is empty and `digest` (blake2b-256 hex),
    `length` and `offset` (in the decompressed source, if known) say what and where it was."""

    line: int
    code: str
    reason: str
    raw: bytes
    digest: str | None = None
    length: int | None = None
    offset: int | None = None

    @property
    def bounded(self) -> bool:
        return self.digest is not None

    @property
    def size(self) -> int:
        return self.length if self.length is not None else len(self.raw)

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "code": self.code, "reason": self.reason,
                "bytes": self.size}


@dataclass(slots=True)
class ParsedLog:
    """A parsed native log: the header (None if missing), the accepted events, the rejections."""

    header: dict[str, Any] | None
    events: list[dict[str, Any]] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    state: SurfaceState = field(default_factory=SurfaceState)
    #: The fold step of each accepted event, so consumers need not fold twice (empty from a
    #: builder made with `keep_steps=False`).
    steps: list[Step] = field(default_factory=list)
    #: Each accepted event's serialization (orjson's compact JSON) when its line already was
    #: exactly that (the common case), else None: the store and the index keep these bytes
    #: instead of dumping the event again.
    raws: list[bytes | None] = field(default_factory=list)
    lines: int = 0


def decompress(data: bytes, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> bytes:
    """Undo concatenated zstd frames if the data starts with the zstd magic; else return it as
    is. Output past `max_bytes` is refused (INGEST_FILE_TOO_LARGE), never materialized."""
    if not data.startswith(ZSTD_MAGIC):
        return data
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    out: bytes = reader.read(max_bytes + 1)
    if len(out) > max_bytes:
        raise InputRejected(f"decompresses to more than {max_bytes} bytes",
                            code=INGEST_FILE_TOO_LARGE)
    return out


def split_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line bytes without the newline); blank lines are skipped."""
    for number, line in enumerate(data.split(b"\n"), start=1):
        stripped = line.rstrip(b"\r")
        if stripped.strip():
            yield number, stripped


def expand_chunk_row(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A packed chunk row → its `assistant/chunk` events. Member i gets seq `seq0 + i` and time
    `time0 + dt_0 + … + dt_i` (dt is relative to the previous member); its data is member.data."""
    seq0, time0, members = row.get("seq0"), row.get("time0"), row.get("members")
    if (not isinstance(seq0, int) or isinstance(seq0, bool) or not isinstance(time0, int)
            or isinstance(time0, bool) or not isinstance(members, list) or not members):
        raise InputRejected(f"{row.get('type')} row needs integer seq0/time0 and non-empty members",
                            code=INGEST_SCHEMA_VIOLATION)
    out: list[dict[str, Any]] = []
    now = time0
    for i, member in enumerate(members):
        if not isinstance(member, dict) or not isinstance(member.get("dt"), int) \
                or "data" not in member or set(member) - {"dt", "data"}:
            raise InputRejected(f"chunk member {i} must be {{dt:int, data}}",
                                code=INGEST_SCHEMA_VIOLATION)
        now += int(member["dt"])
        out.append({"type": "assistant/chunk", "seq": seq0 + i, "time": now,
                    "data": member["data"]})
    return out


def pack_chunk_row(kind: str, events: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The inverse of `expand_chunk_row` for a run of consecutive `assistant/chunk` events."""
    members = []
    prev = int(events[0]["time"])
    for e in events:
        members.append({"dt": int(e["time"]) - prev, "data": e["data"]})
        prev = int(e["time"])
    return {"type": kind, "seq0": int(events[0]["seq"]), "time0": int(events[0]["time"]),
            "members": members}


def _loads(number: int, line: bytes) -> tuple[Any, bool, Rejection | None]:
    try:
        value, canonical = loads_canonical(line)
        return value, canonical, None
    except InputRejected as exc:
        return None, False, Rejection(number, exc.code, exc.message, line)


def check_event_type(event: Mapping[str, Any]) -> None:
    """Unknown types load only when marked ignorable (PROTOCOL §1.2)."""
    if event["type"] not in KNOWN_EVENT_TYPES and event.get("ignorable") is not True:
        raise InputRejected(f"unknown event type {event['type']!r} without ignorable: true",
                            code=INGEST_UNKNOWN_EVENT_TYPE)


class LogBuilder:
    """Accepts a session's lines one at a time; the shared path of files, tailers and importers."""

    def __init__(self, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
                 header: dict[str, Any] | None = None, state: SurfaceState | None = None,
                 keep_steps: bool = True) -> None:
        """`keep_steps=False`: `log.steps` stays empty, for callers that use only the events
        (each step holds its state's page tuples: a long session's steps hold a quadratic number
        of references, all of them work for the garbage collector)."""
        self.max_event_bytes = max_event_bytes
        self.keep_steps = keep_steps
        self.log = ParsedLog(header=header, state=state or SurfaceState())
        self.blocked = False
        #: The seq of this builder's first event: an event below it is the caller's business
        #: (e.g. the store's duplicate check); one above it repeats one accepted here.
        self.base_seq = self.log.state.next_seq
        #: Exact duplicates skipped (same seq, same bytes as an event already accepted).
        self.duplicates = 0

    def feed_line(self, number: int, line: bytes) -> None:
        self.log.lines += 1
        if self.blocked:
            self._reject(number, INGEST_AFTER_REJECTED,
                         "an earlier line of this session was rejected", line)
            return
        if len(line) > self.max_event_bytes:
            self._block(Rejection(number, INGEST_OVERSIZED_EVENT,
                                  f"line is {len(line)} bytes; the limit is "
                                  f"{self.max_event_bytes}", line))
            return
        value, canonical, rejection = _loads(number, line)
        if rejection is not None:
            self._block(rejection)
            return
        if self.log.header is None:
            if not isinstance(value, dict) or value.get("type") != "session":
                self._block(Rejection(number, INGEST_MISSING_HEADER,
                                      "line 1 must be the session header", line))
                return
            try:
                header = parse_header(value)
                self.accept_header(header)
                self.log.header = header
            except InputRejected as exc:
                self._block(Rejection(number, exc.code, exc.message, line))
            return
        try:
            if is_chunk_row(value):
                for event in expand_chunk_row(value):
                    self.feed_event(event)
            else:
                raw = line if canonical else None
                self.feed_event(parse_event(value, canonical=raw), raw)
        except InputRejected as exc:
            self._block(Rejection(number, exc.code, exc.message, line))

    def accept_header(self, header: dict[str, Any]) -> None:
        """Hook for callers that know more (e.g. a store holding this session); may raise."""

    def feed_event(self, event: dict[str, Any], raw: bytes | None = None) -> None:
        """Validate one parsed event against the fold; raises InputRejected, appends on success.
        A repeat of an event accepted earlier in this log is skipped if it is byte-identical and
        rejected as INGEST_DUPLICATE_CONFLICT otherwise. `raw`: the event's orjson
        serialization, if the caller has it (see `ParsedLog.raws`)."""
        if event["type"] not in KNOWN_EVENT_TYPES:  # the call only where it may reject
            check_event_type(event)
        log = self.log
        seq = event["seq"]
        next_seq = log.state.next_seq
        if seq != next_seq:
            if self.base_seq <= seq < next_seq:
                if dumps(log.events[seq - self.base_seq]) == dumps(event):
                    self.duplicates += 1
                    return
                raise InputRejected(f"seq {seq} already holds a different event",
                                    code=INGEST_DUPLICATE_CONFLICT)
            raise InputRejected(f"seq {seq} is not contiguous; expected {next_seq}",
                                code=INGEST_SEQ_GAP)
        try:
            step = plan(log.state, event)
        except FoldError as exc:
            raise InputRejected(exc.message, code=INGEST_INVALID_SURFACE) from exc
        log.state = step.state
        if self.keep_steps:
            log.steps.append(step)
        log.events.append(event)
        log.raws.append(raw)

    def _reject(self, number: int, code: str, reason: str, line: bytes) -> None:
        self.log.rejections.append(Rejection(number, code, reason, line))

    def _block(self, rejection: Rejection) -> None:
        self.log.rejections.append(rejection)
        self.blocked = True


def parse_log(data: bytes, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> ParsedLog:
    """Parse a whole native log file's bytes (raw or zstd)."""
    try:
        text = decompress(data)
    except zstandard.ZstdError as exc:
        return ParsedLog(header=None, rejections=[Rejection(0, INGEST_CORRUPT_COMPRESSION,
                                                            f"corrupt zstd data: {exc}", data)])
    except InputRejected as exc:
        return ParsedLog(header=None, rejections=[Rejection(0, exc.code, exc.message, data)])
    builder = LogBuilder(max_event_bytes=max_event_bytes)
    for number, line in split_lines(text):
        builder.feed_line(number, line)
    return builder.log


def dump_log(header: Mapping[str, Any], events: list[Mapping[str, Any]]) -> bytes:
    """A native log's bytes: header line, then one event per line."""
    lines = [dumps(dict(header))]
    lines.extend(dumps(dict(e)) for e in events)
    return b"\n".join(lines) + b"\n"
