"""Transport: one events-topic record → fold-table writes, documents or rejections (no Kafka).

A record is a segment: one session's contiguous run of log lines (streams.runtime.kafka.codec.split_segment).
Each line is decided alone, exactly as if it had come in a record of its own: a bad line is
rejected by itself and changes nothing, the lines around it fold as they would have. The fold
loops are thin loops around `FoldProcessor.fold_record`; everything decided per line lives here
so it is unit-testable with a dict as the table.

Table layout, per session id `sid` (keys are `sid + "\\x00" + suffix`, so one session's keys all
follow the session's partition):
  h          the session header (JSON)
  m, p<i>    the paged fold state of `projections.fold` (meta + pages); written meta last
  d          digests of the last DIGEST_WINDOW accepted events: `[first_seq, digest, ...]`
An event changes the meta, the page(s) it touched and the small digest window; they are encoded
once per record and written once per batch per session. Table bytes per event stay flat however
long the session grows.

One more key per events partition `k`, `"\\x00next\\x00<k>"`, holds the next events-topic offset
the fold reads on that partition (written last in every batch, pinned to changelog partition k):
the fold's own read position, recovered with the state it describes (see
streams.runtime.kafka.partitions and streams.runtime.kafka.folding).
"""

from __future__ import annotations

import hashlib
from binascii import b2a_base64
from collections import Counter, OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from projections.codec import dumps, loads
from projections.errors import (
    INGEST_DUPLICATE_CONFLICT,
    INGEST_HEADER_CONFLICT,
    INGEST_INVALID_SURFACE,
    INGEST_MISSING_HEADER,
    INGEST_SCHEMA_VIOLATION,
    INGEST_SEQ_GAP,
    FoldError,
    InputRejected,
)
from projections.events import header_key_fields
from projections.fold import SurfaceState, decode_state, encode_meta, encode_page, plan
from projections.logformat import check_event_type
from projections.records import HeaderRecord, IndexRecord, event_record
from projections.redaction import NO_REDACTION, Redactor
from streams.runtime.kafka.codec import DecodedHeader, decode_event_line, split_segment

SEP = "\x00"
#: How many recent seqs per session keep a digest. Redelivered events older than this are
#: ignored unverified (counted): faust redelivers what it already applied, so they are almost
#: always exact duplicates, and verifying them would need per-seq state that grows forever.
DIGEST_WINDOW = 32
#: A fold state that cannot be decoded (e.g. a half-written changelog). Not an input error, but
#: the record is still parked rather than dropped.
STATE_CORRUPT = "INGEST_STATE_CORRUPT"


class StateView(Protocol):
    """Read access to the fold table (a faust Table, a dict, or an Overlay)."""

    def get(self, key: str, default: None = None) -> bytes | None: ...


def table_key(session_id: str, suffix: str) -> str:
    return f"{session_id}{SEP}{suffix}"


def position_key(partition: int) -> str:
    """The table key of events partition `partition`'s next offset to fold (no session id is
    empty, so it cannot collide with a session's keys)."""
    return f"{SEP}next{SEP}{partition}"


def encode_position(offset: int) -> bytes:
    return str(offset).encode("ascii")


def read_position(view: StateView, partition: int) -> int | None:
    """The next events offset to fold on `partition`, as recorded in the table (None: never)."""
    raw = view.get(position_key(partition))
    return None if raw is None else int(raw)


def digest(raw: bytes) -> str:
    # base64 of 9 bytes: 12 characters, no padding (binascii: base64.b64encode without its checks)
    return b2a_base64(hashlib.blake2b(raw, digest_size=9).digest(), newline=False).decode("ascii")


#: A digest window entry: the digest, or (while a record folds) the accepted event's JSON whose
#: digest is taken only if it is still in the window when the record's writes are encoded or a
#: redelivery is checked against it (a 250-event segment digests its last 32 events, not 250).
Mark = str | bytes


def resolve(mark: Mark) -> str:
    return digest(mark) if isinstance(mark, bytes) else mark


