"""Transport: Kafka records' bytes⇄model boundary (events, documents, dead letters,
request/reply); the JSON inside them is written and read by projections.codec."""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from projections.codec import JSONDecodeError, dumps, loads, loads_canonical
from projections.errors import (
    INGEST_MALFORMED_JSON,
    INGEST_OVERSIZED_EVENT,
    INGEST_SCHEMA_VIOLATION,
    InputRejected,
)
from projections.events import is_chunk_row, parse_event, parse_header
from projections.fold import Replacement
from projections.logformat import expand_chunk_row
from projections.records import EventRecord, HeaderRecord, IndexRecord, record_from_json
from projections.surfaces import Surface


@dataclass(frozen=True, slots=True)
class DecodedHeader:
    """An events-topic record that carried the session header (validated wire dict)."""

    header: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DecodedEvents:
    """An events-topic record that carried one event, or a packed chunk row's expanded events
    (`packed`: then each member's duplicate digest is over its own JSON, not the record bytes).
    `canonical`: the line's bytes are exactly orjson's writing of its one event, so they serve
    as the event's raw JSON without dumping it again (a packed member's own dump serves too)."""

    events: tuple[dict[str, Any], ...]
    packed: bool
    canonical: bool = False


Decoded = DecodedHeader | DecodedEvents


def split_segment(value: bytes | None) -> list[tuple[int, bytes | None]]:
    """An events-topic record value → its lines as (index, bytes): a record is a segment, one
    session's contiguous run of JSONL log lines joined by `\\n` (one line is a segment too).
    The index counts every `\\n`-separated piece; blank pieces are skipped; a trailing `\\r` is
    cut. A value with no line at all (None, empty, blank) is one line, to be rejected whole."""
    if value is None:
        return [(0, None)]
    if b"\n" not in value:
        return [(0, value.rstrip(b"\r") or value)]
    lines: list[tuple[int, bytes | None]] = [
        (i, piece.rstrip(b"\r")) for i, piece in enumerate(value.split(b"\n")) if piece.strip()]
    return lines or [(0, value)]


def encode_segment(lines: Sequence[bytes]) -> bytes:
    """One session's consecutive log lines (each without a newline) as one record value."""
    return b"\n".join(lines)


def decode_event_line(line: bytes | None, *, max_bytes: int) -> Decoded:
    """Decode one line of an events-topic record; raises InputRejected with a stable INGEST_*
    code."""
    if line is None:
        raise InputRejected("record has no value (tombstones are not events)",
                            code=INGEST_SCHEMA_VIOLATION)
    if len(line) > max_bytes:
        raise InputRejected(f"line is {len(line)} bytes; the limit is {max_bytes}",
                            code=INGEST_OVERSIZED_EVENT)
    # Lossless, like the embedded ingest edge: lossy numbers, repeated keys and deep nesting
    # are rejected with the same codes, so both runtimes park the same records.
    parsed, canonical = loads_canonical(line)
    if isinstance(parsed, dict) and parsed.get("type") == "session":
        return DecodedHeader(parse_header(parsed))
    if is_chunk_row(parsed):
        return DecodedEvents(tuple(expand_chunk_row(parsed)), packed=True)
    # A line orjson writes back byte for byte vouches for its own numbers (no walk of `data`).
    return DecodedEvents((parse_event(parsed, canonical=line if canonical else None),),
                         packed=False, canonical=canonical)


def encode_event_value(line: Mapping[str, Any]) -> bytes:
    """A header or event wire dict as one log line (a one-line segment, or part of one)."""
    return dumps(dict(line))


# --- documents topic -------------------------------------------------------------------------

#: An event document written before the array form: its raw event starts after this (the last
#: field), and `,"event":` cannot occur unescaped inside the string values before it.
_EVENT_FIELD = b',"event":'
_SURFACES = {s.value: s for s in Surface}


