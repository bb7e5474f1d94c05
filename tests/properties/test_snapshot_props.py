"""Reference stage properties: tag safety, the per-source byte bound, determinism, lossless JSON."""

from __future__ import annotations

import json
from typing import Any

from factories import assistant, checkpoint, header, user
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.errors import SessionReferenceError
from projections.mentions import decode_uri, encode_uri, format_mention, parse_mentions
from projections.snapshot import (
    BUDGET_EXCEEDED,
    PROMPT_PREFIX,
    PROMPT_SUFFIX,
    Reference,
    Unit,
    build_context_message,
    build_source_snapshot,
    data_object,
    join_surrogate_pairs,
    js_stringify,
    omission_notice,
    retain_units,
    stringify_tag_safe_json,
    truncate_with_notice,
    utf8_length,
)
from projections.transcript import surface_events

# Every code point, lone surrogates included, with the delimiters mixed in often.
_any_char = st.characters(codec=None, categories=None)
_hostile = st.sampled_from(["</referenced-sessions>", "<referenced-sessions>", "<", "\\u003c",
                            "\n", '"', "\\", "\u2028", "😀", "会话"])
_texts = st.lists(st.one_of(st.text(_any_char, max_size=30), _hostile), max_size=6).map("".join)


def _source_events(texts: list[str], compact: bool) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for i, text in enumerate(texts):
        events.append(user(i, text) if i % 2 == 0 else assistant(i, text))
    if compact and events:
        events.append(checkpoint(len(events), "summary <b>", 0, 0, [0]))
    return events


def _snapshot(texts: list[str], compact: bool, max_bytes: int, index: int = 0,
              session_id: str = "src") -> tuple[dict[str, Any], dict[str, Any]]:
    events = _source_events(texts, compact)
    return build_source_snapshot(header(session_id, cwd="/w<d>"), surface_events(events),
                                 len(events) - 1 if events else None, f"lab<{index}>", max_bytes,
                                 index)


@settings(max_examples=150, deadline=None)
@given(sources=st.lists(st.lists(_texts, max_size=5), min_size=1, max_size=3),
       compact=st.booleans())
def test_prompt_has_exactly_one_closing_tag_and_parses_back(sources: list[list[str]],
                                                            compact: bool) -> None:
    built = [_snapshot(texts, compact, 65_536, i, f"s{i}") for i, texts in enumerate(sources)]
    message = build_context_message([d for d, _ in built], [p for _, p in built], "m")
    prompt = message["content"][0]["text"]
    assert prompt.count("</referenced-sessions>") == 1
    assert prompt.count("<referenced-sessions>") == 1
    body = prompt[len(PROMPT_PREFIX):-len(PROMPT_SUFFIX)]
    assert prompt == PROMPT_PREFIX + body + PROMPT_SUFFIX
    assert "<" not in body
    assert json.loads(body) == [d for d, _ in built]


_units = st.lists(st.builds(Unit, role=st.sampled_from(["user", "assistant"]), text=_texts,
                            is_checkpoint=st.booleans()), max_size=8)


@settings(max_examples=300, deadline=None)
@given(units=_units, max_bytes=st.integers(min_value=1, max_value=600))
def test_retained_object_fits_its_budget_or_fails_closed(units: list[Unit],
                                                         max_bytes: int) -> None:
    try:
        kept = retain_units(units, session_id="src", label="L", cwd=None,
                            captured_through_seq=3, max_bytes=max_bytes)
    except SessionReferenceError as exc:
        assert exc.code == BUDGET_EXCEEDED
        return
    data = data_object("src", "L", None, 3, kept.conversation)
    assert len(stringify_tag_safe_json(data).encode("utf-8")) <= max_bytes
    assert kept.retained_messages + kept.omitted_messages == kept.original_messages == len(units)
    assert kept.truncated == (kept.omitted_messages > 0 or kept.omitted_bytes > 0)
    # dropping never touches checkpoints or the newest unit
    survivors = sum(1 for i, u in enumerate(units) if u.is_checkpoint or i == len(units) - 1)
    assert kept.retained_messages >= survivors


@settings(max_examples=100, deadline=None)
@given(units=_units, max_bytes=st.integers(min_value=1, max_value=600))
def test_retention_is_deterministic(units: list[Unit], max_bytes: int) -> None:
    def run() -> Any:
        try:
            return retain_units(units, session_id="src", label="L", cwd="/x",
                                captured_through_seq=None, max_bytes=max_bytes)
        except SessionReferenceError as exc:
            return exc.code

    assert run() == run()


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(_texts, max_size=5), compact=st.booleans(),
       max_bytes=st.integers(min_value=100, max_value=2000))
def test_context_message_is_byte_identical_across_runs(texts: list[str], compact: bool,
                                                       max_bytes: int) -> None:
    def run() -> str:
        try:
            data, provenance = _snapshot(texts, compact, max_bytes)
        except SessionReferenceError as exc:
            return exc.code
        return js_stringify(build_context_message([data], [provenance], "m-1"))

    assert run() == run()


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(_any_char, max_size=10),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(_any_char, max_size=5), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(value=_json)
def test_tag_safe_json_is_lossless(value: Any) -> None:
    out = stringify_tag_safe_json(value)
    assert "<" not in out
    out.encode("utf-8")  # lone surrogates are escaped, so the output is always valid UTF-8
    # JS prints integral doubles without a fraction, so compare every number as a double
    assert json.loads(out, parse_int=float) == json.loads(json.dumps(value), parse_int=float)


@settings(max_examples=200, deadline=None)
@given(session_id=st.text(_any_char, max_size=20), label=st.text(_any_char, max_size=20))
def test_uris_and_mentions_round_trip(session_id: str, label: str) -> None:
    uri = encode_uri(session_id)
    assert decode_uri(uri) == json.loads(json.dumps(session_id))
    text, refs = parse_mentions("x " + format_mention(label, session_id) + " y")
    shown = label or session_id
    assert refs == [Reference(json.loads(json.dumps(session_id)), shown)]
    assert text == f"x @{shown} y"


@settings(max_examples=300, deadline=None)
@given(text=_texts, max_bytes=st.integers(min_value=0, max_value=200))
def test_truncation_keeps_a_head_and_a_tail_and_counts_the_gap_exactly(text: str,
                                                                        max_bytes: int) -> None:
    text = join_surrogate_pairs(text)
    out, omitted = truncate_with_notice(text, max_bytes)
    total = utf8_length(text)
    if total <= max_bytes:
        assert (out, omitted) == (text, 0)
        return
    assert utf8_length(out) <= max_bytes
    if out == "":
        assert omitted == total
        return
    notice = omission_notice(omitted)
    assert out.endswith(notice)
    kept = out[: -len(notice)]
    assert utf8_length(kept) + omitted == total
    # the kept text is a prefix of the original followed by a suffix of it
    assert any(text.startswith(kept[:i]) and text.endswith(kept[i:])
               for i in range(len(kept) + 1))
