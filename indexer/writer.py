"""Storage and read side: apply index records to one shard inside the caller's transaction.

Idempotent by (session_id, seq): the same record twice is a no-op, so replaying a topic from an
older position is harmless; a different record under an existing key is a SourceConflict.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from indexer.blocks import BlockWriter, read_raws
from indexer.database import Conn
from indexer.errors import INDEX_FAILED, SourceConflict, query_error
from indexer.schema import (
    BLOCK_EVENTS,
    CJK,
    CURRENT,
    EVENT_JOINS,
    FIRST_EXTENT,
    MAX_EXTENT,
    MAX_SESSIONS,
    SEQ,
    SEQ_MASK,
    SHADOWED,
    SURFACE_CODES,
    TRIGRAM_DOCS,
    block_id,
    document_id,
    kind,
)
from indexer.semantic import Embedder, embeds_type, load_embedder
from indexer.text import has_cjk, text_of
from indexer.vectorsetting import OFF
from projections.calls import ASSISTANT_MESSAGE, TOOL_CALL, calls_only, named_call
from projections.codec import dumps, dumps_sorted, loads
from projections.events import header_key_fields
from projections.records import EventRecord, HeaderRecord, IndexRecord
from projections.redaction import count_markers
from projections.surfaces import Surface
from projections.titles import (
    CLAUDE_AGENT,
    SUMMARY_EVENT,
    TITLE_EVENT,
    agent_of,
    is_prompt,
    own_title,
    record_uuid,
    shorten,
    source_code,
    summary_of,
    uuid_key,
)


class ShardWriter:
    """Writes into one shard (its writer connection), caching session numbers, type codes and
    extents. The caches describe committed state plus the open transaction; `reset` after a
    rollback."""

    def __init__(self, conn: Conn, epoch: str, *, substring: bool,
                 semantic: str = OFF) -> None:
        self.conn = conn
        self.epoch = epoch
        self.substring = substring
        #: the shard's vectors setting: events of the types it names get vectors
        self.semantic = semantic
        self._embedder: Embedder | None = None
        #: text → its vectors, embedded before the transaction opened (`embed_ahead`)
        self.ahead: dict[str, list[bytes]] = {}
        self.blocks = BlockWriter(conn, epoch)
        self._sessions: dict[str, int] = {}
        self._types: dict[str, int] = {}
        self._extents: dict[int, list[tuple[int, int, int]]] = {}  # no → [(seq, first, size)]
        self._next_id: int | None = None

    def reset(self) -> None:
        self._sessions.clear()
        self._types.clear()
        self._extents.clear()
        self._next_id = None
        self.blocks.reset()

    def session_no(self, session_id: str, *, create: bool = True) -> int | None:
        found = self._sessions.get(session_id)
        if found is not None:
            return found
        row = self.conn.execute("SELECT no FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            if not create:
                return None
            self.conn.execute("INSERT INTO sessions(id, agent) VALUES (?, ?)",
                              (session_id, agent_of(session_id)))
            number = int(self.conn.last_insert_rowid())
            if number >= MAX_SESSIONS:
                raise query_error(INDEX_FAILED, f"a shard holds at most {MAX_SESSIONS} sessions",
                                  hint="reindex with more shards (RECALL_SHARDS)")
        else:
            number = int(row[0])
        self._sessions[session_id] = number
        return number

    def type_code(self, name: str) -> int:
        found = self._types.get(name)
        if found is None:
            self.conn.execute("INSERT OR IGNORE INTO types(name) VALUES (?)", (name,))
            found = int(self.conn.execute("SELECT code FROM types WHERE name = ?",
                                          (name,)).fetchone()[0])
            self._types[name] = found
        return found

    def _session_extents(self, session: int) -> list[tuple[int, int, int]]:
        found = self._extents.get(session)
        if found is None:
            found = self._extents[session] = [
                (int(a), int(b), int(c)) for a, b, c in self.conn.execute(
                    "SELECT seq, first, size FROM extents WHERE session = ? ORDER BY seq",
                    (session,))]
        return found

    def event_id(self, session: int, seq: int, *, allocate: bool = False) -> int | None:
        """The id of (session, seq): from its extent, or (`allocate`) from a new extent."""
        extents = self._extents.get(session)
        if extents is None:
            extents = self._session_extents(session)
        elif extents:
            start, first, size = extents[-1]  # appends land in the last extent
            if start <= seq < start + size:
                return first + seq - start
        at = bisect.bisect_right(extents, (seq, 1 << 62, 0)) - 1
        if at >= 0:
            start, first, size = extents[at]
            if seq < start + size:
                return first + seq - start
        if not allocate:
            return None
        size = FIRST_EXTENT if not extents else min(MAX_EXTENT, 2 * extents[-1][2])
        if at + 1 < len(extents):  # filling a gap: never overlap the next extent
            size = min(size, extents[at + 1][0] - seq)
        if self._next_id is None:
            row = self.conn.execute("SELECT max(first + size) FROM extents").fetchone()
            self._next_id = int(row[0] or 1)
        first = self._next_id
        self._next_id += size
        self.conn.execute("INSERT INTO extents(first, session, seq, size) VALUES (?, ?, ?, ?)",
                          (first, session, seq, size))
        extents.insert(at + 1, (seq, first, size))
        return first

    def embeds(self, kind_: str) -> bool:
        return self.semantic != OFF and embeds_type(kind_, self.semantic)

    def insert_vectors(self, docs: list[tuple[int, str]]) -> None:
        """Vectors of (event id, text) — the redacted text the FTS rows get — beside them."""
        if not docs:
            return
        ahead = self.ahead
        missing = list(dict.fromkeys(text for _, text in docs if text not in ahead))
        if missing:  # (not embedded ahead: a replay's changed event, a direct apply_records)
            if self._embedder is None:
                self._embedder = load_embedder()
            ahead = {**ahead, **dict(zip(missing, self._embedder.embed_many(missing),
                                         strict=True))}
        rows = [(eid, vector) for eid, text in docs for vector in ahead[text]]
        if rows:
            self.conn.executemany("INSERT INTO vectors(event, v) VALUES (?, ?)", rows)

    def raw(self, session: int, seq: int) -> bytes | None:
        return self.blocks.read(block_id(session, seq)).get(seq & (BLOCK_EVENTS - 1))


#: Event types whose raw event the writer reads for the listing (titles, prompts, sources).
_NAMING = frozenset({"user/message", TITLE_EVENT, SUMMARY_EVENT})
#: ... and, in Claude Code sessions, the types whose record uuid a summary's leaf can name.
_CLAUDE_RECORDS = frozenset({"user/message", "assistant/message", "tool/result"})


@dataclass(frozen=True, slots=True)
class Facts:
    """What one event tells the listing about its session (projections/titles.py)."""

    source: int = 0
    title: str | None = None
    prompt: str | None = None
    summary: tuple[int, str] | None = None  # (leaf uuid key, summary)
    uuid: int | None = None


_NO_FACTS = Facts()


def facts_of(record: EventRecord) -> Facts:
    """The listing facts of a record; the raw event is parsed only for the few types that
    carry any (so most events cost a set lookup)."""
    kind_ = record.type
    claude = kind_ in _CLAUDE_RECORDS and agent_of(record.session_id) == CLAUDE_AGENT
    if kind_ not in _NAMING and not claude:
        return _NO_FACTS
    event = loads(record.raw)
    source = source_code(event)
    prompt = None
    if is_prompt(kind_, source) and record.text.strip():
        prompt = shorten(record.text)
    summary = summary_of(event)
    uuid = record_uuid(event) if claude else None
    return Facts(source, own_title(event), prompt,
                 None if summary is None else (uuid_key(summary[0]), summary[1]),
                 None if uuid is None else uuid_key(uuid))


_TITLE = ("UPDATE sessions SET title = ?, title_seq = ? WHERE no = ?"
          " AND (title_seq IS NULL OR title_seq < ?)")
_PROMPT = ("UPDATE sessions SET prompt = ?, prompt_seq = ? WHERE no = ?"
           " AND (prompt_seq IS NULL OR prompt_seq > ?)")
# One summary per leaf, the latest by (time, session id, seq) whatever order they arrive in.
_SUMMARY = ("INSERT INTO summaries(leaf, title, time, session, seq) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT(leaf) DO UPDATE SET title = excluded.title, time = excluded.time,"
            " session = excluded.session, seq = excluded.seq WHERE (excluded.time,"
            " excluded.session, excluded.seq) > (summaries.time, summaries.session, summaries.seq)")
_UUID = ("INSERT INTO uuids(key, session, seq) VALUES (?, ?, ?)"
         " ON CONFLICT(key, session) DO UPDATE SET seq = max(seq, excluded.seq)")


class _Naming:
    """Listing facts of a run of events, written with one statement per kind of fact."""

    def __init__(self) -> None:
        self.titles: dict[int, tuple[int, str]] = {}  # session → (seq, title), the latest
        self.prompts: dict[int, tuple[int, str]] = {}  # session → (seq, prompt), the first
        self.summaries: list[tuple[int, str, int, str, int]] = []
        self.uuids: list[tuple[int, int, int]] = []

    def add(self, session: int, record: EventRecord, facts: Facts) -> None:
        seq = record.seq
        if facts.title is not None and seq >= self.titles.get(session, (-1, ""))[0]:
            self.titles[session] = (seq, facts.title)
        if facts.prompt is not None and (session not in self.prompts
                                         or seq < self.prompts[session][0]):
            self.prompts[session] = (seq, facts.prompt)
        if facts.summary is not None:
            leaf, title = facts.summary
            self.summaries.append((leaf, title, record.time, record.session_id, seq))
        if facts.uuid is not None:
            self.uuids.append((facts.uuid, session, seq))

    def flush(self, conn: Conn) -> None:
        if self.titles:
            conn.executemany(_TITLE, [(t, q, no, q) for no, (q, t) in self.titles.items()])
        if self.prompts:
            conn.executemany(_PROMPT, [(p, q, no, q) for no, (q, p) in self.prompts.items()])
        if self.summaries:
            conn.executemany(_SUMMARY, self.summaries)
        if self.uuids:
            conn.executemany(_UUID, self.uuids)
        self.titles, self.prompts, self.summaries, self.uuids = {}, {}, [], []


def _check_seq(record: EventRecord) -> None:
    if not 0 <= record.seq <= SEQ_MASK:
        raise query_error(INDEX_FAILED, f"seq {record.seq} of session {record.session_id!r} is "
                          f"outside the index's range 0..{SEQ_MASK}")


def apply_header(w: ShardWriter, record: HeaderRecord) -> bool:
    """Store a header; True if it changed the shard. Key-field disagreement is a SourceConflict."""
    header = dict(record.header)
    row = w.conn.execute("SELECT header FROM sessions WHERE id = ?",
                         (record.session_id,)).fetchone()
    if row is not None and row[0] is not None:
        if header_key_fields(loads(row[0])) != header_key_fields(header):
            raise SourceConflict(f"header of session {record.session_id!r} disagrees with the "
                                 "indexed header", session_id=record.session_id, seq=None)
        return False
    w.session_no(record.session_id)
    w.conn.execute(
        "UPDATE sessions SET header = ?, cwd = ?, created_at = ?, parent = ?, seed_length = ?,"
        " delegation_depth = ?, revision = revision + 1,"
        " last_event_time = COALESCE(last_event_time, ?) WHERE id = ?",
        (dumps_sorted(header).decode("utf-8"), header.get("cwd"),
         header.get("createdAt"), header.get("parentSession"), header.get("seedLength"),
         header.get("delegationDepth") or 0, header.get("createdAt"), record.session_id))
    return True


def _start_order_key(w: ShardWriter, session: int, record: EventRecord,
                     pending: Callable[[int], Any] | None = None) -> int:
    """The surface position a replacement takes: its range start's (PROTOCOL §2, step 5)."""
    rep = record.replacement
    assert rep is not None
    start = pending(rep.start) if pending is not None else None
    if start is None:
        eid = w.event_id(session, rep.start)
        row = None if eid is None else w.conn.execute(
            "SELECT order_key FROM events WHERE id = ?", (eid,)).fetchone()
        start = None if row is None else row[0]
    if start is None:
        raise SourceConflict(f"replacement {record.seq} of session {record.session_id!r} starts "
                             f"at seq {rep.start}, which is not on the indexed surface",
                             session_id=record.session_id, seq=record.seq)
    return int(start)


