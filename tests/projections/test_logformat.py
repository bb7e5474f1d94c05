"""Native log reader: raw and zstd JSONL, packed chunk rows, structured rejections."""

from __future__ import annotations

import orjson
import pytest
import zstandard
from factories import assistant, checkpoint, header, log_only, text_blocks, user

from projections import Event, SessionHeader, parse_log
from projections.events import check_lossless
from projections.logformat import LogBuilder, dump_log, expand_chunk_row, pack_chunk_row


def _lines(*values: object) -> bytes:
    return b"\n".join(orjson.dumps(v) for v in values) + b"\n"


def test_reads_header_and_events() -> None:
    log = parse_log(_lines(header("s1", cwd="/repo"), user(0, "a"), assistant(1, "b")))
    assert log.header == header("s1", cwd="/repo")
    assert [e["seq"] for e in log.events] == [0, 1]
    assert log.rejections == []


def test_zstd_concatenated_frames_read_like_raw() -> None:
    raw = _lines(header(), user(0, "a"), assistant(1, "b"), user(2, "c"))
    half = raw.index(b"\n", len(raw) // 2) + 1
    packed = (zstandard.ZstdCompressor().compress(raw[:half])
              + zstandard.ZstdCompressor().compress(raw[half:]))
    assert parse_log(packed).events == parse_log(raw).events


def test_chunk_rows_expand_losslessly() -> None:
    chunks = [log_only(1, "assistant/chunk", {"kind": "text", "text": "he"}, time=2000),
              log_only(2, "assistant/chunk", {"kind": "text", "text": "llo"}, time=2005),
              log_only(3, "assistant/chunk", {"kind": "text", "text": "!"}, time=2005)]
    row = pack_chunk_row("text-chunks", chunks)
    assert row == {"type": "text-chunks", "seq0": 1, "time0": 2000,
                   "members": [{"dt": 0, "data": chunks[0]["data"]},
                               {"dt": 5, "data": chunks[1]["data"]},
                               {"dt": 0, "data": chunks[2]["data"]}]}
    assert expand_chunk_row(row) == chunks
    log = parse_log(_lines(header(), user(0, "a"), row, assistant(4, "hello!")))
    assert [e["type"] for e in log.events] == ["user/message", "assistant/chunk",
                                               "assistant/chunk", "assistant/chunk",
                                               "assistant/message"]
    assert log.events[1:4] == chunks


def test_a_bad_line_is_a_rejection_and_later_lines_are_parked_not_lost() -> None:
    data = (_lines(header(), user(0, "a")) + b'{"type": "user/message", "seq": 1,\n'
            + _lines(assistant(2, "b"), user(3, "c")))
    log = parse_log(data)
    assert [e["seq"] for e in log.events] == [0]
    assert [(r.line, r.code) for r in log.rejections] == [
        (3, "INGEST_MALFORMED_JSON"), (4, "INGEST_AFTER_REJECTED"), (5, "INGEST_AFTER_REJECTED")]
    assert log.rejections[0].raw == b'{"type": "user/message", "seq": 1,'
    assert sum(1 for _ in log.rejections) + len(log.events) + 1 == 5


@pytest.mark.parametrize("line, code", [
    (b"\xff\xfe not utf8", "INGEST_INVALID_UTF8"),
    (orjson.dumps(user(5, "gap")), "INGEST_SEQ_GAP"),
    (orjson.dumps({"type": "user/message", "seq": "1", "time": 1, "data": {}}),
     "INGEST_SCHEMA_VIOLATION"),
    (orjson.dumps({**user(1, "x"), "extra": 1}), "INGEST_SCHEMA_VIOLATION"),
    (orjson.dumps(log_only(1, "vendor/new-thing")), "INGEST_UNKNOWN_EVENT_TYPE"),
    (orjson.dumps(checkpoint(1, "s", 0, 0, [])), "INGEST_INVALID_SURFACE"),
    (orjson.dumps([1, 2]), "INGEST_SCHEMA_VIOLATION"),
])
def test_rejection_codes(line: bytes, code: str) -> None:
    log = parse_log(_lines(header(), user(0, "a")) + line + b"\n")
    assert [r.code for r in log.rejections] == [code]
    assert log.rejections[0].raw == line


def test_unknown_types_load_when_ignorable() -> None:
    log = parse_log(_lines(header(), log_only(0, "vendor/new-thing", ignorable=True)))
    assert log.rejections == [] and len(log.events) == 1


def test_oversized_event_is_parked() -> None:
    big = user(1, "x" * 5000)
    log = parse_log(_lines(header(), user(0, "a"), big, user(2, "b")), max_event_bytes=4096)
    assert [r.code for r in log.rejections] == ["INGEST_OVERSIZED_EVENT", "INGEST_AFTER_REJECTED"]


def test_missing_or_invalid_header() -> None:
    assert parse_log(_lines(user(0, "a"))).rejections[0].code == "INGEST_MISSING_HEADER"
    bad = parse_log(_lines({**header(), "version": 1}, user(0, "a")))
    assert [r.code for r in bad.rejections] == ["INGEST_SCHEMA_VIOLATION", "INGEST_AFTER_REJECTED"]
    assert parse_log(_lines(header(cwd="relative/dir"))).header is None


def test_parse_then_dump_is_byte_identical() -> None:
    raw = _lines(header("s", cwd="/r", parentSession="p", seedLength=0), user(0, "a"),
                 assistant(1, "é 😀 <tag>"))
    log = parse_log(raw)
    assert log.header is not None
    assert dump_log(log.header, log.events) == raw


def test_models_reserialize_losslessly() -> None:
    e = checkpoint(2, "s", 0, 1, [0, 1])
    assert Event.model_validate(e).to_wire() == e
    h = header("s", cwd="/x", delegationDepth=0, agentPreset="p")
    assert SessionHeader.model_validate(h).to_wire() == h


@pytest.mark.parametrize("value", [-0.0, float("nan"), float("inf"), 2**60, {1: "x"}, {"a": {1, 2}}])
def test_non_lossless_data_is_refused(value: object) -> None:
    with pytest.raises(ValueError):
        check_lossless(value)


def _builder_lines() -> list[bytes]:
    header = {"type": "session", "version": 0, "id": "s-1", "createdAt": 1}
    events = [
        {"type": "user/message", "seq": 0, "time": 2, "surfaceOp": "append",
         "data": {"id": "u", "role": "user", "content": text_blocks("hello")}},
        {"type": "step/start", "seq": 1, "time": 3, "data": {"turn": 0, "step": 0}},
        {"type": "assistant/message", "seq": 2, "time": 4,
         "surfaceOp": {"op": "replace", "start": 0, "end": 0}, "sourceEventSeqs": [0],
         "data": {"message": {"id": "a", "role": "assistant", "content": text_blocks("sum")}}},
        {"type": "user/message", "seq": 9, "time": 5, "surfaceOp": "append",
         "data": {"id": "v", "role": "user", "content": text_blocks("gap")}},
    ]
    return [orjson.dumps(v) for v in (header, *events)]


def test_a_builder_without_steps_accepts_and_rejects_the_same_lines() -> None:
    kept, lean = LogBuilder(), LogBuilder(keep_steps=False)
    for number, line in enumerate(_builder_lines(), start=1):
        kept.feed_line(number, line)
        lean.feed_line(number, line)
    assert lean.log.events == kept.log.events and len(kept.log.events) == 3
    assert lean.log.state == kept.log.state and kept.log.state.nodes == [2]
    assert [(r.line, r.code) for r in lean.log.rejections] == \
        [(r.line, r.code) for r in kept.log.rejections] == [(5, "INGEST_SEQ_GAP")]
    assert lean.log.raws == kept.log.raws
    assert [s.state for s in kept.log.steps][-1] == kept.log.state
    assert lean.log.steps == []
