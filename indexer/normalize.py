"""Storage and read side: request normalization (PROTOCOL §3.3) — query text, limit, literal phrases."""

from __future__ import annotations

import re
from typing import Any

from indexer.config import MAX_SAFE_INTEGER, IndexConfig
from indexer.errors import (
    INVALID_CURSOR,
    INVALID_LIMIT,
    INVALID_QUERY,
    QUERY_TOO_LONG,
    query_error,
)
from projections.extraction import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN

# Python's \s is Unicode-aware for str patterns, matching JS's /\s/u closely enough here.
_WHITESPACE = re.compile(r"\s+")
_MARKERS = str.maketrans({HIGHLIGHT_OPEN: "\ufffd", HIGHLIGHT_CLOSE: "\ufffd"})
#: The longest query, in code points after whitespace runs collapse: what a search costs grows
#: with the query (a trigram phrase holds a term per character, each term's postings read), and
#: a query is typed or pasted, not a document.
MAX_QUERY_CHARS = 1000
#: Longer raw text is refused before any work on it (whitespace runs collapse at most this far).
_MAX_RAW_CHARS = 16 * MAX_QUERY_CHARS


def normalize_query(query: Any) -> str:
    """Trim, collapse whitespace runs, reject blank/NUL, map highlight markers to U+FFFD."""
    if not isinstance(query, str):
        raise query_error(INVALID_QUERY, "query must be a string")
    if len(query) > _MAX_RAW_CHARS:
        raise _too_long()
    text = _WHITESPACE.sub(" ", query).strip()
    if len(text) > MAX_QUERY_CHARS:
        raise _too_long()
    if not text:
        raise query_error(INVALID_QUERY, "query must not be blank")
    if "\x00" in text:
        raise query_error(INVALID_QUERY, "query must not contain NUL")
    return text.translate(_MARKERS)


def _too_long() -> Exception:
    return query_error(QUERY_TOO_LONG, f"the query is longer than {MAX_QUERY_CHARS} characters",
                       hint="search for a shorter, distinctive part of it")


def resolve_limit(limit: Any, config: IndexConfig) -> int:
    if limit is None:
        return config.default_limit
    upper = min(config.max_limit, MAX_SAFE_INTEGER - 1)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= upper:
        raise query_error(INVALID_LIMIT, f"limit must be an integer from 1 to {upper}")
    return limit


def check_cursor_type(cursor: Any) -> str | None:
    if cursor is not None and not isinstance(cursor, str):
        raise query_error(INVALID_CURSOR, "cursor must be a string")
    return cursor


def fts_phrase(query: str) -> str:
    """The query as one FTS5 literal phrase: operators, `*` and quotes stay plain data."""
    return '"' + query.replace('"', '""') + '"'