def _shadow(w: ShardWriter, session: int, seqs: Iterable[int]) -> None:
    ids = [(eid,) for eid in (w.event_id(session, s) for s in seqs) if eid is not None]
    w.conn.executemany(f"UPDATE events SET kind = (kind & ~3) | {SHADOWED} WHERE id = ?", ids)


# Bulk statements take their rows as ONE JSON array bound to one parameter, so SQLite inserts
# the whole run in one sqlite3_step with the GIL released. executemany binds row by row and
# needs the GIL back between rows: with a busy Python thread beside it (the ingest's reader),
# each row then waits up to a GIL switch interval (so a batch is many times slower beside a
# spinning thread, while json_each runs close to its speed alone at a short switch interval).
_FTS_ROWS = "INSERT INTO {table}(rowid, text) SELECT value ->> 0, value ->> 1 FROM json_each(?)"
_EVENT_ROWS = ("INSERT INTO events(id, kind, time, order_key, len) SELECT value ->> 0,"
               " value ->> 1, value ->> 2, value ->> 3, value ->> 4 FROM json_each(?)")


def _insert_documents(w: ShardWriter, docs: list[tuple[int, str, bool]]) -> None:
    """FTS entries for (event id, text, cjk) of new events with text."""
    if not docs:
        return
    rows = [(document_id(e, len(t)), t) for e, t, _ in docs]
    w.conn.execute(_FTS_ROWS.format(table="events_fts"), (dumps(rows),))
    tri = [(document_id(e, len(t)), t) for e, t, cjk in docs if cjk or w.substring]
    if tri:
        _count_trigram_docs(w.conn, len(tri))
        w.conn.execute(_FTS_ROWS.format(table="events_tri"), (dumps(tri),))


