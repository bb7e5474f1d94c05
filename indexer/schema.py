"""Storage and read side: the DDL of one shard file, its version, and how its keys are packed.

Version 2 is the lean layout (issue 16): no stored document text (contentless FTS5; snippets and
reads extract the text from the raw event again), raw events zstd-compressed in blocks of 16 per
session, integer keys and codes, no secondary index on the events table.

Keys (all SQLite integers):
- event id = session number << 31 | seq. A session's events are one id range, so reads by
  session or by (session, seq) need no index.
- document number: dense per shard (docs maps it to its event id), so FTS5 doclists, which
  store rowid deltas, stay small.
- document id (the FTS rowid) = document number << LENGTH_BITS | length key. Every FTS hit thus
  carries a key of its length for free: the ranking pass sorts by (match count, length key)
  without touching a table. The length key is the code-point length below 16 and then 4 steps
  per octave, capped: monotone in the length, which is all the ranking needs (indexer/search.py
  explains why), and 6 bits cost the doclists ~20 % (9 bits: ~35 %; measured at 88k documents).
- block id = event id >> 4: the block of 16 consecutive seqs an event's raw bytes live in.
"""

from __future__ import annotations

#: 'RCLI' — ours, distinct from DSH's 0x44534851 so neither tool opens the other's files.
APPLICATION_ID = 0x52434C49
SCHEMA_VERSION = 2
PAGE_SIZE = 8192

SEQ_BITS = 31
SEQ_MASK = (1 << SEQ_BITS) - 1
MAX_SESSIONS = 1 << (63 - SEQ_BITS)
LENGTH_BITS = 6
LENGTH_MASK = (1 << LENGTH_BITS) - 1
BLOCK_BITS = 4
BLOCK_EVENTS = 1 << BLOCK_BITS

#: Surface codes; the names are SPEC's.
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
        revision INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX sessions_parent ON sessions(parent)",
    "CREATE TABLE types(code INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
    """CREATE TABLE events(
        id INTEGER PRIMARY KEY,
        type INTEGER NOT NULL,
        time INTEGER NOT NULL,
        surface INTEGER NOT NULL,
        order_key INTEGER,
        len INTEGER NOT NULL,
        doc INTEGER,
        cjk INTEGER NOT NULL
    )""",
    "CREATE TABLE docs(no INTEGER PRIMARY KEY, event INTEGER NOT NULL)",
    # The current surface in model order (read_surface, references) without scanning the log.
    "CREATE INDEX events_current ON events(id >> 31, order_key) WHERE surface = 0",
    "CREATE TABLE blocks(id INTEGER PRIMARY KEY, data BLOB NOT NULL)",
    "CREATE TABLE dictionaries(id INTEGER PRIMARY KEY, data BLOB NOT NULL)",
    f"""CREATE VIRTUAL TABLE events_fts USING fts5(
        text, content='', columnsize=0, tokenize='{TOKENIZER}')""",
    """CREATE VIRTUAL TABLE events_tri USING fts5(
        text, content='', columnsize=0, tokenize='trigram')""",
)


def event_id(session_no: int, seq: int) -> int:
    return session_no << SEQ_BITS | seq


def session_range(session_no: int) -> tuple[int, int]:
    """The first and last event id of a session."""
    return session_no << SEQ_BITS, session_no << SEQ_BITS | SEQ_MASK


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
