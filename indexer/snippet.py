"""Storage and read side: hit snippets (SPEC 3.7 `makeSnippet`) and substring highlighting."""

from __future__ import annotations

from projections.extraction import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN

ELLIPSIS = "…"


def _strip_and_collapse(marked: str) -> tuple[str, int]:
    """Markers removed, whitespace runs collapsed and trimmed; the first match's index in it."""
    out: list[str] = []
    match: int | None = None
    pending_space = False
    for ch in marked:
        if ch == HIGHLIGHT_OPEN:
            if match is None:
                match = len(out) + (1 if pending_space and out else 0)
            continue
        if ch == HIGHLIGHT_CLOSE:
            continue
        if ch.isspace():
            pending_space = True
            continue
        if pending_space and out:
            out.append(" ")
        pending_space = False
        out.append(ch)
    text = "".join(out)
    return text, min(match or 0, max(len(text) - 1, 0))


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