def encode_document(record: IndexRecord) -> bytes:
    """A header or event index record as one documents-topic line (JSON).

    An event is one array, `[n, sessionId, seq, type, time, surface, text, replacement, event]`,
    with the raw event JSON last, embedded as it is (not parsed and written again) and `n` its
    length in bytes, so a reader takes it by position and parses only the short fields before
    it (cheaper to read and smaller than the object form). A header is the object
    `{"kind":"header","sessionId","header"}`."""
    if isinstance(record, HeaderRecord):
        return dumps(record.to_json())
    rep = record.replacement
    head = dumps([len(record.raw), record.session_id, record.seq, record.type,
                  record.time, record.surface.value, record.text,
                  None if rep is None else rep.to_json()])
    return head[:-1] + b"," + record.raw + b"]"


def decode_document(value: bytes | None) -> IndexRecord:
    """Inverse of `encode_document`; raises InputRejected on bytes that are not a document.
    An event's raw JSON is taken as the bytes it was embedded as (what the index stores). The
    object form of event documents written by earlier versions is read too."""
    if value is None:
        raise InputRejected("a documents record without a value", code=INGEST_SCHEMA_VIOLATION)
    try:
        if value[:1] == b"[":
            return _event_array(value)
        at = value.find(_EVENT_FIELD)
        if at > 0 and value.endswith(b"}") and value[at + 9:at + 10] == b"{":
            fields = loads(value[:at] + b"}")
            if fields.get("kind") == "event":
                return _event_document(fields, value[at + 9:-1])
        return record_from_json(loads(value))
    except (JSONDecodeError, KeyError, ValueError, TypeError) as exc:
        raise InputRejected(f"not a documents-topic record: {exc}",
                            code=INGEST_SCHEMA_VIOLATION) from None


def _event_array(value: bytes) -> EventRecord:
    comma = value.find(b",", 1, 24)
    digits = value[1:comma]
    if comma < 0 or not digits.isdigit():
        raise ValueError("an event document starts with its event's length")
    end = len(value) - 1
    start = end - int(digits)
    if start <= comma or value[end] != 0x5D or value[start - 1] != 0x2C or value[start] != 0x7B:
        raise ValueError("the event's length does not match the document")
    _, sid, seq, kind, time, surface, text, rep = loads(value[:start - 1] + b"]")
    if type(sid) is not str or type(seq) is not int or type(kind) is not str \
            or type(time) is not int or type(text) is not str:
        raise ValueError("a field of the wrong type")
    return EventRecord(sid, seq, kind, time, _SURFACES[surface], text, value[start:end],
                       None if rep is None else Replacement.from_json(rep))


def _event_document(fields: Mapping[str, Any], raw: bytes) -> EventRecord:
    rep = fields["replacement"]
    return EventRecord(str(fields["sessionId"]), int(fields["seq"]), str(fields["type"]),
                       int(fields["time"]), Surface(fields["surface"]), str(fields["text"]), raw,
                       None if rep is None else Replacement.from_json(rep))


def document_key(record: IndexRecord) -> bytes:
    """Key of a document: `sessionId:seq`, or `sessionId:header` for the header."""
    suffix = getattr(record, "seq", "header")
    return f"{record.session_id}:{suffix}".encode()


def pack_documents(records: Sequence[IndexRecord],
                   max_bytes: int) -> Iterator[tuple[bytes, bytes]]:
    """One session's consecutive documents → documents-topic (key, value) records: each value
    the documents' JSON lines (at most `max_bytes`, a longer document alone), keyed by its
    first document (`document_key`). A re-fold emits every later document again from some
    document on, so under compaction each document's latest copy survives."""
    run: list[bytes] = []
    key = b""
    size = 0
    for record in records:
        line = encode_document(record)
        if run and size + 1 + len(line) > max_bytes:
            yield key, b"\n".join(run)
            run, size = [], 0
        if not run:
            key = document_key(record)
        size += len(line) + (1 if run else 0)
        run.append(line)
    if run:
        yield key, b"\n".join(run)


