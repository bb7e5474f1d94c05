"""Unit: streams.runtime.kafka.codec, the bytes⇄model boundary."""

from __future__ import annotations

import orjson
import pytest
from factories import assistant, header, user
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.errors import (
    INGEST_INVALID_UTF8,
    INGEST_LOSSY_JSON,
    INGEST_MALFORMED_JSON,
    INGEST_OVERSIZED_EVENT,
    INGEST_SCHEMA_VIOLATION,
    InputRejected,
)
from projections.fold import Replacement
from projections.records import EventRecord, HeaderRecord
from projections.surfaces import Surface
from streams.runtime.kafka.codec import (
    DeadLetter,
    DecodedEvents,
    DecodedHeader,
    Reply,
    Request,
    dead_letter_key,
    decode_dead_letter,
    decode_document,
    decode_documents,
    decode_event_line,
    decode_reply,
    decode_request,
    document_key,
    encode_dead_letter,
    encode_document,
    encode_event_value,
    encode_reply,
    encode_request,
    encode_segment,
    error_reply,
    ok_reply,
    pack_documents,
    split_segment,
)

LIMIT = 4096


def rejected(value: bytes | None, limit: int = LIMIT) -> str:
    with pytest.raises(InputRejected) as info:
        decode_event_line(value, max_bytes=limit)
    return info.value.code


def test_header_and_event_decode_to_their_wire_dicts() -> None:
    decoded = decode_event_line(encode_event_value(header("s1", cwd="/w")), max_bytes=LIMIT)
    assert decoded == DecodedHeader({"type": "session", "version": 0, "id": "s1",
                                     "createdAt": 1_700_000_000_000, "cwd": "/w"})
    event = user(0, "hello")
    assert decode_event_line(orjson.dumps(event), max_bytes=LIMIT) == DecodedEvents(
        (event,), packed=False, canonical=True)


def test_only_a_line_orjson_writes_back_exactly_is_canonical() -> None:
    event = user(0, "hello")
    spaced = orjson.dumps(event, option=orjson.OPT_INDENT_2).replace(b"\n", b"")
    exponent = orjson.dumps(event).replace(b'"data":{', b'"data":{"n":1.0e3,')
    for line in (spaced, exponent):
        decoded = decode_event_line(line, max_bytes=LIMIT)
        assert isinstance(decoded, DecodedEvents) and not decoded.canonical, line


def test_chunk_row_expands_to_its_events() -> None:
    row = {"type": "text-chunks", "seq0": 4, "time0": 100,
           "members": [{"dt": 0, "data": {"t": "a"}}, {"dt": 5, "data": {"t": "b"}}]}
    decoded = decode_event_line(orjson.dumps(row), max_bytes=LIMIT)
    assert isinstance(decoded, DecodedEvents) and decoded.packed
    assert [(e["seq"], e["time"]) for e in decoded.events] == [(4, 100), (5, 105)]


@pytest.mark.parametrize(("value", "code"), [
    (b"{not json", INGEST_MALFORMED_JSON),
    (b'{"type":"user/message","seq":0,"time":1,"data":"\xff"}', INGEST_INVALID_UTF8),
    (orjson.dumps({"type": "user/message", "seq": 0, "data": {}}), INGEST_SCHEMA_VIOLATION),
    (orjson.dumps({"type": "session", "version": 1, "id": "s", "createdAt": 0}),
     INGEST_SCHEMA_VIOLATION),
    (orjson.dumps([1, 2]), INGEST_SCHEMA_VIOLATION),
    (None, INGEST_SCHEMA_VIOLATION),
    # a type that is not a string must not reach the chunk-row lookup (it raised TypeError)
    (b'{"type":["list"]}', INGEST_SCHEMA_VIOLATION),
    (b'{"type":{"text-chunks":1},"seq":1,"time":1,"data":{}}', INGEST_SCHEMA_VIOLATION),
])
def test_bad_values_are_rejected_with_stable_codes(value: bytes | None, code: str) -> None:
    assert rejected(value) == code


