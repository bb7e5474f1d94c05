"""The Aider importer's fast paths equal the straightforward implementations they replaced.

References kept verbatim as oracles: `_strip_text` (two MULTILINE regular expressions), `_blocks`
(one list append per line). And the emitter's `plain_appends` shortcut is sound for Aider: every
event it lets through without the lossless walk and the fold passes the full envelope schema
check, and each session's events fold (the store folds them again at ingest).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.events import SURFACE_TYPES, parse_event
from projections.fold import fold_surface
from streams.ingest.importers.aider import (
    _blocks,
    _hash_kind,
    _strip_text,
    import_aider,
    resume_aider,
)

_OUTPUT_MARK = re.compile(r"^> ?", re.MULTILINE)
_PROMPT_MARK = re.compile(r"^#### ?", re.MULTILINE)
_LINE_BREAK = re.compile(r"  $", re.MULTILINE)


def _strip_text_reference(text: str, kind: str) -> str:
    if kind == "prompt":
        return _LINE_BREAK.sub("", _PROMPT_MARK.sub("", text)).rstrip()
    return _LINE_BREAK.sub("", _OUTPUT_MARK.sub("", text)).strip("\n").rstrip()


@dataclass(slots=True)
class _RefBlock:
    kind: str
    first: int
    lines: list[str]
    origin: int = 0


def _blocks_reference(text: str, cut: int = 0) -> Iterator[_RefBlock]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    current: _RefBlock | None = None
    now = ""
    resume_at = cut + 1
    for number, line in enumerate(lines, start=1):
        first = line[:1]
        kind: str | None = None
        if first == ">":
            kind = "output"
            joins = now == "output"
        elif first == "#" and (kind := _hash_kind(line)) is not None:
            joins = kind == "prompt" and now == "prompt"
        elif not line or line.isspace():
            joins = now == "reply"
        else:
            joins = now == "output" or now == "reply"
        if joins:
            assert current is not None
            if number != resume_at:
                current.lines.append(line)
                continue
            yield current
            current = _RefBlock(now, number, [line], current.origin or current.first)
            continue
        if current is not None:
            yield current
            current = None
            now = ""
        if kind is not None or (line and not line.isspace()):
            now = kind or "reply"
            current = _RefBlock(now, number, [line])
    if current is not None:
        yield current


# Lines shaped like Aider's: prompts, output, starts (valid and impossible), replies, blank and
# whitespace-only lines, two-space breaks, NUL (the fast strip's marker) and nested marks.
_line = st.one_of(
    st.sampled_from(["", " ", "  ", "\t", "\u00a0", "> ", ">", ">  ", "> > quoted  ", "####",
                     "#### ", "####  x  ", "##### deeper", "# a header", "#### #### twice",
                     "# aider chat started at 2025-07-15 11:38:37",
                     "# aider chat started at 2025-02-30 11:38:37", "\0", "> \0  ", "reply  ", "\x1c", " \x85", "\u2028",
                     "# aider chat started at 2025-07-15 11:38:37  ", "# aider x"]),
    st.text(alphabet=st.sampled_from(["#", ">", " ", "a", "\0", "\t", "é", "\x1c", "\r"]),
            max_size=12),
)
_history = st.tuples(st.lists(_line, max_size=40), st.sampled_from(["", "\n", "\n\n"])).map(
    lambda t: "\n".join(t[0]) + t[1])


@settings(max_examples=400, deadline=None)
@given(_history, st.sampled_from(["prompt", "output"]))
def test_strip_text_equals_the_regular_expressions(text: str, kind: str) -> None:
    assert _strip_text(text, kind) == _strip_text_reference(text, kind)


@settings(max_examples=400, deadline=None)
@given(_history, st.integers(min_value=0, max_value=45))
def test_blocks_equal_the_line_by_line_reference(text: str, cut: int) -> None:
    got = [(b.kind, b.first, b.lines, b.origin) for b in _blocks(text, cut)]
    want = [(b.kind, b.first, b.lines, b.origin) for b in _blocks_reference(text, cut)]
    assert got == want


@settings(max_examples=200, deadline=None)
@given(_history, st.integers(min_value=0, max_value=45))
def test_plain_append_events_pass_the_schema_check_and_the_fold(text: str, cut: int) -> None:
    data = ("# aider chat started at 2025-07-15 11:38:37\n" + text).encode("utf-8")
    for base, sessions in ((0, import_aider(data, "/w/.aider.chat.history.md")),
                           (7, resume_aider(data, "/w/.aider.chat.history.md", cut,
                                            lambda _sid: 7))):
        for session in sessions:
            for event in session.events:
                assert parse_event(event) is event
            folded = fold_surface(session.events, base_seq=base)
            assert folded.nodes == [e["seq"] for e in session.events
                                    if e["type"] in SURFACE_TYPES]
            assert folded.replacements == []
