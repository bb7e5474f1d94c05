"""Presentation edge: untrusted text (ids, cwds, titles, snippets, reasons) shown as data.

Session content and metadata come from logs anyone could have written. Before they reach a
terminal or a model's plain-text view, every character that could change the layout or the
terminal's state is written as a visible escape: C0/C1 controls (newline, ESC of ANSI/OSC
sequences, BEL, …), DEL, line/paragraph separators and the bidirectional overrides that
reorder what a reader sees. Markup is never interpreted (the CLI prints `rich.text.Text`).
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, U+2028/2029, the bidi embedding/override/isolate marks, and
# lone surrogates (undecodable bytes of a command line; no encoder can write them).
_MARKS = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
# Compiled on first use (`re` keeps them): printable text, most of it, never needs them
# (`needs_escape`). Multi-line views (show, surface, the web page) keep tabs and line feeds
# as layout.
_UNSAFE = f"[\x00-\x1f{_MARKS}]"
_UNSAFE_KEEP_LINES = f"[\x00-\x08\x0b-\x1f{_MARKS}]"
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def encodable(text: str) -> str:
    """`text` with lone surrogates written as `\\udcXX`, so any encoder (JSON, a terminal) can
    write it; everything else unchanged."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def needs_escape(text: str) -> bool:
    """Whether `visible(text)` differs from `text`."""
    # Every character escaped is a control, format or separator character, which Python never
    # counts as printable: printable text (most of it) needs no pattern scan.
    return not text.isprintable() and re.search(_UNSAFE, text) is not None


def visible(text: object, *, keep_newlines: bool = False) -> str:
    """`text` with every layout- or terminal-changing character written as an escape
    (`\\n`, `\\x1b`, `\\u202e`, …). `keep_newlines` leaves the line breaks and tabs of
    multi-line text as layout (a carriage return, which could overwrite a line, stays escaped)."""
    value = text if isinstance(text, str) else str(text)
    if value.isprintable():  # (needs_escape)
        return value
    if keep_newlines:
        return re.sub(_UNSAFE_KEEP_LINES, _escape, value)
    return re.sub(_UNSAFE, _escape, value)