def decode_documents(value: bytes | None) -> list[tuple[int, bytes | None,
                                                        IndexRecord | InputRejected]]:
    """A documents-topic value → (line index, line bytes, document or the rejection) per line."""
    out: list[tuple[int, bytes | None, IndexRecord | InputRejected]] = []
    for index, line in split_segment(value):
        try:
            out.append((index, line, decode_document(line)))
        except InputRejected as exc:
            out.append((index, line, exc))
    return out


# --- dead letters ----------------------------------------------------------------------------

class DeadLetter(BaseModel):
    """A rejected line, parked with its original bytes, source position and reason: `line` is
    its index in the record (a segment of lines; 0 for a one-line record), `value` the bytes of
    that line alone."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    topic: str
    partition: int
    offset: int
    line: int = 0
    key: str | None = Field(description="original key, base64")
    value: str | None = Field(description="original value, base64")
    code: str
    reason: str

    @classmethod
    def of(cls, *, topic: str, partition: int, offset: int, key: bytes | None,
           value: bytes | None, code: str, reason: str, line: int = 0) -> DeadLetter:
        return cls(topic=topic, partition=partition, offset=offset, line=line, key=_b64(key),
                   value=_b64(value), code=code, reason=reason)

    def original_key(self) -> bytes | None:
        return None if self.key is None else base64.b64decode(self.key)

    def original_value(self) -> bytes | None:
        return None if self.value is None else base64.b64decode(self.value)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def encode_dead_letter(letter: DeadLetter) -> bytes:
    return dumps(letter.model_dump(mode="json"))


def decode_dead_letter(value: bytes) -> DeadLetter:
    return DeadLetter.model_validate(loads(value))


def dead_letter_key(letter: DeadLetter) -> bytes:
    """Unique per source line (`topic:partition:offset:line`), so a line parked again after a
    redelivery is recognisable."""
    return f"{letter.topic}:{letter.partition}:{letter.offset}:{letter.line}".encode()


# --- request / reply -------------------------------------------------------------------------

class Request(BaseModel):
    """A query-worker request: `replyTo` names the topic the caller reads its reply from."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    id: str = Field(min_length=1)
    reply_to: str = Field(alias="replyTo", min_length=1)
    op: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    deadline_ms: int = Field(alias="deadlineMs", ge=0)


class ReplyError(BaseModel):
    """The `{code, message}` error shape every CLI and reply uses."""

    model_config = ConfigDict(frozen=True)

    code: str
    message: str


class Reply(BaseModel):
    """The answer to one Request, correlated by `id`; exactly one of result / error is set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    ok: bool
    result: Any = None
    error: ReplyError | None = None


def encode_request(request: Request) -> bytes:
    return dumps(request.model_dump(mode="json", by_alias=True))


def decode_request(value: bytes) -> Request:
    """Raises InputRejected so an unreadable request can be dead-lettered like any record."""
    try:
        return Request.model_validate(loads(value))
    except JSONDecodeError as exc:
        raise InputRejected(f"malformed request JSON: {exc}", code=INGEST_MALFORMED_JSON) from None
    except ValidationError as exc:
        raise InputRejected(f"request violates the schema: {exc.errors()[0].get('msg')}",
                            code=INGEST_SCHEMA_VIOLATION) from None


def encode_reply(reply: Reply) -> bytes:
    """`{id, ok:true, result}` or `{id, ok:false, error:{code, message}}`."""
    if reply.ok:
        return dumps({"id": reply.id, "ok": True, "result": reply.result})
    assert reply.error is not None
    return dumps({"id": reply.id, "ok": False, "error": reply.error.model_dump()})


def decode_reply(value: bytes) -> Reply:
    return Reply.model_validate(loads(value))


def ok_reply(request_id: str, result: Any) -> Reply:
    return Reply(id=request_id, ok=True, result=result)


def error_reply(request_id: str, code: str, message: str) -> Reply:
    return Reply(id=request_id, ok=False, error=ReplyError(code=code, message=message))