_CALL_TYPES = frozenset({TOOL_CALL, ASSISTANT_MESSAGE})
_CALLS = ("INSERT INTO calls(session, call, uses, seq) SELECT value ->> 0, value ->> 1,"
          " value ->> 2, value ->> 3 FROM json_each(?)")
#: In an event's raw JSON whenever it carries sourceEventSeqs (the `citing` table's test).
_CITES = b'"sourceEventSeqs"'
_CITING = "INSERT INTO citing(session, seq) SELECT value ->> 0, value ->> 1 FROM json_each(?)"


def call_rows(session: int, record: EventRecord) -> list[tuple[int, str, int, int]]:
    """The `calls` rows of one event of a _CALL_TYPES type (indexer/schema.py)."""
    raw = record.raw
    if record.type == TOOL_CALL:
        call = named_call(loads(raw))
        return [] if call is None else [(session, call, 0, record.seq)]
    if b'"tool-call"' not in raw:  # no call block: spare the parse
        return []
    return [(session, c, 1, record.seq) for c in dict.fromkeys(calls_only(loads(raw)))]


_INSERT_EVENT = "INSERT INTO events(id, kind, time, order_key, len) VALUES (?, ?, ?, ?, ?)"
_TOTALS = ("UPDATE sessions SET event_count = event_count + ?, revision = revision + ?,"
           " last_event_time = max(COALESCE(last_event_time, ?), ?), top_seq = max(top_seq, ?),"
           " first_event_time = min(COALESCE(first_event_time, ?), ?) WHERE no = ?")


