"""Storage and read side: hit snippets (SPEC 3.7 `makeSnippet`) and substring highlighting."""

from __future__ import annotations

import re

from projections.extraction import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN

ELLIPSIS = "…"


#: Python's `\s` in a str pattern is exactly `str.isspace()` (Unicode whitespace, SPEC 3.7).
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
