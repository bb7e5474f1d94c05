"""A page of the transcript found in the index (`read_transcript`) is that page of the whole-log
transcript (`pages.transcript` over `read_session`): the same entries, totals, per-surface counts
and page numbers, for every page and every `at`, on the UI corpus, on a generated session with
compactions, and on a log of the edge cases (calls-only messages named before, after or never,
shadowed ones, a call id named twice or missing, markers and log-only events without text)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from factories import assistant, checkpoint, header, log_only, replace, tool_result, user
from starlette.testclient import TestClient

from bench.corpus import TextGen, session_events
from bench.search_corpus import header as bench_header
from projections.codec import dumps
from streams.facade import Recall
from streams.faces.ui import pages
from streams.faces.ui.app import create_app
from tests.ui import corpus

LOCAL = "http://127.0.0.1"


def _calls_only(seq: int, *calls: str | None) -> dict[str, Any]:
    message = assistant(seq, "")
    message["data"]["message"]["content"] = [
        {"type": "tool-call", "name": "shell", "arguments": {"cmd": "ls"},
         **({} if c is None else {"id": c})} for c in calls]
    return message


def _call(seq: int, call: str | None, name: str = "shell") -> dict[str, Any]:
    data: dict[str, Any] = {"turn": 0, "step": 0, "name": name, "arguments": {"cmd": "ls"}}
    if call is not None:
        data["callId"] = call
    return log_only(seq, "tool/call", data)


def _unanswered_result(seq: int) -> dict[str, Any]:
    event = tool_result(seq, "no call id")
    del event["data"]["message"]["content"][0]["toolCallId"]
    return event


def _pruned(result: dict[str, Any], seq: int) -> dict[str, Any]:
    """A copy of `result` with its content cut, replacing it (a prune)."""
    copy = orjson.loads(orjson.dumps(result))
    copy["data"]["message"]["content"][0]["content"] = "pruned"
    return {**copy, "seq": seq, "time": 1000 + seq, "surfaceOp": replace(result["seq"],
                                                                        result["seq"]),
            "sourceEventSeqs": [result["seq"]]}


EDGES = [
    user(0, "hi"),
    _calls_only(1, "c1"),  # named just after: left out while current
    _call(2, "c1"),
    tool_result(3, "listing", call_id="c1"),
    _calls_only(4, "c9"),  # never named: shown
    _calls_only(5, "c5", "c6"),  # c6 named much later: left out, then shadowed
    _call(6, "c5", "grep"),
    log_only(7),  # no text: no entry
    log_only(8, "compaction/start", {"compactionId": "k1", "turn": None}),  # a marker
    _calls_only(9, "c10"),
    _call(10, "c10"),
    tool_result(11, "first output", call_id="dup"),
    checkpoint(12, "summary of the start", 1, 9, [1, 3, 4, 5, 9]),
    _call(13, "dup", "first-name"),
    _call(14, "dup", "second-name"),  # the later one names the call
    _calls_only(15, "c15"),
    _call(16, "c15"),
    _pruned(tool_result(11, "first output", call_id="dup"), 17),
    log_only(18, "compaction/end", {"compactionId": "k1", "turn": None}),
    user(19, "bye"),
    _call(20, "c6"),
    _call(21, None, "no-id"),  # names the call id "None"
    _calls_only(22, None),  # a call without an id: named by the event before
    _unanswered_result(23),
    _call(24, "", "empty-id"),
    _calls_only(25, "c25", "c26"),  # only one of its calls named: shown
    _call(26, "c25"),
]


@pytest.fixture(scope="module")
def recall(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recall]:
    root = tmp_path_factory.mktemp("transcript-page")
    data = corpus.build(root / "corpus")
    source = root / "sources"
    source.mkdir()
    generated = [bench_header("generated", 1),
                 *session_events("generated", 700, TextGen(5), compact_at=60)]
    (source / "generated.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n"
                                                      for e in generated))
    (source / "edges.jsonl").write_bytes(b"".join(dumps(e) + b"\n"
                                                  for e in [header("edges"), *EDGES]))
    with Recall.open(data) as opened:
        opened.ingest([source])
        yield opened


def _sessions(recall: Recall) -> list[str]:
    found = [str(r["header"]["id"]) for r in recall.list_sessions()]
    assert {"generated", "edges"} <= set(found) and len(found) > 4
    return found


def _expected_page(entries: list[pages.Entry], size: int, page: int,
                   at: int | None) -> tuple[int, int]:
    count = max(1, -(-len(entries) // size))
    if at is not None:
        index = next((i for i, e in enumerate(entries) if e.seq >= at), len(entries) - 1)
        return max(0, index) // size + 1, count
    return min(page, count), count


def test_every_page_is_the_whole_transcripts_page(recall: Recall) -> None:
    for session_id in _sessions(recall):
        whole = pages.transcript(recall.read_session(session_id)["events"])
        for size in (1, 4, 50, 400):
            count = max(1, -(-len(whole) // size))
            for page in [*range(1, min(count, 40) + 1), count, count + 1]:
                answer = recall.read_transcript(session_id, page=page, limit=size)
                shown, pages_ = _expected_page(whole, size, page, None)
                first = (shown - 1) * size
                assert (answer["page"], answer["pages"], answer["first"]) == (shown, pages_, first)
                assert answer["total"] == len(whole)
                assert answer["counts"] == pages.surface_counts(whole)
                assert pages.transcript_page(answer) == whole[first:first + size], \
                    (session_id, size, page)


def test_a_page_holding_an_event_is_the_whole_transcripts(recall: Recall) -> None:
    for session_id in ("edges", "generated", corpus.DEMO_SESSIONS[0]):
        events = recall.read_session(session_id)["events"]
        whole = pages.transcript(events)
        for size in (3, 400):
            for at in range(0, len(events) + 2, 1 if session_id != "generated" else 17):
                answer = recall.read_transcript(session_id, at=at, limit=size)
                shown, _ = _expected_page(whole, size, 1, at)
                assert answer["page"] == shown, (session_id, size, at)
                first = (shown - 1) * size
                assert pages.transcript_page(answer) == whole[first:first + size]


def test_the_edge_log_leaves_out_exactly_the_named_unshadowed_calls_only_messages(
        recall: Recall) -> None:
    answer = recall.read_transcript("edges", limit=100)
    entries = {e.seq: e for e in pages.transcript_page(answer)}
    assert {15, 22} & set(entries) == set() and {7} & set(entries) == set()
    assert {1, 4, 5, 8, 9, 25}.issubset(entries)
    assert entries[5].replaced_by == 12 and entries[11].replaced_by == 17
    assert entries[3].tool_name == "shell" and entries[11].tool_name == "second-name"
    assert entries[23].tool_name == "empty-id"


def test_the_session_page_shows_the_paged_transcript(recall: Recall) -> None:
    client = TestClient(create_app(recall), base_url=LOCAL)
    page = client.get("/session", params={"id": "generated", "page": "2"})
    assert page.status_code == 200
    whole = pages.transcript(recall.read_session("generated")["events"])
    second = whole[pages.TRANSCRIPT_PAGE:2 * pages.TRANSCRIPT_PAGE]
    assert second and f'id="seq-{second[0].seq}"' in page.text
    assert f'id="seq-{whole[0].seq}"' not in page.text


@pytest.mark.parametrize("bad", [{"page": 0}, {"page": "1"}, {"at": -1}, {"limit": 0},
                                 {"limit": None}, {"page": True}])
def test_a_bad_page_argument_is_an_invalid_filter(recall: Recall, bad: dict[str, Any]) -> None:
    args = {"sessionId": "edges", "page": 1, "limit": 10, **bad}
    with pytest.raises(Exception) as caught:
        recall.backend.call("read_transcript", args)
    assert getattr(caught.value, "code", None) == "SESSION_QUERY_INVALID_FILTER"