def apply_event(w: ShardWriter, record: EventRecord) -> bool:
    """Store one event (its row, block entry and FTS entries); True if it changed the shard."""
    _check_seq(record)
    sid, seq = record.session_id, record.seq
    session = w.session_no(sid)
    assert session is not None
    stored = w.raw(session, seq)
    if stored is not None:
        if loads(stored) != loads(record.raw):
            raise SourceConflict(f"event {seq} of session {sid!r} differs from the indexed one",
                                 session_id=sid, seq=seq)
        return False
    order_key: int | None = seq if record.surface is Surface.CURRENT else None
    rep = record.replacement
    if rep is not None:
        order_key = _start_order_key(w, session, record)
        _shadow(w, session, rep.shadowed_seqs)
    cjk = has_cjk(record.text)
    facts = facts_of(record)
    eid = w.event_id(session, seq, allocate=True)
    assert eid is not None
    w.conn.execute(_INSERT_EVENT, (eid, kind(w.type_code(record.type), cjk,
                                             SURFACE_CODES[record.surface.value], facts.source),
                                   record.time, order_key, len(record.text)))
    block = block_id(session, seq)
    entries = w.blocks.read(block)
    entries[seq & (BLOCK_EVENTS - 1)] = record.raw
    w.blocks.write({block: entries})
    if record.text:
        _insert_documents(w, [(eid, record.text, cjk)])
        if w.embeds(record.type):
            w.insert_vectors([(eid, record.text)])
    w.conn.execute(_TOTALS, (1, 1, record.time, record.time, seq, record.time, record.time,
                             session))
    calls = call_rows(session, record) if record.type in _CALL_TYPES else None
    if calls:
        w.conn.execute(_CALLS, (dumps(calls),))
    if _CITES in record.raw:
        w.conn.execute(_CITING, (dumps([(session, seq)]),))
    if facts is not _NO_FACTS:
        naming = _Naming()
        naming.add(session, record, facts)
        naming.flush(w.conn)
    return True