class Loaded(NamedTuple):  # rebuilt per accepted line: a NamedTuple is the cheap immutable
    """A session's decoded state as of `meta`, with its digest window."""

    meta: bytes
    state: SurfaceState
    first_seq: int
    digests: tuple[Mark, ...]

    def digest_of(self, seq: int) -> str | None:
        i = seq - self.first_seq
        return resolve(self.digests[i]) if 0 <= i < len(self.digests) else None


def encode_digests(first_seq: int, digests: tuple[Mark, ...]) -> bytes:
    return dumps([first_seq, *map(resolve, digests)])


def decode_digests(raw: bytes | None, next_seq: int) -> tuple[int, tuple[str, ...]]:
    """The window, cut at `next_seq`: entries past it come from a torn write and never counted."""
    if raw is None:
        return next_seq, ()
    first, *rest = loads(raw)
    return int(first), tuple(str(d) for d in rest[:max(0, next_seq - int(first))])


@dataclass(slots=True)
class FoldOutcome:
    """What one line did. `writes` are table records to apply in order (None deletes);
    `rejection` set means: park the line, change nothing."""

    writes: dict[str, bytes | None] = field(default_factory=dict)
    documents: list[IndexRecord] = field(default_factory=list)
    rejection: InputRejected | None = None
    duplicates: int = 0


@dataclass(slots=True)
class _Session:
    """One session while the lines of a record fold: its state in memory, and what the table
    must get once the record is done (a new header, the pages touched, digests, the meta)."""

    sid: str
    loaded: Loaded | None = None
    header: bytes | None = None
    dirty: set[int] = field(default_factory=set)
    pages_seen: int = 0
    changed: bool = False

    def writes(self) -> dict[str, bytes | None]:
        """The table records of the session's new state, the meta last (the commit point)."""
        assert self.loaded is not None
        state = self.loaded.state
        out: dict[str, bytes | None] = {}
        if self.header is not None:
            out[table_key(self.sid, "h")] = self.header
        for i in sorted(self.dirty):
            if i < len(state.pages):
                out[table_key(self.sid, f"p{i}")] = encode_page(state.pages[i])
        for i in range(len(state.pages), self.pages_seen):
            out[table_key(self.sid, f"p{i}")] = None
        if self.loaded.digests:
            digests = tuple(map(resolve, self.loaded.digests))
            # the cache keeps digests, not the record's bytes
            self.loaded = self.loaded._replace(digests=digests)
            out[table_key(self.sid, "d")] = encode_digests(self.loaded.first_seq, digests)
        out[table_key(self.sid, "m")] = encode_meta(state)
        return out


class LineOutcome(NamedTuple):  # one per line: a NamedTuple builds faster than a frozen dataclass
    """One line of a record: its number (index) in the record, its bytes, and what it did (its
    writes are already in the overlay the record was folded onto)."""

    number: int
    raw: bytes | None
    outcome: FoldOutcome


