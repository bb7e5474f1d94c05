"""Semantic text extraction (PROTOCOL §3.5, code-derived table) and surface-tagged documents."""

from __future__ import annotations

import pytest
from factories import assistant, checkpoint, log_only, tool_result, user

from projections import extract_text, to_documents


def test_message_text_blocks_and_nested_tool_calls() -> None:
    event = assistant(0, "I will run the tests")
    event["data"]["message"]["content"].append(
        {"type": "tool-call", "toolCallId": "c1", "name": "bash", "arguments": {"cmd": "pytest"}})
    assert extract_text(event) == 'I will run the tests\nbash\n{"cmd":"pytest"}'


def test_reasoning_and_unknown_blocks_are_not_indexed() -> None:
    event = assistant(0, "answer", reasoning="secret chain of thought")
    event["data"]["message"]["content"].append({"type": "image", "data": "xyz"})
    assert extract_text(event) == "answer"
    assert extract_text(assistant(1, "", reasoning="only thinking")) == ""


def test_tool_result_content_and_error_fields() -> None:
    event = tool_result(0, "Traceback (most recent call last):\n  ValueError: boom",
                        error={"name": "ToolError", "code": "EXIT_1"})
    assert extract_text(event) == ("Traceback (most recent call last):\n  ValueError: boom\n"
                                   "ToolError\nEXIT_1")
    blocks = tool_result(1, "")
    blocks["data"]["message"]["content"][0]["content"] = [{"type": "text", "text": " a "},
                                                          {"type": "image"}]
    assert extract_text(blocks) == "a"


def test_tool_call_todo_and_turn_end() -> None:
    assert extract_text(log_only(0, "tool/call", {"callId": "c", "name": "grep",
                                                  "arguments": "needle"})) == "grep\nneedle"
    assert extract_text(log_only(0, "todo/write", {"todos": [
        {"status": "done", "content": "fix CI"}, {"status": "open", "content": ""}]})) == \
        "done\nfix CI\nopen"
    assert extract_text(log_only(0, "turn/end", {"reason": "error",
                                                 "error": {"message": "rate limited"}})) == \
        "error\nrate limited"
    assert extract_text(log_only(0, "turn/end", {"reason": "aborted"})) == "aborted"
    assert extract_text(log_only(0, "turn/end", {"reason": "max-tokens"})) == "max-tokens"
    assert extract_text(log_only(0, "turn/end", {"reason": "interrupted"})) == "interrupted"


@pytest.mark.parametrize("kind, data", [
    ("turn/end", {"reason": "completed"}), ("turn/end", {"reason": "blocked"}),
    ("turn/start", {}), ("step/start", {}), ("request/header", {"model": "x"}),
    ("assistant/chunk", {"kind": "text", "text": "partial"}), ("session/end-seed", {}),
    ("vendor/unknown", {"text": "never"}),
])
def test_structural_and_unknown_events_produce_nothing(kind: str, data: dict[str, object]) -> None:
    assert extract_text(log_only(0, kind, data)) == ""


def test_stored_text_is_sanitized() -> None:
    assert extract_text(user(0, "a\x00b\ufdd0c\ufdd1")) == "a\ufffdb\ufffdc\ufffd"


def test_pieces_are_trimmed_and_joined_with_newlines() -> None:
    event = user(0, "  first  ")
    event["data"]["content"] += [{"type": "text", "text": "   "}, {"type": "text", "text": "second"}]
    assert extract_text(event) == "first\nsecond"


def test_documents_carry_surface_and_provenance_for_every_event_with_text() -> None:
    events = [user(0, "the build failed"), tool_result(1, "Traceback: KeyError 'x'"),
              log_only(2, "turn/end", {"reason": "completed"}),
              checkpoint(3, "summary: CI fixed", 0, 1, [0, 1])]
    docs = [d.to_json() for d in to_documents("s1", events)]
    assert docs == [
        {"sessionId": "s1", "seq": 0, "type": "user/message", "time": 1000,
         "surface": "shadowed", "text": "the build failed"},
        {"sessionId": "s1", "seq": 1, "type": "tool/result", "time": 1001,
         "surface": "shadowed", "text": "Traceback: KeyError 'x'"},
        {"sessionId": "s1", "seq": 3, "type": "user/message", "time": 1003,
         "surface": "current", "text": "summary: CI fixed"},
    ]
