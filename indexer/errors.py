"""Storage and read side: the errors the indexer raises (all are SessionQueryError codes, PROTOCOL §3.11)."""

from __future__ import annotations

from collections.abc import Sequence

from projections.errors import SessionQueryError

INDEX_FAILED = "SESSION_QUERY_INDEX_FAILED"
INVALID_CONFIG = "SESSION_QUERY_INVALID_CONFIG"
INVALID_CURSOR = "SESSION_QUERY_INVALID_CURSOR"
STALE_CURSOR = "SESSION_QUERY_STALE_CURSOR"
INVALID_FILTER = "SESSION_QUERY_INVALID_FILTER"
INVALID_LIMIT = "SESSION_QUERY_INVALID_LIMIT"
INVALID_QUERY = "SESSION_QUERY_INVALID_QUERY"
INVALID_LINEAGE = "SESSION_QUERY_INVALID_LINEAGE"
INVALID_WINDOW = "SESSION_QUERY_INVALID_WINDOW"
SEARCH_DISABLED = "SESSION_QUERY_SEARCH_DISABLED"
SESSION_NOT_FOUND = "SESSION_QUERY_SESSION_NOT_FOUND"
EVENT_NOT_FOUND = "SESSION_QUERY_EVENT_NOT_FOUND"
SOURCE_CONFLICT = "SESSION_QUERY_SOURCE_CONFLICT"
#: ours (PROTOCOL's SESSION_QUERY_* set is closed): a query over `MAX_QUERY_CHARS`
QUERY_TOO_LONG = "RECALL_QUERY_TOO_LONG"
#: ours: a substring search where the shards' substring (trigram) index was never built and the
#: read may not build it
SUBSTRING_INDEX_MISSING = "RECALL_SUBSTRING_INDEX_MISSING"
#: The command that builds the substring index, named by every error that needs it.
BUILD_SUBSTRING_COMMAND = "recall index substring"


def query_error(code: str, message: str, *, hint: str | None = None) -> SessionQueryError:
    """A SessionQueryError with `code`; callers `raise` it so the raise site stays visible."""
    return SessionQueryError(message, code=code, hint=hint)


def substring_missing(shards: Sequence[int], *, read_only: bool = False) -> SessionQueryError:
    """The answer of a substring search that needs the substring index on `shards`, which lack
    it: an error, never the partial answer the CJK-only trigram index would give."""
    named = ("shard " if len(shards) == 1 else "shards ") + ", ".join(map(str, sorted(shards)))
    if read_only:
        return query_error(SUBSTRING_INDEX_MISSING, "substring search needs the substring index, "
                           f"which this read-only index lacks ({named})",
                           hint=f"run `{BUILD_SUBSTRING_COMMAND}` where the data dir is writable, "
                           "or search whole words")
    return query_error(SUBSTRING_INDEX_MISSING, "substring search needs the substring index, "
                       f"which {named} {'lacks' if len(shards) == 1 else 'lack'} (a search never builds it)",
                       hint=f"run `{BUILD_SUBSTRING_COMMAND}` once (writers keep it current from "
                       "then on), or search whole words")


class SourceConflict(SessionQueryError):
    """A record disagrees with what the shard already holds; the caller parks the record."""

    code = SOURCE_CONFLICT
    hint = "park the record in the dead letters; the index keeps the first observation"

    def __init__(self, message: str, *, session_id: str, seq: int | None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.seq = seq


class IndexOutdated(SessionQueryError):
    """A shard was written by an older schema version or under other redaction rules; the runtime
    rebuilds it from its source (the embedded store, or the Kafka documents topic) instead of
    refusing the data dir."""

    code = INDEX_FAILED
    hint = "rebuild the index from its source (`recall reindex`)"