class _Appends:
    """A run of fresh appends — each event's seq above everything stored or already batched for
    its session — written with a few set-based statements instead of several per event.

    The rows, block entries, FTS entries, surfaces, order keys and session totals are exactly
    what `apply_event` one record at a time produces; replays and conflicts never enter a batch
    (the caller flushes and takes the per-row path for them)."""

    def __init__(self, w: ShardWriter) -> None:
        self.w = w
        self.rows: list[list[Any]] = []  # [id, type code, cjk, surface, time, order key, len,
        #                                    source code]
        self.at: dict[tuple[int, int], int] = {}  # (session, seq) → index in rows
        self.raws: dict[int, dict[int, bytes]] = {}  # block → index in block → raw
        self.docs: list[tuple[int, str, bool]] = []
        self.vectors: list[tuple[int, str]] = []  # (event id, text) to embed
        self.totals: dict[int, list[int]] = {}  # session → [events, latest, top seq, earliest]
        self.naming = _Naming()
        self.top: dict[str, int] = {}  # session → highest seq stored or batched (-1: none)
        self.claude: dict[str, bool] = {}  # session → written by Claude Code
        self.calls: list[tuple[int, str, int, int]] = []
        self.citing: list[tuple[int, int]] = []

    def _claude(self, session_id: str) -> bool:
        found = self.claude.get(session_id)
        if found is None:
            found = self.claude[session_id] = agent_of(session_id) == CLAUDE_AGENT
        return found

    def is_fresh(self, record: EventRecord) -> bool:
        sid = record.session_id
        top = self.top.get(sid)
        if top is None:
            row = self.w.conn.execute("SELECT top_seq FROM sessions WHERE id = ?",
                                      (sid,)).fetchone()
            top = self.top[sid] = -1 if row is None else int(row[0])
        return record.seq > top

    def add(self, record: EventRecord) -> None:
        # The hot loop of ingest (one call per event, holding the GIL the reader thread also
        # needs): cached lookups first, the general helpers only on a miss.
        seq = record.seq
        if not 0 <= seq <= SEQ_MASK:
            _check_seq(record)
        w = self.w
        sid = record.session_id
        session = w._sessions.get(sid)
        if session is None:
            session = w.session_no(sid)
            assert session is not None
        surface = record.surface
        order_key: int | None = seq if surface is Surface.CURRENT else None
        rep = record.replacement
        if rep is not None:
            def pending(start: int) -> Any:
                at = self.at.get((session, start))
                return None if at is None else self.rows[at][5]
            order_key = _start_order_key(w, session, record, pending)
            stored = []
            for shadowed in rep.shadowed_seqs:
                at = self.at.get((session, shadowed))
                if at is not None:
                    self.rows[at][3] = SHADOWED
                else:
                    stored.append(shadowed)
            _shadow(w, session, stored)
        text = record.text
        cjk = has_cjk(text) if text else False
        kind_ = record.type
        if kind_ in _NAMING or (kind_ in _CLAUDE_RECORDS and self._claude(sid)):
            facts = facts_of(record)
            if facts is not _NO_FACTS:
                self.naming.add(session, record, facts)
            source = facts.source
        else:
            source = 0  # facts_of would return _NO_FACTS
        if kind_ in _CALL_TYPES:
            self.calls.extend(call_rows(session, record))
        if _CITES in record.raw:
            self.citing.append((session, seq))
        eid = w.event_id(session, seq, allocate=True)
        assert eid is not None
        type_code = w._types.get(kind_)
        if type_code is None:
            type_code = w.type_code(kind_)
        self.at[(session, seq)] = len(self.rows)
        self.rows.append([eid, type_code, cjk,
                          CURRENT if surface is Surface.CURRENT else SURFACE_CODES[surface.value],
                          record.time, order_key, len(text), source])
        block = block_id(session, seq)
        entries = self.raws.get(block)
        if entries is None:
            entries = self.raws[block] = {}
            top = self.top[sid]
            if top >= 0 and block_id(session, top) == block:
                entries.update(w.blocks.read(block))  # the session's last, partly filled block
        entries[seq & (BLOCK_EVENTS - 1)] = record.raw
        if text:
            self.docs.append((eid, text, cjk))
            if w.semantic != OFF and w.embeds(kind_):
                self.vectors.append((eid, text))
        self.top[sid] = seq
        time_ = record.time
        totals = self.totals.get(session)
        if totals is None:
            self.totals[session] = [1, time_, seq, time_]
        else:
            totals[0] += 1
            if time_ > totals[1]:
                totals[1] = time_
            totals[2] = seq
            if time_ < totals[3]:
                totals[3] = time_

    def flush(self) -> None:
        if not self.rows:
            return
        conn = self.w.conn
        conn.execute(_EVENT_ROWS, (dumps(
            [(r[0], kind(r[1], r[2], r[3], r[7]), r[4], r[5], r[6]) for r in self.rows]),))
        self.w.blocks.write(self.raws)
        _insert_documents(self.w, self.docs)
        self.w.insert_vectors(self.vectors)
        # max(COALESCE(t0, a), a, b, …) one event at a time == max(COALESCE(t0, m), m), m = max
        # (and the same for min).
        conn.executemany(_TOTALS, [(n, n, t, t, top, first, first, no)
                                   for no, (n, t, top, first) in self.totals.items()])
        self.naming.flush(conn)
        if self.calls:
            conn.execute(_CALLS, (dumps(self.calls),))
            self.calls = []
        if self.citing:
            conn.execute(_CITING, (dumps(self.citing),))
            self.citing = []
        self.rows, self.at, self.raws, self.docs, self.totals = [], {}, {}, [], {}
        self.vectors = []


