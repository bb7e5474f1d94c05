"""The pure redaction engine: markers, rule priority, idempotence, allow-list, JSON keys, events,
fingerprints — with small hand-made rules (the real detectors are tested in tests/streams)."""

from __future__ import annotations

import re
from collections import Counter

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.fold import SurfaceState, plan
from projections.records import event_record, fold_records
from projections.redaction import (
    NO_REDACTION,
    OFF,
    KeyRule,
    Redactor,
    Rule,
    count_markers,
    marker,
)

TOKEN = Rule("demo-token", re.compile(r"tok_[a-z0-9]{12}"), hints=("tok_",), bounded=True)
BLOCK = Rule("demo-block", re.compile(r"BEGIN[\s\S]*?END"), hints=("BEGIN",))
ASSIGN = Rule("demo-assign", re.compile(r"pass=(?P<v>\S+)"), group="v", hints=("pass=",),
              anchored=True)
KEYS = KeyRule("demo-key", re.compile(r"(?i).*secret"), lambda v: len(v) >= 6,
               hints=("secret", "Secret"))
R = Redactor((BLOCK, TOKEN, ASSIGN), KEYS)
T1 = "tok_" + "abcdef123456"
T2 = "tok_" + "zzzzzz999999"


def test_secrets_become_markers_naming_their_kind() -> None:
    counts: Counter[str] = Counter()
    text = f"use {T1} and pass=hunter22 then {T2}."
    assert R.redact_text(text, counts) == (f"use {marker('demo-token')} and pass="
                                           f"{marker('demo-assign')} then {marker('demo-token')}.")
    assert counts == {"demo-token": 2, "demo-assign": 1}
    assert [f.kind for f in R.findings(text)] == ["demo-token", "demo-assign", "demo-token"]


def test_an_earlier_rule_wins_where_spans_overlap() -> None:
    # the token lies inside the block: the block (first rule) names the whole span
    assert R.redact_text(f"x BEGIN {T1} END y") == f"x {marker('demo-block')} y"
    # the assignment's value *is* a token: the token rule comes first and names it
    assert R.redact_text(f"pass={T1}") == f"pass={marker('demo-token')}"


def test_bounded_rules_skip_matches_glued_to_longer_words() -> None:
    assert R.redact_text(f"x{T1}") == f"x{T1}"
    assert R.redact_text(f"{T1}9") == f"{T1}9"


def test_redaction_is_idempotent_and_markers_are_never_rematched() -> None:
    once = R.redact_text(f"pass={T1} pass=abcdefgh")
    assert R.redact_text(once) == once


def test_the_allow_list_keeps_values_it_matches_entirely() -> None:
    allowing = Redactor((TOKEN,), allow=(re.compile(re.escape(T1)),))
    assert allowing.redact_text(f"{T1} {T2}") == f"{T1} {marker('demo-token')}"
    partial = Redactor((TOKEN,), allow=(re.compile("tok_"),))  # must match the whole value
    assert partial.redact_text(T1) == marker("demo-token")


def test_anchored_rules_match_only_where_a_hint_starts() -> None:
    assert R.redact_text("xpass=abc") == f"xpass={marker('demo-assign')}"
    with pytest.raises(ValueError):
        Rule("x", re.compile("a"), anchored=True)


def test_rules_refuse_bad_kinds_and_hints() -> None:
    with pytest.raises(ValueError):
        Rule("Bad Kind", re.compile("a"))
    with pytest.raises(ValueError):
        Rule("ok", re.compile("a"), hints=('quote"d',))


def event(data: object, kind: str = "tool/call", seq: int = 0) -> dict[str, object]:
    return {"type": kind, "seq": seq, "time": 5, "data": data}


def test_events_are_redacted_inside_data_only_and_keep_their_shape() -> None:
    ev = event({"name": "bash", "arguments": {"command": f"curl -H 'x: {T1}'",
                                              "clientSecret": "s3cr3t-value", "ids": [T2, 7]},
                "id": "call-1"})
    out, counts = R.redact_event(ev, orjson.dumps(ev))
    assert out["data"] == {"name": "bash", "id": "call-1", "arguments": {
        "command": f"curl -H 'x: {marker('demo-token')}'", "clientSecret": marker("demo-key"),
        "ids": [marker("demo-token"), 7]}}
    assert {k: out[k] for k in ("type", "seq", "time")} == {"type": "tool/call", "seq": 0,
                                                          "time": 5}
    assert counts == {"demo-token": 2, "demo-key": 1}
    assert ev["data"]["arguments"]["ids"][0] == T2  # type: ignore[index]  # input untouched
    # the same without the caller's JSON (the engine serializes the data itself)
    assert R.redact_event(ev)[0] == out


def test_an_event_with_nothing_to_redact_is_returned_as_it_is() -> None:
    ev = event({"name": "bash", "arguments": {"command": "ls -la", "secretName": "short"}})
    out, counts = R.redact_event(ev, orjson.dumps(ev))
    assert out is ev and not counts
    assert NO_REDACTION.redact_event(event({"x": T1}))[0]["data"] == {"x": T1}