@pytest.mark.parametrize("value", [
    b'{"type":"user/message","seq":0,"time":1,"data":{"x":-0.0}}',  # canonical, yet lossy
    b'{"type": "user/message", "seq": 0, "time": 1, "data": {"x": -0.0}}',
    b'{"type":"user/message","seq":0,"time":1,"data":{"x":[1,{"y":-0.0}]}}',
])
def test_negative_zero_is_rejected_on_the_canonical_fast_path(value: bytes) -> None:
    # A line orjson writes back byte for byte skips the walk of `data`, except for `-0.0`.
    with pytest.raises(InputRejected) as info:
        decode_event_line(value, max_bytes=LIMIT)
    assert info.value.code == INGEST_SCHEMA_VIOLATION and "-0 is not lossless" in info.value.message


def test_unsafe_integer_and_extra_keys_keep_their_codes() -> None:
    assert rejected(b'{"type":"user/message","seq":0,"time":1,"data":{"x":9007199254740993}}') \
        == INGEST_LOSSY_JSON
    assert rejected(b'{"type":"user/message","seq":0,"time":1,"data":{},"extra":2}') \
        == INGEST_SCHEMA_VIOLATION


def test_oversized_is_checked_before_parsing() -> None:
    assert rejected(b"{" * 5000) == INGEST_OVERSIZED_EVENT
    assert rejected(orjson.dumps(user(0, "x" * 100)), limit=50) == INGEST_OVERSIZED_EVENT


def test_documents_round_trip_with_their_compaction_keys() -> None:
    head = HeaderRecord("s1", header("s1"))
    event = assistant(3, "answer")
    record = EventRecord("s1", 3, "assistant/message", 1003, Surface.CURRENT, "answer",
                         orjson.dumps(event), Replacement(3, 0, 1, (0, 1)))
    assert decode_document(encode_document(head)) == head
    back = decode_document(encode_document(record))
    assert back == record and orjson.loads(back.raw) == event
    assert document_key(head) == b"s1:header"
    assert document_key(record) == b"s1:3"
    with pytest.raises(InputRejected):
        decode_document(b'{"kind":"event"}')


def test_dead_letter_keeps_original_bytes_and_position() -> None:
    letter = DeadLetter.of(topic="p.events", partition=2, offset=41, key=b"s\xff",
                           value=b"\x00{bad", code=INGEST_MALFORMED_JSON, reason="malformed")
    back = decode_dead_letter(encode_dead_letter(letter))
    assert back == letter
    assert back.original_key() == b"s\xff" and back.original_value() == b"\x00{bad"
    assert dead_letter_key(back) == b"p.events:2:41:0"
    assert DeadLetter.of(topic="t", partition=0, offset=0, key=None, value=None, code="C",
                         reason="r").original_value() is None


def test_request_and_reply_envelopes_use_camel_case_on_the_wire() -> None:
    request = Request(id="r1", replyTo="p.replies", op="search_sessions",
                      args={"query": "trace"}, deadlineMs=1234)
    wire = orjson.loads(encode_request(request))
    assert wire == {"id": "r1", "replyTo": "p.replies", "op": "search_sessions",
                    "args": {"query": "trace"}, "deadlineMs": 1234}
    assert decode_request(encode_request(request)) == request
    assert orjson.loads(encode_reply(ok_reply("r1", {"hits": []}))) == {
        "id": "r1", "ok": True, "result": {"hits": []}}
    failed = error_reply("r1", "SESSION_QUERY_STALE_CURSOR", "restart paging")
    assert orjson.loads(encode_reply(failed)) == {
        "id": "r1", "ok": False,
        "error": {"code": "SESSION_QUERY_STALE_CURSOR", "message": "restart paging"}}
    assert decode_reply(encode_reply(failed)) == failed
    assert isinstance(decode_reply(encode_reply(ok_reply("r2", None))), Reply)


