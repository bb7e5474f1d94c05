"""The importers' emitter: the plain-appends mode (Aider) makes the same events as the folded path."""

from __future__ import annotations

import pytest

from projections.errors import INGEST_SCHEMA_VIOLATION
from projections.events import MAX_SAFE_INTEGER
from streams.ingest.importers.common import Emitter, SourceLine, feed_each


def _line(number: int) -> SourceLine:
    return SourceLine(number, f"record {number}".encode(), {"n": number})


def _emit_all(em: Emitter, time: int = 1_000) -> list[int | None]:
    text = [{"type": "text", "text": "hi"}]
    return [
        em.emit(_line(1), "aider/start", time, {}),
        em.emit(_line(2), "step/start", time, {"turn": 0, "step": 0}, with_raw=False),
        em.emit(_line(2), "user/message", time,
                {"id": "a", "role": "user", "content": text}, op="append"),
        em.emit(_line(3), "assistant/message", time,
                {"message": {"id": "b", "role": "assistant", "content": text}}, op="append"),
    ]


def test_plain_appends_make_the_events_the_fold_checked_path_makes() -> None:
    folded, plain = Emitter(), Emitter(plain_appends=True)
    assert _emit_all(folded) == _emit_all(plain) == [0, 1, 2, 3]
    assert plain.events == folded.events
    assert plain.nodes() == folded.nodes() == [2, 3]
    assert plain.next_seq == folded.next_seq == 4
    assert plain.kept_line == folded.kept_line == 3


@pytest.mark.parametrize("time", [MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1])
def test_plain_appends_still_check_the_envelope_time(time: int) -> None:
    folded, plain = Emitter(), Emitter(plain_appends=True)
    assert _emit_all(folded, time) == _emit_all(plain, time) == [None] * 4
    assert [(r.line, r.code, r.reason) for r in plain.rejections] == \
        [(r.line, r.code, r.reason) for r in folded.rejections]
    assert plain.events == [] and plain.next_seq == 0


@pytest.mark.parametrize(("kind", "op", "sources"), [
    ("user/message", {"op": "replace", "start": 0, "end": 0}, [0]),
    ("user/message", None, None),
    ("step/start", "append", None),
    ("assistant/message", "append", [0]),
])
def test_plain_appends_refuse_anything_but_an_append(kind: str, op: object,
                                                     sources: list[int] | None) -> None:
    em = Emitter(plain_appends=True)
    em.emit(_line(1), "user/message", 1, {"id": "a", "role": "user", "content": []},
            op="append")

    def feed(line: SourceLine) -> None:
        em.emit(line, kind, 1, {"turn": 0, "step": 0}, op=op, sources=sources)

    feed_each([_line(2)], feed, em, "x/unmapped")  # a mapper bug parks the record
    assert [(r.line, r.code) for r in em.rejections] == [(2, INGEST_SCHEMA_VIOLATION)]
    assert "not a plain append" in em.rejections[0].reason
    assert [e["seq"] for e in em.events] == [0]
