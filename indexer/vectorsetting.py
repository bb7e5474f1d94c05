"""Storage and read side: the vectors an index keeps, as its shards record them (meta key
`semantic`: the model and quantization, or OFF), and the check each shard makes of that
setting as it opens. What makes and reads vectors is indexer/semantic.py and indexer/dense.py,
loaded only where vectors are asked for: opening a shard for a lexical search loads neither.
"""

from __future__ import annotations

from typing import Any

from indexer.errors import IndexOutdated

#: What an index built with vectors records (meta key `semantic`): the model (the source model
#: and the recipe of its static table) and the quantization. Another value means other
#: vectors: the shard is rebuilt.
MODEL_ID = "all-MiniLM-L6-v2-onnx-int8/static-mean-pca128-zipf/int4-v2"
OFF = "off"
#: PROTOCOL mode values that read vectors.
DENSE_MODES = ("semantic", "hybrid")

#: The vectors' table, beside the FTS rows in the shard file (rowid order = insertion order, so
#: a reader's cache takes up new rows by rowid).
VECTORS_DDL = ("CREATE TABLE IF NOT EXISTS vectors(id INTEGER PRIMARY KEY, event INTEGER NOT NULL,"
               " v BLOB NOT NULL)")


def fingerprint(enabled: bool, tool_output: bool) -> str:
    """The `semantic` value an index records for these settings."""
    if not enabled:
        return OFF
    return MODEL_ID + ("/tools" if tool_output else "")


def open_vectors(conn: Any, wanted: str, name: str, *, readonly: bool = False,
                 stored: str | None = None) -> str:
    """The `semantic` setting of a shard being opened (its vectors' model, or OFF).

    A shard records the setting it was first written with. One recording OFF (or nothing: made
    before vectors existed) that is now asked for vectors, or one recording another model, is
    outdated (rebuilt, so every event gets a vector of the same model). One recording vectors
    keeps them, and keeps adding them, when a process opens it without the setting: a command
    run without RECALL_SEMANTIC must not drop what the index already has. `stored`: the meta
    row's value (OFF without one) when the caller read it already. A caller asking for vectors
    checks first that the semantic extra is installed (indexer/semantic.py `require_extra`)."""
    if stored is None:
        row = conn.execute("SELECT value FROM meta WHERE key = 'semantic'").fetchone()
        stored = OFF if row is None else str(row[0])
    if wanted == OFF or stored == wanted:
        return stored
    empty = conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    if stored != OFF or not empty:
        raise IndexOutdated(f"{name} was built with semantic vectors {stored}; the settings now "
                            f"ask for {wanted}")
    if not readonly:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(VECTORS_DDL)
            conn.execute("INSERT INTO meta(key, value) VALUES ('semantic', ?) ON CONFLICT(key)"
                         " DO UPDATE SET value = excluded.value", (wanted,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return wanted