@pytest.mark.parametrize(("value", "code"), [
    (b"nope", INGEST_MALFORMED_JSON),
    (orjson.dumps({"id": "r", "op": "x", "deadlineMs": 1}), INGEST_SCHEMA_VIOLATION),
    (orjson.dumps({"id": "r", "replyTo": "t", "op": "x", "deadlineMs": 1, "extra": 1}),
     INGEST_SCHEMA_VIOLATION),
])
def test_unreadable_requests_are_rejected(value: bytes, code: str) -> None:
    with pytest.raises(InputRejected) as info:
        decode_request(value)
    assert info.value.code == code


def test_a_record_value_is_a_segment_of_lines_with_their_indexes() -> None:
    one = orjson.dumps(user(0, "a"))
    two = orjson.dumps(user(1, "b"))
    assert split_segment(one) == [(0, one)]
    assert split_segment(encode_segment([one, two])) == [(0, one), (1, two)]
    # blank pieces keep their place in the numbering; CR before LF is cut; a final LF is fine
    assert split_segment(one + b"\r\n\n  \n" + two + b"\n") == [(0, one), (3, two)]
    # nothing to split is still one line, so it is parked, never dropped
    assert split_segment(None) == [(0, None)]
    assert split_segment(b"") == [(0, b"")] and split_segment(b"\n \n") == [(0, b"\n \n")]


def test_the_size_limit_applies_per_line_of_a_segment() -> None:
    small = orjson.dumps(user(0, "x" * 10))
    segment = encode_segment([small] * 100)
    assert len(segment) > LIMIT
    assert [decode_event_line(line, max_bytes=LIMIT) for _, line in split_segment(segment)] \
        == [DecodedEvents((user(0, "x" * 10),), packed=False, canonical=True)] * 100


def test_a_dead_letter_names_the_line_of_its_record() -> None:
    letter = DeadLetter.of(topic="p.events", partition=1, offset=7, line=3, key=b"s",
                           value=b"{bad", code=INGEST_MALFORMED_JSON, reason="malformed")
    back = decode_dead_letter(encode_dead_letter(letter))
    assert back.line == 3 and dead_letter_key(back) == b"p.events:1:7:3"
    assert orjson.loads(encode_dead_letter(letter))["line"] == 3


def test_a_sessions_documents_travel_as_json_lines_keyed_by_the_first() -> None:
    head = HeaderRecord("s1", header("s1"))
    events = [EventRecord("s1", seq, "user/message", 1000 + seq, Surface.CURRENT, f"q{seq}",
                          orjson.dumps(user(seq, f"q{seq}"))) for seq in range(5)]
    packed = list(pack_documents([head, *events], max_bytes=10_000))
    assert [key for key, _ in packed] == [b"s1:header"]
    assert [doc for _, _, doc in decode_documents(packed[0][1])] == [head, *events]
    small = list(pack_documents(events, max_bytes=len(encode_document(events[0])) * 2 + 1))
    assert [key for key, _ in small] == [b"s1:0", b"s1:2", b"s1:4"]
    assert [d for _, value in small for _, _, d in decode_documents(value)] == events


def test_a_bad_document_line_is_reported_with_its_index() -> None:
    good = encode_document(HeaderRecord("s1", header("s1")))
    decoded = decode_documents(good + b"\n{nope")
    assert decoded[0][2] == HeaderRecord("s1", header("s1"))
    index, line, problem = decoded[1]
    assert (index, line) == (1, b"{nope") and isinstance(problem, InputRejected)


def test_an_event_documents_raw_json_comes_back_as_the_same_bytes() -> None:
    raw = b'{"type":"user/message","seq":3,"time":1,"data":{"t":",\\"event\\":{}"}}'
    tricky = EventRecord("s1", 3, "user/message", 1, Surface.CURRENT, 'a ,"event": b', raw,
                         Replacement(3, 0, 1, (0, 1)))
    line = encode_document(tricky)
    assert orjson.loads(line) == [len(raw), "s1", 3, "user/message", 1, "current",
                                  'a ,"event": b',
                                  {"seq": 3, "start": 0, "end": 1, "shadowedSeqs": [0, 1]},
                                  orjson.loads(raw)]
    back = decode_document(line)
    assert back == tricky and isinstance(back, EventRecord) and back.raw == raw


