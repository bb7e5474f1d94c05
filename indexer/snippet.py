"""Storage and read side: hit snippets (PROTOCOL §3.7 `makeSnippet`) and the marked texts behind them.

Shards keep no document text (contentless FTS5), so a token hit's marked text is made again: the
page's texts go into a private in-memory FTS5 table with the shard's tokenizer and FTS5's own
highlight() marks them — the same function over the same text and query as before, hence the
same spans. Substring hits are marked in Python (`substring_spans`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from indexer.database import Conn, memory
from indexer.locks import local
from indexer.schema import TOKENIZER
from projections.extraction import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN

ELLIPSIS = "…"


#: Python's `\s` in a str pattern is exactly `str.isspace()` (Unicode whitespace, PROTOCOL §3.7).
_WHITESPACE = re.compile(r"\s+")


def _unmark(text: str) -> str:
    return text.replace(HIGHLIGHT_OPEN, "").replace(HIGHLIGHT_CLOSE, "")


def _strip_and_collapse(marked: str) -> tuple[str, int]:
    """Markers removed, whitespace runs collapsed and trimmed; the first match's index in it."""
    text = _WHITESPACE.sub(" ", _unmark(marked)).strip()
    first = marked.find(HIGHLIGHT_OPEN)
    if first <= 0:
        return text, 0
    # Where the first match starts in `text`: the collapsed text before it, minus its leading
    # space (a trailing space stays: it separates that text from the match).
    match = len(_WHITESPACE.sub(" ", _unmark(marked[:first])).lstrip())
    return text, min(match, max(len(text) - 1, 0))


def make_snippet(marked: str, max_chars: int) -> str:
    """A window of at most `max_chars` code points around the first match, with `…` marks."""
    text, match = _strip_and_collapse(marked)
    if len(text) <= max_chars:
        return text
    if max_chars == 1:
        return ELLIPSIS
    start = max(0, match - max_chars // 3)
    prefix = 1 if start > 0 else 0
    suffix = 1
    content = max_chars - prefix - suffix
    if content < 1:
        start, suffix = match, 0
        content = max_chars - prefix
    if match >= start + content:
        start = match - content + 1
    if start + content >= len(text):
        suffix = 0
        start = len(text) - (max_chars - prefix)
        content = max_chars - prefix
    body = text[start:start + content]
    return (ELLIPSIS if prefix else "") + body + (ELLIPSIS if suffix else "")


def fold_case(text: str) -> str:
    """Per-code-point lower case that keeps length, so indexes map back to the original."""
    return "".join(low if len(low := ch.lower()) == 1 else ch for ch in text)


def substring_spans(text: str, needle: str) -> list[tuple[int, int]]:
    """Non-overlapping case-insensitive occurrences of `needle`, left to right."""
    hay, pin = fold_case(text), fold_case(needle)
    spans: list[tuple[int, int]] = []
    at = hay.find(pin)
    while at >= 0 and pin:
        spans.append((at, at + len(pin)))
        at = hay.find(pin, at + len(pin))
    return spans


def mark_spans(text: str, spans: list[tuple[int, int]]) -> str:
    out: list[str] = []
    last = 0
    for a, b in spans:
        out.extend((text[last:a], HIGHLIGHT_OPEN, text[a:b], HIGHLIGHT_CLOSE))
        last = b
    out.append(text[last:])
    return "".join(out)


_local = local()


def _highlighter() -> Conn:
    conn: Conn | None = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = memory()
        conn.execute(f"CREATE VIRTUAL TABLE page USING fts5(text, tokenize='{TOKENIZER}')")
    return conn


def highlight_texts(phrase: str, texts: Mapping[int, str]) -> dict[int, str]:
    """id → the whole text with U+FDD0/U+FDD1 around each span FTS5 highlights for the MATCH
    expression `phrase` (PROTOCOL §3.7's input). Texts that do not match are left out."""
    if not texts:
        return {}
    conn = _highlighter()  # one per thread: an APSW connection serves one thread at a time
    conn.execute("BEGIN")
    try:
        conn.executemany("INSERT INTO page(rowid, text) VALUES (?, ?)", list(texts.items()))
        rows = conn.execute("SELECT rowid, highlight(page, 0, ?, ?) FROM page WHERE page MATCH ?",
                            (HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE, phrase)).fetchall()
    finally:
        conn.execute("ROLLBACK")
    return {int(r): str(h) for r, h in rows}
