"""An event's trace from the stored rows (indexer/trace.py) is the whole-log trace
(projections/trace.py) for every seq of logs with compactions of compactions, prunes, events
citing others without replacing anything, and a text that merely names sourceEventSeqs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from factories import assistant, checkpoint, header, log_only, replace, tool_result, user

from bench.corpus import TextGen, session_events
from bench.search_corpus import header as bench_header
from projections.codec import dumps
from projections.errors import SessionQueryError
from projections.trace import trace_event as whole_log_trace
from streams.facade import Recall


def _pruned(result: dict[str, Any], seq: int) -> dict[str, Any]:
    copy = orjson.loads(orjson.dumps(result))
    copy["data"]["message"]["content"][0]["content"] = "pruned"
    return {**copy, "seq": seq, "time": 1000 + seq,
            "surfaceOp": replace(result["seq"], result["seq"]),
            "sourceEventSeqs": [result["seq"]]}


def _citing(seq: int, text: str, cited: list[int]) -> dict[str, Any]:
    event = assistant(seq, text)
    event["sourceEventSeqs"] = cited
    return event


RESULT = tool_result(3, "long output", call_id="c1")
LOG = [
    user(0, "start"),
    assistant(1, "thinking about it"),
    log_only(2, "tool/call", {"turn": 0, "step": 0, "callId": "c1", "name": "sh",
                              "arguments": {"cmd": "ls"}}),
    RESULT,
    _citing(4, "as seen in seq 0 and 3", [0, 3]),
    _pruned(RESULT, 5),
    user(6, "a text that says \"sourceEventSeqs\" and cites nothing"),
    checkpoint(7, "first summary", 1, 4, [1, 4, 5]),
    user(8, "more"),
    assistant(9, "ok"),
    checkpoint(10, "second summary", 7, 9, [6, 7, 8, 9]),
    _citing(11, "recalling 0, 4 and 7", [0, 4, 7]),
    user(12, "after"),
    checkpoint(13, "third summary", 0, 12, [0, 10, 11, 12]),
    log_only(14),
]


def _answer(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except SessionQueryError as exc:
        return exc.code


@pytest.fixture(scope="module")
def recall(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("trace-reads")
    source = root / "sources"
    source.mkdir()
    (source / "edges.jsonl").write_bytes(b"".join(dumps(e) + b"\n"
                                                  for e in [header("edges"), *LOG]))
    generated = [bench_header("generated", 1),
                 *session_events("generated", 900, TextGen(3), compact_at=40)]
    (source / "generated.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n"
                                                      for e in generated))
    with Recall.open(root / "data") as opened:
        opened.ingest([source])
        yield opened


@pytest.mark.parametrize("session_id", ["edges", "generated"])
def test_every_events_trace_is_the_whole_logs(recall: Recall, session_id: str) -> None:
    answer = recall.read_session(session_id)
    events, session = answer["events"], answer["header"]
    assert len(events) == (len(LOG) if session_id == "edges" else 900)
    for seq in [*range(len(events) + 2), -1]:
        whole = _answer(lambda s: {"session": session, **whole_log_trace(events, s).to_json()},
                        seq)
        assert _answer(recall.trace_event, session_id, seq) == whole, (session_id, seq)


def test_the_edge_log_has_chains_prunes_and_citations(recall: Recall) -> None:
    assert recall.trace_event("edges", 1)["replacementChain"] == [7, 10, 13]
    assert recall.trace_event("edges", 3)["replacedBy"] == 5
    assert recall.trace_event("edges", 0)["derivedEventSeqs"] == [4, 11, 13]
    assert recall.trace_event("edges", 10)["replacedEventSeqs"] == [7, 6, 8, 9]
    assert recall.trace_event("edges", 13)["replacedEventSeqs"] == [0, 10, 11, 12]
