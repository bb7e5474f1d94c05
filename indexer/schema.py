"""Storage and read side: the DDL of one shard file, its version, and how its keys are packed.

Version 2 is the lean layout (issue 16): no stored document text (contentless FTS5; snippets and
reads extract the text from the raw event again), raw events zstd-compressed in blocks of 16 per
session, integer keys and codes, no secondary index over all events.

Keys (all SQLite integers):
- event id: dense per shard, so FTS5 doclists (which store rowid deltas) and the events table's
  keys stay small. A session's ids come in extents — runs of consecutive ids for consecutive
  seqs (32 at first, doubling up to 8192), reserved when the session reaches them — so the
  extents table, a few rows per session, maps (session, seq) ⇄ event id both ways.
- document id (the FTS rowid) = event id << LENGTH_BITS | length key. Every FTS hit thus
  carries a key of its length for free: the ranking pass sorts by (match count, length key)
  without touching a table. The length key is the code-point length below 16 and then 4 steps
  per octave, capped: monotone in the length, which is all the ranking needs (indexer/search.py
  explains why); every bit of it makes the doclists larger, so it has only 6.
- kind = type code << 6 | source code << 3 | cjk << 2 | surface code (one small integer for four
  columns; the source code is a user message's `source.kind`, projections/titles.py).
- block id = session number << 27 | seq >> 4: the 16 consecutive seqs whose raw bytes share a
  compressed block.
"""

from __future__ import annotations

#: 'RCLI' — ours, distinct from DSH's 0x44534851 so neither tool opens the other's files.
APPLICATION_ID = 0x52434C49
SCHEMA_VERSION = 5
PAGE_SIZE = 8192

SEQ_BITS = 31
SEQ_MASK = (1 << SEQ_BITS) - 1
MAX_SESSIONS = 1 << 32
LENGTH_BITS = 6
LENGTH_MASK = (1 << LENGTH_BITS) - 1
BLOCK_BITS = 4
BLOCK_EVENTS = 1 << BLOCK_BITS
FIRST_EXTENT = 32
MAX_EXTENT = 8192

#: Surface codes; the names are the protocol's (docs/PROTOCOL.md).
SURFACE_CODES = {"current": 0, "shadowed": 1, "log-only": 2}
SURFACE_NAMES = {code: name for name, code in SURFACE_CODES.items()}
CURRENT, SHADOWED = SURFACE_CODES["current"], SURFACE_CODES["shadowed"]

TOKENIZER = "unicode61 remove_diacritics 2"

DDL = (
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE tracking(source TEXT PRIMARY KEY, position INTEGER NOT NULL) WITHOUT ROWID",
    """CREATE TABLE sessions(
        no INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        header TEXT,
        cwd TEXT,
        created_at INTEGER,
        parent TEXT,
        seed_length INTEGER,
        delegation_depth INTEGER NOT NULL DEFAULT 0,
        last_event_time INTEGER,
        event_count INTEGER NOT NULL DEFAULT 0,
        top_seq INTEGER NOT NULL DEFAULT -1,
        revision INTEGER NOT NULL DEFAULT 0,
        agent TEXT,
        first_event_time INTEGER,
        title TEXT,
        title_seq INTEGER,
        prompt TEXT,
        prompt_seq INTEGER
    )""",
    "CREATE INDEX sessions_parent ON sessions(parent)",
    "CREATE TABLE types(code INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
    """CREATE TABLE extents(
        first INTEGER PRIMARY KEY,
        session INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        size INTEGER NOT NULL
    )""",
    "CREATE UNIQUE INDEX extents_seq ON extents(session, seq)",
    """CREATE TABLE events(
        id INTEGER PRIMARY KEY,
        kind INTEGER NOT NULL,
        time INTEGER NOT NULL,
        order_key INTEGER,
        len INTEGER NOT NULL
    )""",
    # The current surface (read_surface, references) without scanning the whole log.
    "CREATE INDEX events_current ON events(id) WHERE kind & 3 = 0",
    # Claude Code summaries kept in one session's log that name a record (leaf) of any session,
    # one per leaf (the latest by time, session id, seq), and the record uuids of this shard's
    # Claude Code sessions: the listing joins the two across shards (indexer/listing.py).
    """CREATE TABLE summaries(
        leaf INTEGER PRIMARY KEY,
        title TEXT NOT NULL,
        time INTEGER NOT NULL,
        session TEXT NOT NULL,
        seq INTEGER NOT NULL
    )""",
    """CREATE TABLE uuids(
        key INTEGER NOT NULL,
        session INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY(key, session)
    ) WITHOUT ROWID""",
    # Tool calls (projections/calls.py): uses 0 = the tool/call event at `seq` names `call`;
    # uses 1 = the assistant message at `seq`, which has no words of its own, makes `call`. A
    # transcript page finds its tool names and the messages it leaves out here, not in the log.
    """CREATE TABLE calls(
        session INTEGER NOT NULL,
        call TEXT NOT NULL,
        uses INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY(session, call, uses, seq)
    ) WITHOUT ROWID""",
    # The events that carry sourceEventSeqs (their raw text names the key; the key may also be
    # in a text): an event's trace finds what cites it here, not in the whole log.
    "CREATE TABLE citing(session INTEGER NOT NULL, seq INTEGER NOT NULL,"
    " PRIMARY KEY(session, seq)) WITHOUT ROWID",
    "CREATE TABLE blocks(id INTEGER PRIMARY KEY, data BLOB NOT NULL)",
    "CREATE TABLE dictionaries(id INTEGER PRIMARY KEY, data BLOB NOT NULL)",
    f"""CREATE VIRTUAL TABLE events_fts USING fts5(
        text, content='', columnsize=0, tokenize='{TOKENIZER}')""",
    """CREATE VIRTUAL TABLE events_tri USING fts5(
        text, content='', columnsize=0, tokenize='trigram')""",
)

#: SQL over an `events e` row: its extent `x`, session `s`, seq, type code, surface code, cjk.
EVENT_JOINS = (" JOIN extents x ON x.first ="
               " (SELECT first FROM extents WHERE first <= e.id ORDER BY first DESC LIMIT 1)"
               " JOIN sessions s ON s.no = x.session")
SEQ = "(x.seq + e.id - x.first)"
TYPE = "(e.kind >> 6)"
SOURCE = "(e.kind >> 3 & 7)"
SURFACE = "(e.kind & 3)"
CJK = "(e.kind >> 2 & 1)"
#: The meta key counting the documents put into `events_tri` (contentless: it cannot be counted
#: back), against which `index check` tells a trigram index that missed documents.
TRIGRAM_DOCS = "trigram_docs"


def kind(type_code: int, cjk: bool, surface: int, source: int = 0) -> int:
    return type_code << 6 | source << 3 | int(cjk) << 2 | surface


def block_id(session_no: int, seq: int) -> int:
    return session_no << (SEQ_BITS - BLOCK_BITS) | seq >> BLOCK_BITS


def length_key(length: int) -> int:
    """Monotone in `length`: exact below 16, then 4 steps per power of two, capped."""
    if length < 16:
        return length
    exponent = length.bit_length() - 1
    mantissa = (length >> (exponent - 2)) & 3
    return min(16 + 4 * (exponent - 4) + mantissa, LENGTH_MASK)


def document_id(number: int, length: int) -> int:
    """The FTS rowid of document `number` whose text has `length` code points."""
    return number << LENGTH_BITS | length_key(length)