def test_event_documents_of_the_object_form_are_still_read() -> None:
    raw = orjson.dumps(user(3, "q"))
    record = EventRecord("s1", 3, "user/message", 1003, Surface.CURRENT, "q", raw,
                         Replacement(3, 0, 1, (0, 1)))
    old = (b'{"kind":"event","sessionId":"s1","seq":3,"type":"user/message","time":1003,'
           b'"surface":"current","text":"q","replacement":{"seq":3,"start":0,"end":1,'
           b'"shadowedSeqs":[0,1]},"event":' + raw + b"}")
    assert decode_document(old) == record
    assert decode_documents(old + b"\n" + encode_document(record)) == [
        (0, old, record), (1, encode_document(record), record)]


def test_an_event_document_is_its_fields_then_its_event_and_the_events_length() -> None:
    back = decode_document(b'[7,"s1",3,"user/message",1,"current","q",null,{"a":1}]')
    assert back == EventRecord("s1", 3, "user/message", 1, Surface.CURRENT, "q", b'{"a":1}')


@pytest.mark.parametrize("line", [
    b'[5,"s1",3,"user/message",1,"current","q",null,{"a":1}]',  # wrong length
    b'[8,"s1",3,"user/message",1,"current","q",null,{"a":1}]',  # ditto
    b'[x,"s1",3,"user/message",1,"current","q",null,{"a":1}]',
    b'[-7,"s1",3,"user/message",1,"current","q",null,{"a":1}]',
    b'[7,"s1","3","user/message",1,"current","q",null,{"a":1}]',  # seq not an integer
    b'[7,"s1",true,"user/message",1,"current","q",null,{"a":1}]',
    b'[7,"s1",3,"user/message",1,"nowhere","q",null,{"a":1}]',  # no such surface
    b'[7,"s1",3,"user/message",1,["current"],"q",null,{"a":1}]',
    b'[7,"s1",3,"user/message",1,"current","q",[1],{"a":1}]',  # replacement not an object
    b'[7,"s1",3,"user/message",1,"current",null,{"a":1}]',  # a field missing
    b'[7,"s1",3,"user/message",1,"current","q",null,{"a":1}',  # cut short
    b'[7,"s1",3,"user/message",1,"current","q",null,["a",1]]',  # the event not an object
])
def test_a_malformed_event_document_is_rejected(line: bytes) -> None:
    with pytest.raises(InputRejected) as caught:
        decode_document(line)
    assert caught.value.code == INGEST_SCHEMA_VIOLATION


_json = st.recursive(st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)
_records = st.builds(
    EventRecord, st.text(min_size=1), st.integers(0, 2**53), st.text(), st.integers(-2**53, 2**53),
    st.sampled_from(list(Surface)), st.text(),
    st.dictionaries(st.text(max_size=6), _json, max_size=4).map(orjson.dumps),
    st.none() | st.builds(Replacement, st.integers(0, 99), st.integers(0, 99),
                          st.integers(0, 99), st.lists(st.integers(0, 99)).map(tuple)))


@settings(max_examples=300, deadline=None)
@given(st.lists(_records, min_size=1, max_size=4))
def test_any_event_documents_round_trip_through_a_packed_record(records: list[EventRecord]) -> None:
    for record in records:
        line = encode_document(record)
        assert orjson.loads(line)[-1] == orjson.loads(record.raw)  # one JSON array
        assert decode_document(line) == record
    values = [value for _, value in pack_documents(records, max_bytes=400)]
    assert [doc for value in values for _, _, doc in decode_documents(value)] == records
