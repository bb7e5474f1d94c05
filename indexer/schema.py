"""Storage and read side: the DDL of one shard file, its application id and schema version."""

from __future__ import annotations

#: 'RCLI' — ours, distinct from DSH's 0x44534851 so neither tool opens the other's files.
APPLICATION_ID = 0x52434C49
SCHEMA_VERSION = 1

#: External-content FTS tables keep the text once (in `events`), which holds index bytes down.
DDL = (
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE tracking(source TEXT PRIMARY KEY, position INTEGER NOT NULL) WITHOUT ROWID",
    """CREATE TABLE sessions(
        id TEXT PRIMARY KEY,
        header TEXT,
        cwd TEXT,
        created_at INTEGER,
        parent TEXT,
        seed_length INTEGER,
        delegation_depth INTEGER NOT NULL DEFAULT 0,
        last_event_time INTEGER,
        event_count INTEGER NOT NULL DEFAULT 0,
        revision INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID""",
    """CREATE TABLE events(
        rowid INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        time INTEGER NOT NULL,
        surface TEXT NOT NULL,
        order_key INTEGER,
        text TEXT NOT NULL,
        text_len INTEGER NOT NULL,
        cjk INTEGER NOT NULL,
        raw BLOB NOT NULL,
        UNIQUE(session_id, seq)
    )""",
    "CREATE INDEX events_surface ON events(session_id, surface, order_key)",
    "CREATE INDEX sessions_parent ON sessions(parent)",
    """CREATE VIRTUAL TABLE events_fts USING fts5(
        text, content='events', content_rowid='rowid',
        tokenize='unicode61 remove_diacritics 2')""",
    """CREATE VIRTUAL TABLE events_tri USING fts5(
        text, content='events', content_rowid='rowid', tokenize='trigram')""",
)