def test_key_rule_needs_the_key_to_close_right_after_its_word() -> None:
    # `secretName` holds the hint but does not end with it: the value is not a secret
    ev = event({"secretName": "prod-database-value", "mySecret": "abcdef"})
    out, _ = R.redact_event(ev, orjson.dumps(ev))
    assert out["data"] == {"secretName": "prod-database-value", "mySecret": marker("demo-key")}


def test_fingerprints_follow_rules_allow_list_and_switch() -> None:
    assert NO_REDACTION.fingerprint == OFF
    same = Redactor((BLOCK, TOKEN, ASSIGN), KEYS)
    assert same.fingerprint == R.fingerprint and R.fingerprint.startswith("v1-")
    assert Redactor((TOKEN, BLOCK, ASSIGN), KEYS).fingerprint != R.fingerprint
    assert Redactor((BLOCK, TOKEN, ASSIGN), KEYS,
                    allow=(re.compile("x"),)).fingerprint != R.fingerprint
    assert Redactor((BLOCK, TOKEN, ASSIGN)).fingerprint != R.fingerprint


def test_count_markers_reads_kinds_from_stored_bytes() -> None:
    raw = orjson.dumps({"a": marker("demo-token"), "b": [marker("demo-token"), marker("x-y")]})
    assert count_markers(raw) == {"demo-token": 2, "x-y": 1}
    assert count_markers(b'{"a": "[redacted:"}') == {}


def test_records_carry_redacted_text_and_raw_but_fold_the_original() -> None:
    events = [
        {"type": "user/message", "seq": 0, "time": 1, "surfaceOp": "append",
         "data": {"id": "m0", "role": "user", "source": {"kind": "user"},
                  "content": [{"type": "text", "text": f"my key {T1}"}]}},
        {"type": "tool/call", "seq": 1, "time": 2,
         "data": {"name": "bash", "arguments": {"command": f"use {T2}"}}},
    ]
    state, plain = fold_records("s", SurfaceState(), events)
    state2, redacted = fold_records("s", SurfaceState(), events, redactor=R)
    assert state2 == state
    assert [r.text for r in plain] == [f"my key {T1}", f'bash\n{{"command":"use {T2}"}}']
    assert [r.text for r in redacted] == [f"my key {marker('demo-token')}",
                                          f'bash\n{{"command":"use {marker("demo-token")}"}}']
    for record in redacted:
        assert T1.encode() not in record.raw and T2.encode() not in record.raw
        assert record.to_json()["event"]["seq"] == record.seq
    step = plan(SurfaceState(), events[0])
    assert event_record("s", events[0], step, redactor=R) == redacted[0]


_SAFE = st.text(alphabet=st.characters(blacklist_characters="_bBtT="), max_size=40)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_SAFE, st.sampled_from([T1, T2, "pass=abc", ""])), max_size=6))
def test_no_planted_token_survives_any_surrounding_text(parts: list[tuple[str, str]]) -> None:
    text = "".join(f"{before} {secret} " for before, secret in parts)
    out = R.redact_text(text)
    assert T1 not in out and T2 not in out
    assert R.redact_text(out) == out
    assert out.count("[redacted:") == sum(1 for _, s in parts if s)


def test_hints_inside_json_keys_wake_no_value_rule_but_escaped_json_in_values_does() -> None:
    keyed = Redactor((ASSIGN,))
    # `pass=` only inside a key: no value holds it, nothing to redact
    ev = event({"pass=x": "plain", "n": 1})
    assert keyed.redact_event(ev, orjson.dumps(ev))[0] is ev
    # JSON text inside a string value: its quotes are escaped, so the hint counts
    ev = event({"text": '{"pass=abc": 1} and pass=hunter22'})
    out, counts = keyed.redact_event(ev, orjson.dumps(ev))
    assert counts == {"demo-assign": 2}
    assert out["data"] == {"text": '{"pass=' + marker("demo-assign") + ' 1} and pass='
                           + marker("demo-assign")}  # `\\S+` took `abc":` whole


def test_hinted_lines_name_exactly_the_lines_of_a_segment_holding_a_hint() -> None:
    lines = [orjson.dumps(event({"text": "plain words"})),
             orjson.dumps(event({"text": f"a token {T1} here"})),
             orjson.dumps(event({"note": "nothing"})),
             orjson.dumps(event({"mySecret": "abcdefgh"})),  # a key hint counts too
             orjson.dumps(event({"text": "BEGIN"}))]
    segment = b"\n".join(lines)
    assert R.hinted_lines(segment) == {1, 3, 4}
    assert R.hinted_lines(lines[0]) == frozenset()
    # every line a hint skips would come back from redact_event as it is
    for i, line in enumerate(lines):
        if i not in {1, 3, 4}:
            ev = orjson.loads(line)
            assert R.redact_event(ev, line)[0] is ev
    # a rule without hints may match anywhere: no line can be skipped
    assert Redactor((Rule("demo-any", re.compile(r"zz+")),)).hinted_lines(segment) is None
    assert Redactor((TOKEN,), KeyRule("demo-k", re.compile(r"pw"), lambda v: True)
                    ).hinted_lines(segment) is None
    assert Redactor((TOKEN,), enabled=False).hinted_lines(segment) == frozenset()
