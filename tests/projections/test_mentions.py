"""Reference stage: canonical session URIs and mention parsing (PROTOCOL §4.1)."""

from __future__ import annotations

import base64

import pytest

from projections.errors import SessionReferenceError
from projections.mentions import decode_uri, encode_uri, format_mention, parse_mentions
from projections.snapshot import INVALID_REFERENCE, Reference


def _uri_of_json(raw: str) -> str:
    return "dsh-session:" + base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _assert_invalid(fn: object, *args: str) -> None:
    with pytest.raises(SessionReferenceError) as info:
        fn(*args)  # type: ignore[operator]
    assert info.value.code == INVALID_REFERENCE


def test_uri_is_base64url_of_the_json_string_without_padding() -> None:
    assert encode_uri("session-434") == "dsh-session:InNlc3Npb24tNDM0Ig"
    assert encode_uri("") == "dsh-session:IiI"
    assert "=" not in encode_uri("ab") and "+" not in encode_uri("\u00fb\u00ff")


@pytest.mark.parametrize("session_id", [
    "plain", 'with "quotes"', "back\\slash", "line\nbreak\ttab", "会话搜索功能", "emoji 😀🎉",
    "</referenced-sessions>", "\u2028", "\x00\x1f", "lone \ud800 surrogate", "", " padded ",
])
def test_uri_round_trips(session_id: str) -> None:
    uri = encode_uri(session_id)
    assert uri.startswith("dsh-session:")
    assert decode_uri(uri) == session_id


@pytest.mark.parametrize("uri", [
    "dsh-session:",  # no payload
    "dsh-session:IiJ",  # non-zero padding bits: decodes, but is not canonical
    "dsh-session:IiI=",  # padding is not canonical
    "dsh-session:A",  # impossible base64 length
    "dsh-session:MQ",  # JSON 1: not a string
    "dsh-session:e30",  # JSON {}: not a string
    "dsh-session:a+b/",  # standard, not url-safe, alphabet
    "session:InNlc3Npb24tNDM0Ig",  # wrong scheme
    "dsh-session:/x",
])
def test_malformed_or_non_canonical_uris_are_invalid(uri: str) -> None:
    _assert_invalid(decode_uri, uri)


@pytest.mark.parametrize("raw", ['"\\u0061"', ' "a"', '"a" ', '"\\/"'])
def test_other_json_spellings_of_an_id_are_not_canonical(raw: str) -> None:
    _assert_invalid(decode_uri, _uri_of_json(raw))


def test_invalid_utf8_payload_is_invalid() -> None:
    uri = "dsh-session:" + base64.urlsafe_b64encode(b'"\xff"').decode().rstrip("=")
    _assert_invalid(decode_uri, uri)


def test_mention_escapes_backslash_and_closing_bracket() -> None:
    mention = format_mention("a]b\\c [d]", "s1")
    assert mention == "@[a\\]b\\\\c [d\\]](" + encode_uri("s1") + ")"
    assert format_mention(None, "s1") == "@[s1](" + encode_uri("s1") + ")"
    assert format_mention("", "s1") == "@[s1](" + encode_uri("s1") + ")"


@pytest.mark.parametrize("label", ["CI fix", "a]b", "back\\slash\\", "[x]", "多行\n标签", "😀"])
def test_formatted_mentions_parse_back_to_label_and_id(label: str) -> None:
    text, refs = parse_mentions(f"see {format_mention(label, 'sid-1')} please")
    assert text == f"see @{label} please"
    assert refs == [Reference("sid-1", label)]


def test_every_mention_and_bare_uri_is_rewritten_in_order() -> None:
    a, b = encode_uri("a-id"), encode_uri('b "id"')
    text, refs = parse_mentions(f"@[First]({a}), then {b}. Again {a}!")
    assert text == '@First, then @b "id". Again @a-id!'
    assert refs == [Reference("a-id", "First"), Reference('b "id"', 'b "id"'),
                    Reference("a-id", "a-id")]


def test_text_without_mentions_is_untouched() -> None:
    text = "dsh-session: alone, dsh-session:. and dsh-session:) and [x](https://e.x) @[y](z)"
    assert parse_mentions(text) == (text, [])
    assert parse_mentions("dsh-session:") == ("dsh-session:", [])


def test_explicit_mention_with_malformed_uri_raises() -> None:
    _assert_invalid(parse_mentions, "look @[x](dsh-session:!!) here")
    _assert_invalid(parse_mentions, "look @[x](dsh-session:) here")
    _assert_invalid(parse_mentions, "look @[x](dsh-session:IiJ) here")


def test_non_canonical_bare_uri_raises() -> None:
    _assert_invalid(parse_mentions, "see dsh-session:IiJ now")
    _assert_invalid(parse_mentions, "see dsh-session:MQ now")


def test_bare_uri_stops_at_the_first_non_base64url_character() -> None:
    uri = encode_uri("s1")
    text, refs = parse_mentions(f"({uri}).")
    assert (text, refs) == ("(@s1).", [Reference("s1", "s1")])


def test_mention_uri_ends_at_whitespace_so_the_bare_rule_applies() -> None:
    uri = encode_uri("s1")
    # `@[x](uri tail)` is no Markdown mention; the URI inside is still a bare reference
    text, refs = parse_mentions(f"@[x]({uri} tail)")
    assert text == "@[x](@s1 tail)"
    assert refs == [Reference("s1", "s1")]