class FoldProcessor:
    """Folds events-topic records into per-session state; keeps a decoded-state cache that is
    validated against the table's meta record, so it never outlives a rebalance's changes."""

    def __init__(self, *, max_event_bytes: int, cache_size: int = 4096,
                 redactor: Redactor = NO_REDACTION) -> None:
        self.max_event_bytes = max_event_bytes
        self.redactor = redactor
        self.cache_size = cache_size
        self._cache: OrderedDict[str, Loaded] = OrderedDict()
        self.stats: Counter[str] = Counter()

    def fold_record(self, overlay: Overlay, key: bytes | None,
                    value: bytes | None) -> list[LineOutcome]:
        """Fold every line of one record onto `overlay`, in order; never raises for bad input.
        Each line is decided against the state the lines before it left; the session's table
        writes are encoded once, after the last line, and put in the overlay."""
        lines = split_segment(value)
        try:
            sid = _session_id(key)
        except InputRejected as exc:
            self.stats[f"rejected:{exc.code}"] += len(lines)
            return [LineOutcome(index, raw, FoldOutcome(rejection=exc)) for index, raw in lines]
        session = _Session(sid)
        # one scan of the whole segment finds the lines redaction may touch (the rest skip it)
        hinted = self.redactor.hinted_lines(value) if value else None
        out = []
        for index, raw in lines:
            try:
                outcome = self._fold_line(overlay, session, raw,
                                          quiet=hinted is not None and index not in hinted)
            except InputRejected as exc:
                self.stats[f"rejected:{exc.code}"] += 1
                outcome = FoldOutcome(rejection=exc)
            else:
                if outcome.duplicates:
                    self.stats["duplicates"] += outcome.duplicates
            out.append(LineOutcome(index, raw, outcome))
        if session.changed:
            writes = session.writes()
            overlay.put(writes)
            assert session.loaded is not None
            meta = writes[table_key(sid, "m")]
            assert meta is not None
            self._remember(sid, Loaded(meta, session.loaded.state, session.loaded.first_seq,
                                       session.loaded.digests))
        return out

    def fold_line(self, view: StateView, key: bytes | None, value: bytes | None) -> FoldOutcome:
        """Decide one line against `view` alone; its `writes` are the table records it changes
        (meta last). For tests and one-off callers; loops use `fold_record`."""
        overlay = Overlay(view)
        lines = self.fold_record(overlay, key, value)
        if len(lines) != 1:
            raise ValueError("fold_line takes one line; fold_record takes a segment")
        outcome = lines[0].outcome
        if outcome.rejection is None:
            outcome.writes = dict(overlay.drain())
        return outcome

    def _fold_line(self, view: StateView, session: _Session, raw: bytes | None, *,
                   quiet: bool = False) -> FoldOutcome:
        """`quiet`: the line holds no redaction hint (`Redactor.hinted_lines`)."""
        decoded = decode_event_line(raw, max_bytes=self.max_event_bytes)
        sid = session.sid
        if isinstance(decoded, DecodedHeader):
            return self._fold_header(view, session, decoded.header)
        if session.loaded is None:
            session.loaded = self._load(view, sid)
            if session.loaded is None:
                raise InputRejected(f"session {sid!r} has no header yet; the header record must "
                                    "come first", code=INGEST_MISSING_HEADER)
            session.pages_seen = len(session.loaded.state.pages)
        loaded = session.loaded
        state, first_seq, digests = loaded.state, loaded.first_seq, loaded.digests
        dirty: list[int] = []
        pages_seen = session.pages_seen
        out = FoldOutcome()
        # redaction would find nothing in a quiet line that is its event's own JSON
        redactor = NO_REDACTION if quiet and decoded.canonical else self.redactor
        for event in decoded.events:
            line = dumps(event) if decoded.packed else raw
            assert line is not None
            check_event_type(event)
            seq = event["seq"]
            if seq < state.next_seq:
                self._check_duplicate(seq, digest(line), first_seq, digests)
                out.duplicates += 1
                continue
            if seq > state.next_seq:
                raise InputRejected(f"seq {seq} is not contiguous; expected {state.next_seq}",
                                    code=INGEST_SEQ_GAP)
            try:
                step = plan(state, event)
            except FoldError as exc:
                raise InputRejected(exc.message, code=INGEST_INVALID_SURFACE) from exc
            state = step.state
            dirty.extend(step.dirty_pages)
            pages_seen = max(pages_seen, step.page_count_before)
            digests = (*digests, line)[-DIGEST_WINDOW:]
            first_seq = state.next_seq - len(digests)
            # the bytes just digested are the event's own JSON when orjson wrote them (a packed
            # member) or would write them back exactly (a canonical line): no second dump
            out.documents.append(event_record(
                sid, event, step, redactor=redactor,
                raw=line if decoded.packed or decoded.canonical else None))
        if out.documents:  # the whole line was accepted: it becomes the session's state
            session.loaded = Loaded(loaded.meta, state, first_seq, digests)
            session.dirty.update(dirty)
            session.pages_seen = pages_seen
            session.changed = True
            self.stats["events"] += len(out.documents)
        return out

    def _fold_header(self, view: StateView, session: _Session,
                     header: dict[str, Any]) -> FoldOutcome:
        sid = session.sid
        if header["id"] != sid:
            raise InputRejected(f"header id {header['id']!r} does not match the record key "
                                f"{sid!r}", code=INGEST_SCHEMA_VIOLATION)
        known = session.header if session.header is not None else view.get(table_key(sid, "h"))
        if known is not None:
            if header_key_fields(loads(known)) != header_key_fields(header):
                raise InputRejected(f"session {sid!r} already has a different header",
                                    code=INGEST_HEADER_CONFLICT)
            return FoldOutcome(duplicates=1)
        self.stats["headers"] += 1
        session.header = dumps(header)
        session.loaded = Loaded(b"", SurfaceState(), 0, ())
        session.pages_seen = 0
        session.changed = True
        return FoldOutcome(documents=[HeaderRecord(sid, header)])

    def _check_duplicate(self, seq: int, mark: str, first_seq: int,
                         digests: tuple[Mark, ...]) -> None:
        i = seq - first_seq
        if not 0 <= i < len(digests):
            self.stats["duplicates_unverified"] += 1
        elif resolve(digests[i]) != mark:
            raise InputRejected(f"seq {seq} was already accepted with different content",
                                code=INGEST_DUPLICATE_CONFLICT)

    def _load(self, view: StateView, sid: str) -> Loaded | None:
        meta = view.get(table_key(sid, "m"))
        if meta is None:
            return None
        cached = self._cache.get(sid)
        if cached is not None and cached.meta == meta:
            self._cache.move_to_end(sid)
            return cached
        try:
            count = int(loads(meta)["p"])
            records: dict[str, bytes] = {"m": meta}
            for i in range(count):
                page = view.get(table_key(sid, f"p{i}"))
                if page is not None:
                    records[f"p{i}"] = page
            state = _drop_torn_nodes(decode_state(records))
            first_seq, digests = decode_digests(view.get(table_key(sid, "d")), state.next_seq)
        except (FoldError, KeyError, ValueError, TypeError) as exc:
            raise InputRejected(f"fold state of session {sid!r} is unreadable: {exc}",
                                code=STATE_CORRUPT) from None
        loaded = Loaded(meta, state, first_seq, digests)
        self._remember(sid, loaded)
        return loaded

    def _remember(self, sid: str, loaded: Loaded) -> None:
        self._cache[sid] = loaded
        self._cache.move_to_end(sid)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)


