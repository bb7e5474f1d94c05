"""GitHub Copilot CLI: real events.jsonl logs (1.0.34, 1.0.74 with a compaction) and the legacy
session document."""

from __future__ import annotations

import orjson
from importer_support import (
    COPILOT,
    COPILOT_COMPACTION,
    COPILOT_LEGACY,
    agent,
    assert_steps_announced,
    assert_valid_log,
    by_type,
    surfaces,
    types,
    with_raw,
)

from projections import extract_text, fold_surface
from streams.ingest.importers import detect_format
from streams.ingest.importers.copilot_cli import import_copilot_cli
from streams.ingest.importers.copilot_legacy import import_copilot_legacy

SOURCE = "/h/.copilot/session-state/{}/events.jsonl"


def _events(name: str) -> object:
    (session,) = import_copilot_cli(agent(name), SOURCE.format("x"))
    assert_valid_log(session)
    assert session.rejections == []
    return session


def test_a_session_with_parallel_tool_calls() -> None:
    session = _events(COPILOT)
    assert session.header == {"type": "session", "version": 0,
                              "id": "copilot-cli:96ef38f0-9d09-45c3-8124-6448c36090ed",
                              "createdAt": 1776964088893, "cwd": "/home/wei/repo/VibeCodingTracker",
                              "delegationDepth": 0}
    lines = agent(COPILOT).splitlines()
    assert len(with_raw(session)) == len(lines)  # every record kept
    kinds = types(session)
    assert kinds["step/start"] == kinds["step/end"] == 6  # one per assistant.turn_start
    assert kinds["tool/call"] == kinds["tool/result"] == 11
    assert_steps_announced(session)
    users = by_type(session, "user/message")
    assert [u["data"]["source"] for u in users] == [
        {"kind": "plugin", "plugin": "copilot-cli-meta"}, {"kind": "user"},
        {"kind": "plugin", "plugin": "copilot-cli-meta"},
        {"kind": "plugin", "plugin": "copilot-cli-meta"}]
    # What the person typed, not the date and reminders wrapped around it for the model.
    assert "<current_datetime>" not in users[1]["data"]["content"][0]["text"]
    assert "<current_datetime>" in users[1]["data"]["raw"]["data"]["transformedContent"]
    # Parallel calls of one model message share its step; their results keep that step.
    first = by_type(session, "assistant/message")[0]
    blocks = [b for b in first["data"]["message"]["content"] if b["type"] == "tool-call"]
    assert len(blocks) == 4
    steps = {(r["data"]["turn"], r["data"]["step"]) for r in by_type(session, "tool/result")
             if r["data"]["message"]["content"][0]["toolCallId"] in
             {b["toolCallId"] for b in blocks}}
    assert steps == {(first["data"]["turn"], first["data"]["step"])}
    reasoning = [b for b in first["data"]["message"]["content"] if b["type"] == "reasoning"]
    assert reasoning and reasoning[0]["text"] not in extract_text(first)


def test_a_failing_tool_is_an_error_and_searchable() -> None:
    records = [orjson.loads(line) for line in agent(COPILOT).splitlines()]
    done = next(r for r in records if r["type"] == "tool.execution_complete")
    done["data"] = {**done["data"], "success": False, "result": {
        "content": "bash: npm: command not found", "detailedContent": "exit status 127"}}
    data = b"".join(orjson.dumps(r) + b"\n" for r in records)
    (session,) = import_copilot_cli(data, SOURCE.format("x"))
    failed = [r for r in by_type(session, "tool/result") if r["data"].get("error")]
    assert len(failed) == 1
    assert failed[0]["data"]["error"] == {"name": "ToolError", "code": "TOOL_ERROR"}
    assert failed[0]["data"]["message"]["content"][0]["isError"] is True
    assert "npm: command not found" in extract_text(failed[0])


def test_compaction_shadows_what_the_model_saw_when_it_started() -> None:
    session = _events(COPILOT_COMPACTION)
    assert session.header["id"] == "copilot-cli:70b173ed-7b83-485a-b71a-5adb0591db07"
    assert session.header["cwd"] == "C:\\Users\\Chris\\git\\starcar"
    kinds = [e["type"] for e in session.events]
    start = kinds.index("compaction/start")
    summary = kinds.index("compaction/summary")
    checkpoint = session.events[summary + 1]
    assert kinds[summary:summary + 3] == ["compaction/summary", "user/message", "compaction/end"]
    assert checkpoint["data"]["source"]["plugin"] == "compact"
    before = fold_surface(session.events[:start]).nodes
    assert checkpoint["surfaceOp"] == {"op": "replace", "start": before[0], "end": before[-1]}
    assert checkpoint["sourceEventSeqs"] == [start, summary, *before]
    classes = surfaces(session)
    assert {classes[s] for s in before} == {"shadowed"}
    # Turns that ran while the summary was written stay what the model sees, after it.
    during = [e["seq"] for e in session.events[start:summary]
              if e["type"] in ("assistant/message", "tool/result")]
    assert during and {classes[s] for s in during} == {"current"}
    nodes = fold_surface(session.events).nodes
    assert nodes[0] == checkpoint["seq"] and nodes[1:1 + len(during)] == during
    assert session.events[summary]["data"]["shadowedTokenCount"] == 160095
    assert "pick up where we left off" in extract_text(checkpoint)


def test_legacy_session_document() -> None:
    (session,) = import_copilot_legacy(agent(COPILOT_LEGACY), "/h/x.json")
    assert_valid_log(session)
    assert session.rejections == []
    assert session.header == {"type": "session", "version": 0,
                              "id": "copilot-cli:06141331-92e8-4e9e-8bbb-9b7a729eb01a",
                              "createdAt": 1760182820882, "delegationDepth": 0}
    timeline = orjson.loads(agent(COPILOT_LEGACY))["timeline"]
    calls = [t for t in timeline if t["type"] == "tool_call_completed"]
    assert len(by_type(session, "tool/call")) == len(by_type(session, "tool/result")) == len(calls)
    (prompt,) = [u for u in by_type(session, "user/message")]
    assert prompt["data"]["source"] == {"kind": "user"}
    assert {r.get("id") for r in (e["data"]["raw"] for e in with_raw(session))} >= {
        t["id"] for t in timeline}
    assert_steps_announced(session)
    # One reply's text and the calls it made share a step (one timestamp per response).
    text, call = by_type(session, "assistant/message")[:2]
    assert (text["data"]["turn"], text["data"]["step"]) == (call["data"]["turn"],
                                                            call["data"]["step"])


def test_detection() -> None:
    assert detect_format("/x/events.jsonl", agent(COPILOT)[:65536]) == "copilot-cli"
    assert detect_format("/x/a.jsonl", agent(COPILOT_COMPACTION)[:300]) == "copilot-cli"
    assert detect_format("/x/s.json", agent(COPILOT_LEGACY)[:65536]) == "copilot-cli-legacy"
    assert detect_format("/h/.copilot/session-state/abc/events.jsonl", b"") == "copilot-cli"
