"""The three ledgers: model transcript, human transcript and retrieval, each from the log alone."""

from __future__ import annotations

import pytest
from factories import assistant, checkpoint, log_only, tool_result, user

from projections import (
    FoldError,
    human_transcript,
    model_transcript,
    surface_events,
    to_documents,
    trace_event,
)
from projections.errors import SessionQueryError


def _log() -> list[dict[str, object]]:
    return [user(0, "run CI"), assistant(1, "running"), tool_result(2, "Traceback: boom"),
            log_only(3, "turn/end", {"reason": "completed"}),
            checkpoint(4, "summary: CI failed with boom", 0, 2, [0, 1, 2]),
            user(5, "fixed?"), assistant(6, "", reasoning="thinking only")]


def test_model_transcript_is_the_current_surface_only() -> None:
    messages = model_transcript(_log())
    texts = [m["content"][-1]["text"] for m in messages]
    # the empty-content assistant message is on the surface but derives no text message
    assert texts == ["summary: CI failed with boom", "fixed?", "thinking only"]
    assert [e["seq"] for e in surface_events(_log())] == [4, 5, 6]


def test_empty_assistant_message_derives_nothing() -> None:
    events = [user(0, "a"), assistant(1, "")]
    assert len(model_transcript(events)) == 1


def test_human_transcript_keeps_what_compaction_hid_from_the_model() -> None:
    seqs = [m["id"] for m in human_transcript(_log())]
    assert seqs == ["m0", "a1", "t2", "m5", "a6"]


def test_retrieval_keeps_all_three_surfaces() -> None:
    surfaces = {d.seq: d.surface.value for d in to_documents("s", _log())}
    assert surfaces == {0: "shadowed", 1: "shadowed", 2: "shadowed", 4: "current", 5: "current"}


def test_ledgers_reject_an_invalid_log() -> None:
    bad = [user(0, "a"), user(2, "b")]
    with pytest.raises(FoldError):
        model_transcript(bad)
    with pytest.raises(FoldError):
        human_transcript(bad)


def test_trace_event_follows_replacements_and_citations() -> None:
    events = [user(0, "a"), assistant(1, "b"), checkpoint(2, "s1", 0, 0, [0]),
              checkpoint(3, "s2", 2, 1, [2, 1])]
    zero = trace_event(events, 0).to_json()
    assert zero["replacedBy"] == 2 and zero["replacementChain"] == [2, 3]
    two = trace_event(events, 2).to_json()
    assert two == {"seq": 2, "replacedBy": 3, "replacementChain": [3], "replacedEventSeqs": [0],
                   "sourceEventSeqs": [0], "derivedEventSeqs": [3]}


def test_trace_event_checks_existence_before_surface_validation() -> None:
    with pytest.raises(SessionQueryError) as info:
        trace_event([user(0, "a"), user(2, "b")], 7)
    assert info.value.code == "SESSION_QUERY_EVENT_NOT_FOUND"
    with pytest.raises(FoldError):
        trace_event([user(0, "a"), user(2, "b")], 0)