def embed_ahead(batches: Iterable[tuple[ShardWriter, Sequence[IndexRecord]]]) -> None:
    """Embed the texts these records will give vectors, before any write transaction opens.

    The model is the slow part of a write with vectors: run outside the transaction, no shard
    is locked meanwhile, and all shards' texts go to the model at once (`embed_many` keeps the
    cores busy). Each writer keeps its own until the next call; `insert_vectors` takes them
    from there and embeds whatever is missing itself. Events already stored (a replay) are
    skipped: they mostly change nothing, and one that does is embedded when it is written."""
    wanted: dict[str, list[ShardWriter]] = {}
    for w, records in batches:
        w.ahead = {}
        if w.semantic == OFF:
            continue
        tops: dict[str, int] = {}
        for record in records:
            if not (isinstance(record, EventRecord) and record.text and w.embeds(record.type)):
                continue
            top = tops.get(record.session_id)
            if top is None:
                row = w.conn.execute("SELECT top_seq FROM sessions WHERE id = ?",
                                     (record.session_id,)).fetchone()
                top = tops[record.session_id] = -1 if row is None else int(row[0])
            if record.seq > top:
                wanted.setdefault(record.text, []).append(w)
    if not wanted:
        return
    texts = list(wanted)
    for text, vectors in zip(texts, load_embedder().embed_many(texts), strict=True):
        for w in wanted[text]:
            w.ahead[text] = vectors


