"""Fast paths equal the straightforward implementations they replaced, exactly.

Each reference below is the previous implementation, kept verbatim as the oracle: the snippet
collapse (a per-character loop), `check_lossless` (a walk that builds every path), item sizes
(serializing with `js_stringify`) and retention (sizing every unit, then dropping oldest-first).
"""

from __future__ import annotations

import enum
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.snippet import _strip_and_collapse, make_snippet
from projections.errors import SessionReferenceError
from projections.events import MAX_SAFE_INTEGER, _check_lossless_with_paths, check_lossless
from projections.extraction import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN
from projections.snapshot import (
    Retention,
    Unit,
    _item_bytes,
    _item_bytes_slow,
    _object_bytes,
    _Slot,
    _truncate_longest,
    data_object,
    retain_units,
    stringify_tag_safe_json,
    utf8_length,
)

_any_char = st.characters(codec=None, categories=None)  # lone surrogates included

# --- snippets ------------------------------------------------------------------------------------


def _strip_and_collapse_reference(marked: str) -> tuple[str, int]:
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


_spaces = st.sampled_from([" ", "  ", "\n", "\t\r\n", "\u00a0", "\u2028", "\u3000", "\x1c",
                           "\x85", " \u200b "])
_marked = st.lists(st.one_of(st.text(_any_char, max_size=6), _spaces,
                             st.sampled_from([HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE, "ab", "会话"])),
                   max_size=14).map("".join)


@settings(max_examples=1500, deadline=None)
@given(marked=_marked, size=st.integers(min_value=1, max_value=30))
def test_snippet_collapse_equals_the_character_loop(marked: str, size: int) -> None:
    assert _strip_and_collapse(marked) == _strip_and_collapse_reference(marked)
    make_snippet(marked, size)  # and never fails


def test_every_whitespace_code_point_collapses_like_isspace() -> None:
    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace()]
    marked = "a" + "".join(spaces) + HIGHLIGHT_OPEN + "b" + HIGHLIGHT_CLOSE + "".join(spaces)
    assert _strip_and_collapse(marked) == _strip_and_collapse_reference(marked) == ("a b", 2)


# --- check_lossless ------------------------------------------------------------------------------


class _Small(enum.IntEnum):
    ONE = 1


class _Text(str):
    pass


_scalar = st.one_of(
    st.none(), st.booleans(), st.text(_any_char, max_size=4),
    st.integers(-(2**60), 2**60), st.sampled_from([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER,
                                                   MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1]),
    st.floats(), st.sampled_from([-0.0, 0.0, math.inf, -math.inf, math.nan]),
    st.sampled_from([_Small.ONE, _Text("t"), (1, 2), b"x", {1, 2}, object]))
_value = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.one_of(st.text(max_size=3), st.sampled_from([1, None, (1,)])), inner,
                      max_size=4),
    max_leaves=15)


def _outcome(fn: Any, value: Any) -> str | None:
    try:
        fn(value)
    except ValueError as exc:
        return str(exc)
    return None


@settings(max_examples=1500, deadline=None)
@given(value=_value)
def test_check_lossless_raises_exactly_what_the_path_walk_raises(value: Any) -> None:
    assert _outcome(check_lossless, value) == _outcome(
        lambda v: _check_lossless_with_paths(v, "data"), value)


# --- item sizes and retention --------------------------------------------------------------------

_hostile = st.sampled_from(["</referenced-sessions>", "<", "\\u003c", "\n", '"', "\\", "\u2028",
                            "\x7f", "\x00", "\x08", "\x0c", "\x1f", "😀", "\ud83d\ude00",
                            "\ud800", "会话", "é"])
_texts = st.lists(st.one_of(st.text(_any_char, max_size=20), _hostile), max_size=8).map("".join)


@settings(max_examples=2000, deadline=None)
@given(role=st.sampled_from(["user", "assistant", "<x>\n"]), text=_texts)
def test_item_bytes_equal_serializing(role: str, text: str) -> None:
    assert _item_bytes(role, text) == _item_bytes_slow(role, text)


def test_item_bytes_of_every_code_point() -> None:
    for start in range(0, 0x110000, 0x1000):
        text = "".join(chr(c) for c in range(start, start + 0x1000))
        assert _item_bytes("user", text) == _item_bytes_slow("user", text)
    for c in range(0x80):
        assert _item_bytes("user", chr(c)) == _item_bytes_slow("user", chr(c))


def _retain_reference(units: list[Unit], max_bytes: int) -> Retention:
    """The previous retention: every unit serialized up front, then dropped oldest-first."""
    def slot(unit: Unit) -> _Slot:
        return _Slot(unit, unit.text, 0, _item_bytes_slow(unit.role, unit.text))

    skeleton = len(stringify_tag_safe_json(data_object("src", "L<", "/c", 7, [])).encode())
    slots = [slot(u) for u in units]
    size = _object_bytes(skeleton, slots)
    newest = len(slots) - 1
    kept: list[_Slot] = []
    dropped = dropped_bytes = 0
    for index, s in enumerate(slots):
        if size > max_bytes and not s.unit.is_checkpoint and index != newest:
            size -= s.item_bytes + 1
            dropped += 1
            dropped_bytes += utf8_length(s.unit.text)
        else:
            kept.append(s)
    _truncate_longest(kept, skeleton, max_bytes, "src")
    return Retention(conversation=tuple((s.unit.role, s.text) for s in kept),
                     compacted=any(u.is_checkpoint for u in units),
                     original_messages=len(units), retained_messages=len(kept),
                     omitted_messages=dropped,
                     omitted_bytes=dropped_bytes + sum(s.omitted_bytes for s in kept))


def _run(fn: Any) -> Any:
    try:
        return fn()
    except SessionReferenceError as exc:
        return exc.code, str(exc)


_units = st.lists(st.builds(Unit, role=st.sampled_from(["user", "assistant"]), text=_texts,
                            is_checkpoint=st.sampled_from([False, False, False, True])),
                  max_size=25)


@settings(max_examples=1500, deadline=None)
@given(units=_units, max_bytes=st.integers(min_value=1, max_value=900))
def test_lazy_retention_equals_sizing_every_unit(units: list[Unit], max_bytes: int) -> None:
    fast = _run(lambda: retain_units(units, session_id="src", label="L<", cwd="/c",
                                     captured_through_seq=7, max_bytes=max_bytes))
    assert fast == _run(lambda: _retain_reference(units, max_bytes))
