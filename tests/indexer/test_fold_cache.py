"""A large session's parsed and folded log is kept per revision: reads answered from it, and
traces, are exactly what the whole-log path answers, on the real logs in tests/data and on generated
sessions with compactions, and an append (a new revision) is never answered from the old log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bench.corpus import TextGen, session_events
from bench.search_corpus import header
from indexer import foldcache
from projections.errors import SessionQueryError
from projections.fold import fold_surface
from projections.trace import trace_event as whole_log_trace
from streams.facade import Recall

from .test_session_titles import SOURCES


def _whole(recall: Recall, session_id: str) -> list[dict[str, object]]:
    """The log as the whole-log path reads it: loaded afresh from the shard, never kept."""
    reads = recall.backend.query()  # type: ignore[attr-defined]  # a SessionReads
    with reads._reading(session_id) as (shard, conn):
        number, _ = reads._session_on(conn, session_id)
        return list(reads._events(shard, conn, number))


def _same_answers(recall: Recall, session_id: str, seqs: list[int]) -> None:
    events = _whole(recall, session_id)
    fold_surface(events)  # the whole path validates by folding
    for _ in range(2):  # the first read loads and keeps the log, the second answers from it
        assert orjson.dumps(recall.read_session(session_id)["events"]) == orjson.dumps(events)
        for seq in seqs:
            assert recall.trace_event(session_id, seq) == {
                "session": recall.read_session(session_id)["header"],
                **whole_log_trace(events, seq).to_json()}, (session_id, seq)
    top = int(events[-1]["seq"]) if events else -1
    for missing in (top + 1, top + 50):
        with pytest.raises(SessionQueryError) as err:
            recall.trace_event(session_id, missing)
        assert err.value.code == "SESSION_QUERY_EVENT_NOT_FOUND"


@pytest.fixture
def keep_every_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(foldcache, "MIN_EVENTS", 0)
    monkeypatch.setattr(foldcache, "KEEP", 3)


def test_real_logs_read_and_trace_as_the_whole_log_does(tmp_path: Path,
                                                        keep_every_log: None) -> None:
    with Recall.open(tmp_path / "data") as recall:
        for path, fmt in SOURCES:
            recall.ingest([path], fmt=fmt)
        sessions = [str(r["header"]["id"]) for r in recall.list_sessions()]
        assert len(sessions) > 10
        for session_id in sessions:
            count = len(_whole(recall, session_id))
            _same_answers(recall, session_id, list(range(count)))


def _lines(session_id: str, events: int) -> list[bytes]:
    """The header and `events` events of a generated session that compacts every 60 events."""
    return [orjson.dumps(header(session_id, 1)),
            *(orjson.dumps(e) for e in session_events(session_id, events, TextGen(3),
                                                      compact_at=60))]


def _append(path: Path, lines: list[bytes]) -> None:
    with path.open("ab") as out:
        out.write(b"".join(line + b"\n" for line in lines))


@pytest.fixture
def generated(tmp_path: Path) -> Iterator[tuple[Recall, Path]]:
    source = tmp_path / "src"
    source.mkdir()
    with Recall.open(tmp_path / "data") as recall:
        yield recall, source


def test_compacted_sessions_trace_as_the_whole_log_does(
        generated: tuple[Recall, Path]) -> None:
    recall, source = generated
    size = foldcache.MIN_EVENTS + 500  # large enough to be kept
    _append(source / "big.jsonl", _lines("big", size))
    recall.ingest([source])
    events = _whole(recall, "big")
    shadowed = {int(e["seq"]) for e in events if e.get("surfaceOp") != "append"}
    cited = {int(s) for e in events for s in e.get("sourceEventSeqs") or []}
    assert shadowed and cited, "the generator compacts and cites"
    seqs = sorted(set(range(0, size, 97)) | set(list(shadowed)[:40]) | set(list(cited)[:40]))
    _same_answers(recall, "big", seqs)


def test_an_append_is_never_answered_from_the_kept_log(generated: tuple[Recall, Path]) -> None:
    recall, source = generated
    path = source / "big.jsonl"
    first = foldcache.MIN_EVENTS + 100
    lines = _lines("big", first + 300)
    _append(path, lines[:first + 1])
    recall.ingest([source])
    assert len(recall.read_session("big")["events"]) == first
    kept = recall.trace_event("big", first - 1)
    _append(path, lines[first + 1:])  # the same session, 300 events on
    recall.ingest([source])
    events = _whole(recall, "big")
    assert len(events) == first + 300
    assert orjson.dumps(recall.read_session("big")["events"]) == orjson.dumps(events)
    assert recall.trace_event("big", first + 299)["seq"] == first + 299
    assert recall.trace_event("big", first - 1) == {
        **kept, **whole_log_trace(events, first - 1).to_json()}