def _session_id(key: bytes | None) -> str:
    if not key:
        raise InputRejected("record key must be the session id", code=INGEST_SCHEMA_VIOLATION)
    try:
        sid = key.decode("utf-8")
    except UnicodeDecodeError:
        raise InputRejected("record key is not UTF-8", code=INGEST_SCHEMA_VIOLATION) from None
    if SEP in sid:
        raise InputRejected("record key must not contain NUL", code=INGEST_SCHEMA_VIOLATION)
    return sid


def _drop_torn_nodes(state: SurfaceState) -> SurfaceState:
    """Undo a torn append: pages are written before the meta, so a crash in between leaves a
    node the meta does not count yet; the redelivered event will append it again."""
    if all(n.seq < state.next_seq for page in state.pages for n in page):
        return state
    pages = tuple(tuple(n for n in page if n.seq < state.next_seq) for page in state.pages)
    return SurfaceState(state.next_seq, state.generation, tuple(p for p in pages if p))


class Overlay:
    """Pending writes over a table, for batch processing: reads see earlier records' writes;
    `drain` yields each key's final value once, meta records last (the commit point)."""

    def __init__(self, table: StateView) -> None:
        self.table = table
        self.pending: dict[str, bytes | None] = {}

    def get(self, key: str, default: None = None) -> bytes | None:
        if key in self.pending:
            return self.pending[key]
        return self.table.get(key)

    def put(self, writes: Mapping[str, bytes | None]) -> None:
        self.pending.update(writes)

    def drain(self) -> Iterator[tuple[str, bytes | None]]:
        metas = [(k, v) for k, v in self.pending.items() if k.endswith(SEP + "m")]
        yield from ((k, v) for k, v in self.pending.items() if not k.endswith(SEP + "m"))
        yield from metas
        self.pending.clear()