def apply_records(w: ShardWriter, records: Iterable[IndexRecord], *,
                  batched: bool = True) -> bool:
    """Apply records in order; True if anything changed.

    Runs of fresh appends go through `_Appends` (set-based; `batched=False` turns that off, for
    tests); headers, replays and conflicts are applied one at a time, after the run before them
    is written, so the order of effects is the per-record one."""
    changed = False
    appends = _Appends(w)
    redacted: Counter[str] = Counter()
    for record in records:
        if batched and isinstance(record, EventRecord) and appends.is_fresh(record):
            appends.add(record)
            if b"[redacted:" in record.raw:  # (most events: skip building an empty Counter)
                redacted.update(count_markers(record.raw))
            changed = True
            continue
        appends.flush()
        if isinstance(record, HeaderRecord):
            changed = apply_header(w, record) or changed
        elif apply_event(w, record):
            redacted.update(count_markers(record.raw))
            changed = True
    appends.flush()
    if redacted:
        add_redaction_counts(w.conn, redacted)
    return changed


#: Meta keys counting the redaction markers of the stored events, one per kind.
REDACTED_PREFIX = "redacted:"


def add_redaction_counts(conn: Conn, counts: Counter[str]) -> None:
    """Add the markers of newly stored events to the shard's per-kind totals (in the caller's
    transaction, so they count each stored event exactly once)."""
    conn.executemany(
        "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE"
        " SET value = CAST(CAST(value AS INTEGER) + CAST(excluded.value AS INTEGER) AS TEXT)",
        [(REDACTED_PREFIX + kind, str(n)) for kind, n in sorted(counts.items())])


def apply_positions(conn: Conn, positions: dict[str, int]) -> None:
    """Tracking moves forward only, so an older replay never rewinds it."""
    conn.executemany(
        "INSERT INTO tracking(source, position) VALUES (?, ?) ON CONFLICT(source) DO UPDATE"
        " SET position = max(position, excluded.position)", sorted(positions.items()))


def bump_generation(conn: Conn) -> None:
    conn.execute("UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
                 " WHERE key = 'generation'")


def _count_trigram_docs(conn: Conn, added: int) -> None:
    # A shard from before the count has no row: nothing to keep (its check counts the hard way).
    conn.execute("UPDATE meta SET value = CAST(CAST(value AS INTEGER) + ? AS TEXT) WHERE key = ?",
                 (added, TRIGRAM_DOCS))


def refresh_substring(w: ShardWriter) -> None:
    """Take up substring coverage another process gave the shard since `w` was made (within the
    write transaction, before any document is added): a writer that kept its own stale "no"
    would leave every later document out of the trigram index for good."""
    if not w.substring:
        row = w.conn.execute("SELECT value FROM meta WHERE key = 'substring'").fetchone()
        w.substring = row is not None and row[0] == "1"


def build_trigram(w: ShardWriter, progress: Callable[[int, int], None] | None = None,
                  batch: int = 5000) -> int:
    """Put every document not yet in the trigram index into it (substring mode on an index built
    without it) and mark the shard covered, in one transaction (a crash leaves it as it was).
    Returns the number of documents added. The caller holds the write lock."""
    conn = w.conn
    select = (f"SELECT e.id, x.session, {SEQ}, e.len FROM events e{EVENT_JOINS}"
              f" WHERE e.len > 0 AND {CJK} = 0")
    conn.execute("BEGIN IMMEDIATE")
    try:
        refresh_substring(w)
        if w.substring:  # another process built it meanwhile: adding again would double it
            conn.execute("COMMIT")
            return 0
        total = conn.execute(f"SELECT count(*) FROM events e WHERE e.len > 0 AND {CJK} = 0"
                             ).fetchone()[0]
        added = 0
        last = -1
        while True:
            rows = conn.execute(f"{select} AND e.id > ? ORDER BY e.id LIMIT ?",
                                (last, batch)).fetchall()
            if not rows:
                break
            raws = read_raws(conn, w.epoch, ((int(r[1]), int(r[2])) for r in rows))
            conn.executemany("INSERT INTO events_tri(rowid, text) VALUES (?, ?)",
                             [(document_id(int(e), int(n)), text_of(raws[(int(s), int(q))]))
                              for e, s, q, n in rows])
            last = int(rows[-1][0])
            added += len(rows)
            _count_trigram_docs(conn, len(rows))
            if progress is not None:
                progress(added, total)
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'substring'")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    w.substring = True
    return added
