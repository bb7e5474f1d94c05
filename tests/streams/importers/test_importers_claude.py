"""Claude Code importer on real excerpts: sessions, sidechains, compaction, DAG forks, errors."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from importer_support import (
    CC_215,
    CC_1098,
    CC_2114,
    assert_valid_log,
    by_type,
    dumped,
    line_of,
    load,
    records,
    surfaces,
    to_bytes,
    types,
)

from projections import extract_text, fold_surface
from projections.errors import (
    INGEST_INVALID_UTF8,
    INGEST_MALFORMED_JSON,
    INGEST_SCHEMA_VIOLATION,
)
from streams.ingest.importers import ImportedSession, import_claude_code
from streams.ingest.importers.claude_compaction import CLEARED

MAIN_1098 = "claude-code:fe5e1c67-53e7-4862-81ae-d0e013e3270b"


def _import(name: str) -> list[ImportedSession]:
    return import_claude_code(load(name), name)


def _tool_result_blocks(name: str) -> int:
    return sum(1 for r in records(name) if r.get("type") == "user"
               for b in (r["message"]["content"] if isinstance(r["message"]["content"], list)
                         else [])
               if b.get("type") == "tool_result")


@pytest.mark.parametrize("name", [CC_1098, CC_2114, CC_215])
def test_every_imported_log_is_valid_and_has_no_rejections(name: str) -> None:
    sessions = _import(name)
    assert sessions
    for session in sessions:
        assert session.rejections == []
        assert_valid_log(session)
    # Nothing is dropped: each tool_result block of the file is a tool/result somewhere.
    results = sum(len(by_type(s, "tool/result")) for s in sessions)
    assert results == _tool_result_blocks(name)


@pytest.mark.parametrize("name", [CC_1098, CC_2114, CC_215])
def test_import_is_deterministic(name: str) -> None:
    first = [dumped(s) for s in _import(name)]
    second = [dumped(s) for s in _import(name)]
    assert first == second


def test_inline_sidechains_become_subagent_sessions_with_lineage() -> None:
    main, *subagents = _import(CC_1098)
    assert main.header == {"type": "session", "version": 0, "id": MAIN_1098,
                           "createdAt": 1756860751217, "cwd": "/path/to/Demo",
                           "delegationDepth": 0}
    assert [s.header["id"] for s in subagents] == [
        f"{MAIN_1098}/agent-6690d10e-f521-4ac0-800d-e5eb7a2d8072",
        f"{MAIN_1098}/agent-60dade70-20bb-4edb-9dad-9f08267e0cc2",
    ]
    for sub in subagents:
        assert sub.header["parentSession"] == MAIN_1098
        assert sub.header["origin"] == "subagent"
        assert sub.header["delegationDepth"] == 1
        assert all(line_of(e)["isSidechain"] is True for e in sub.events if "raw" in e["data"])
    # The run's root prompt is the Task prompt the main session sent.
    task_prompts = {c["data"]["arguments"]["prompt"] for c in by_type(main, "tool/call")
                    if c["data"]["name"] == "Task"}
    for sub in subagents:
        first = sub.events[1]
        assert sub.events[0]["type"] == "step/start"
        assert first["type"] == "user/message"
        assert first["data"]["source"] == {"kind": "user"}
        assert first["data"]["content"][0]["text"] in task_prompts
    assert types(subagents[0]) == {"user/message": 1, "assistant/message": 12, "step/start": 9,
                                   "tool/call": 8, "tool/result": 8}
    assert all(s == "current" or e["type"] in ("tool/call", "step/start")
               for e, s in zip(subagents[0].events, surfaces(subagents[0]), strict=True))


def test_main_session_mapping_of_1_0_98() -> None:
    main = _import(CC_1098)[0]
    assert types(main) == {"claude-code/summary": 1, "user/message": 2, "step/start": 3,
                           "assistant/message": 9, "tool/call": 6, "tool/result": 4}
    title = main.events[0]
    # The title's leaf is in another file: kept (for the index side), not this session's title.
    assert title["type"] == "claude-code/summary" and title["ignorable"] is True
    assert title["data"]["raw"]["summary"] == "Empty Repo Setup: CLAUDE.md Foundation Created"
    assert title["data"]["leafUuid"] == "549b3502-6e30-4fa5-869f-c998df26c3f0"
    assert not by_type(main, "session/title")
    command, meta = by_type(main, "user/message")
    # A slash command with arguments is what the person typed: their prompt, readable.
    assert command["data"]["source"] == {"kind": "user"}
    assert command["data"]["content"] == [
        {"type": "text", "text": "/orchestrator create TODO app by Next.js"}]
    assert "<command-args>" in line_of(command)["message"]["content"]
    assert meta["data"]["source"] == {"kind": "plugin", "plugin": "claude-code-meta"}
    calls = by_type(main, "tool/call")
    assert [c["data"]["name"] for c in calls] == ["Glob", "Glob", "TodoWrite", "Task", "Task",
                                                  "Task"]
    # Each tool_use is both a tool-call block on its assistant message and a tool/call event.
    carrier = next(e for e in by_type(main, "assistant/message")
                   if e["data"]["message"]["content"][0].get("type") == "tool-call")
    assert carrier["data"]["message"]["content"][0]["toolCallId"] == calls[0]["data"]["callId"]


def test_failing_tool_keeps_its_error_searchable() -> None:
    sub = _import(CC_1098)[2]
    errors = [e for e in by_type(sub, "tool/result") if e["data"].get("error")]
    assert len(errors) == 2
    for event in errors:
        part = event["data"]["message"]["content"][0]
        assert part["isError"] is True
        assert event["data"]["error"] == {"name": "ToolError", "code": "TOOL_ERROR"}
        text = extract_text(event)
        assert "File has not been read yet. Read it first before writing to it." in text
        assert "ToolError" in text


def test_compaction_shadows_everything_before_the_boundary() -> None:
    (session,) = _import(CC_2114)
    kinds = [e["type"] for e in session.events]
    start = kinds.index("compaction/start")
    assert kinds[start:start + 4] == ["compaction/start", "compaction/summary", "user/message",
                                      "compaction/end"]
    before = fold_surface(session.events[:start]).nodes
    checkpoint = session.events[start + 2]
    summary = session.events[start + 1]["data"]
    cid = f"claude-code:{line_of(session.events[start])['uuid']}"
    assert checkpoint["data"]["source"] == {"kind": "plugin", "plugin": "compact",
                                            "compactionId": cid}
    assert checkpoint["surfaceOp"] == {"op": "replace", "start": before[0], "end": before[-1]}
    assert checkpoint["sourceEventSeqs"] == [start, start + 1, *before]
    assert summary["shadowedSeqs"] == before
    assert summary["shadowedTokenCount"] == 155068
    assert summary["summary"].startswith("This session is being continued")
    classes = surfaces(session)
    assert {classes[s] for s in before} == {"shadowed"}
    assert classes[start + 2] == "current"
    # Everything on the surface after the checkpoint came after it, in order.
    nodes = fold_surface(session.events).nodes
    assert nodes[0] == start + 2 and nodes == sorted(nodes)
    assert all(e["type"] != "tool/result" or classes[e["seq"]] == "shadowed"
               for e in session.events[:start])


def test_parallel_tool_calls_are_not_treated_as_rewinds() -> None:
    (session,) = _import(CC_2114)
    replaced = [e for e in session.events if isinstance(e.get("surfaceOp"), dict)]
    assert [e["data"]["source"]["plugin"] for e in replaced] == ["compact"]
    # One API message split over lines: one step, usage kept once.
    steps: dict[str, set[tuple[int, int]]] = {}
    for event in by_type(session, "assistant/message"):
        api = line_of(event)["message"]["id"]
        steps.setdefault(api, set()).add((event["data"]["turn"], event["data"]["step"]))
    assert all(len(v) == 1 for v in steps.values())
    with_usage = [e for e in by_type(session, "assistant/message") if "usage" in e["data"]]
    assert len(with_usage) == len(steps)


def test_microcompact_whose_tools_predate_the_file_is_kept_but_prunes_nothing() -> None:
    (session,) = _import(CC_2114)
    micro = [e for e in by_type(session, "claude-code/system")
             if line_of(e).get("subtype") == "microcompact_boundary"]
    assert len(micro) == 1 and micro[0]["ignorable"] is True
    assert by_type(session, "compaction/prune") == []


def _microcompacted() -> tuple[ImportedSession, list[str], dict[str, Any]]:
    """Lines 1-40 of the 2.1.14 excerpt, the microcompact record adapted to list tool ids that
    the excerpt holds (the real ones predate it) plus one unknown id."""
    lines = records(CC_2114)[:40]
    ids = [b["tool_use_id"] for r in (lines[7], lines[8], lines[12])
           for b in r["message"]["content"]]
    boundary = next(r for r in lines if r.get("subtype") == "microcompact_boundary")
    boundary["microcompactMetadata"]["compactedToolIds"] = [*ids, "toolu_not_in_this_file"]
    (session,) = import_claude_code(to_bytes(lines), "agent.jsonl")
    return session, ids, boundary


def test_microcompact_rewrites_the_listed_tool_results() -> None:
    session, ids, boundary = _microcompacted()
    assert_valid_log(session)
    prunes = by_type(session, "compaction/prune")
    assert [p["data"]["toolCallId"] for p in prunes] == ids
    classes = surfaces(session)
    for prune in prunes:
        original = prune["data"]["shadowedSeqs"][0]
        rewrite = session.events[prune["seq"] + 1]
        assert rewrite["type"] == "tool/result"
        assert rewrite["surfaceOp"] == {"op": "replace", "start": original, "end": original}
        assert rewrite["sourceEventSeqs"] == [original]
        assert extract_text(rewrite) == CLEARED
        assert classes[original] == "shadowed" and classes[rewrite["seq"]] == "current"
        before = session.events[original]["data"]
        assert before["message"]["content"][0]["toolCallId"] == prune["data"]["toolCallId"]
        assert extract_text(session.events[original]) != CLEARED
    saved = sum(p["data"]["shadowedTokenCount"] for p in prunes)
    assert 0 < saved <= boundary["microcompactMetadata"]["tokensSaved"]


def test_2_1_5_dangling_titles_compaction_and_error_after_it() -> None:
    (session,) = _import(CC_215)
    assert session.header["id"] == "claude-code:deeac353-0765-4439-9056-293619a99172"
    assert types(session)["claude-code/summary"] == 20
    assert by_type(session, "session/title") == []
    classes = surfaces(session)
    checkpoint = next(e for e in by_type(session, "user/message")
                      if e["data"]["source"]["kind"] == "plugin")
    assert classes[checkpoint["seq"]] == "current"
    assert all(classes[s] == "shadowed" for s in checkpoint["sourceEventSeqs"][2:])
    error = next(e for e in by_type(session, "tool/result") if e["data"].get("error"))
    assert error["seq"] > checkpoint["seq"] and classes[error["seq"]] == "current"
    assert "File does not exist. Did you mean .golangci.yaml?" in extract_text(error)


def _fork_lines() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The 1.0.98 main chain (lines 2-12) plus a rewind: a new prompt whose parent is the
    injected orchestrator prompt (line 3), abandoning the answer that followed it."""
    lines = records(CC_1098)[1:12]
    fork = copy.deepcopy(lines[0])
    fork.update(uuid="aaaaaaaa-0000-4000-8000-000000000001", parentUuid=lines[1]["uuid"],
                timestamp="2025-09-03T00:53:00.000Z",
                message={"role": "user", "content": "Actually, use Vite instead of Next.js"})
    reply = copy.deepcopy(lines[2])
    reply.update(uuid="aaaaaaaa-0000-4000-8000-000000000002", parentUuid=fork["uuid"],
                 timestamp="2025-09-03T00:53:01.000Z")
    reply["message"]["id"] = "msg_rewound_reply"
    return [*lines, fork, reply], fork


def test_a_rewind_shadows_the_abandoned_branch() -> None:
    lines, fork = _fork_lines()
    (session,) = import_claude_code(to_bytes(lines), "rewind.jsonl")
    assert_valid_log(session)
    forking = next(e for e in session.events if "raw" in e["data"]
                   and line_of(e).get("uuid") == fork["uuid"])
    classes = surfaces(session)
    abandoned = [e["seq"] for e in session.events
                 if "raw" in e["data"] and line_of(e)["uuid"] in {r["uuid"] for r in lines[2:11]}
                 and e["type"] != "tool/call"]
    assert forking["type"] == "user/message"
    assert forking["surfaceOp"] == {"op": "replace", "start": abandoned[0], "end": abandoned[-1]}
    assert {classes[s] for s in abandoned} == {"shadowed"}
    assert set(forking["sourceEventSeqs"]) >= set(abandoned)
    # Surface = the two prompts before the fork point, the new prompt, and its reply.
    nodes = fold_surface(session.events).nodes
    prompts = [e["seq"] for e in by_type(session, "user/message")][:2]
    assert nodes[:2] == prompts and nodes[2] == forking["seq"] and len(nodes) == 4
    assert classes[-1] == "current" and session.events[-1]["surfaceOp"] == "append"


def test_bad_lines_are_rejected_and_the_rest_imports() -> None:
    clean = records(CC_1098)[:20]
    good = to_bytes(clean).splitlines(keepends=True)
    unknown = {"type": "brand-new-record", "uuid": "bbbbbbbb-0000-4000-8000-000000000001",
               "parentUuid": None, "sessionId": clean[1]["sessionId"], "isSidechain": False,
               "timestamp": "2025-09-03T00:52:40.000Z"}
    no_message = {**clean[6], "uuid": "bbbbbbbb-0000-4000-8000-000000000002"}
    del no_message["message"]
    data = b"".join([*good[:5], b"\xff\xfe not utf-8\n", b"[1, 2]\n", *good[5:10],
                     to_bytes([unknown, no_message]), *good[10:], good[0][:40]])
    sessions = import_claude_code(data, "bad.jsonl")
    rejections = [(r.line, r.code) for s in sessions for r in s.rejections]
    assert rejections == [(6, INGEST_INVALID_UTF8), (7, INGEST_SCHEMA_VIOLATION),
                          (14, INGEST_SCHEMA_VIOLATION), (25, INGEST_MALFORMED_JSON)]
    assert "truncated last line" in sessions[0].rejections[-1].reason
    assert sessions[0].rejections[0].raw == b"\xff\xfe not utf-8"
    reference = import_claude_code(to_bytes(clean), "clean.jsonl")
    for got in sessions:
        assert_valid_log(got)
    assert len(sessions) == len(reference)
    assert types(sessions[0]) - types(reference[0]) == {"claude-code/brand-new-record": 1}
    assert types(reference[0]) - types(sessions[0]) == {}
    assert sessions[1].events == reference[1].events
    extra = by_type(sessions[0], "claude-code/brand-new-record")[0]
    assert extra["ignorable"] is True and line_of(extra) == unknown


def test_a_file_with_no_session_yet_parks_its_lines_on_a_placeholder() -> None:
    lines = records(CC_215)[:3]  # summaries only: no timestamp, no session id
    (orphan,) = import_claude_code(to_bytes(lines) + b"{oops\n", "x.jsonl")
    assert orphan.events == []
    assert orphan.header["id"].startswith("claude-code:unidentified-")
    assert [r.line for r in orphan.rejections] == [1, 2, 3, 4]


def test_subagent_file_of_newer_builds_is_its_own_session() -> None:
    """2.x writes each subagent to `<sessionId>/subagents/agent-<id>.jsonl`: every record is a
    sidechain carrying `agentId` (built here from real 2.1.14 lines)."""
    lines = records(CC_2114)[3:20]
    for record in lines:
        if "uuid" in record:
            record.update(isSidechain=True, agentId="a1b2c3d")
    (session,) = import_claude_code(to_bytes(lines), "subagents/agent-a1b2c3d.jsonl")
    parent = "claude-code:839b35f7-4dbd-4d93-9772-3c272cc87caa"
    assert session.header["id"] == f"{parent}/agent-a1b2c3d"
    assert session.header["parentSession"] == parent
    assert session.header["origin"] == "subagent"
    assert_valid_log(session)
    blocks = [b for r in lines if r["type"] == "user" for b in r["message"]["content"]
              if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert types(session)["tool/result"] == len(blocks) == 6


def test_titles_from_this_file_and_repeated_summaries() -> None:
    lines = records(CC_1098)[1:8]
    leaf = lines[-1]["uuid"]
    title = {"type": "summary", "summary": "Next.js TODO app", "leafUuid": leaf}
    (session,) = import_claude_code(to_bytes([*lines, title, title]), "t.jsonl")
    summary, titled, repeated = session.events[-3:]
    assert summary["type"] == "claude-code/summary" and summary["data"]["leafUuid"] == leaf
    assert titled["type"] == "session/title"
    assert titled["data"] == {"title": "Next.js TODO app", "leafUuid": leaf, "via": "summary"}
    assert "ignorable" not in titled
    # Older builds repeat a summary: kept as a record, not a second title.
    assert repeated["type"] == "claude-code/summary" and repeated["data"]["raw"] == title


def test_a_summary_written_before_its_leaf_titles_the_session_at_the_leaf() -> None:
    # Claude Code writes summaries at the top of a file; the leaf they name comes later.
    lines = records(CC_1098)[1:8]
    leaf = lines[-1]["uuid"]
    early = {"type": "summary", "summary": "Next.js TODO app", "leafUuid": leaf}
    other = {"type": "summary", "summary": "Some other session", "leafUuid": "no-such-leaf"}
    data = to_bytes([early, other, *lines])
    (session,) = import_claude_code(data, "t.jsonl")
    titles = by_type(session, "session/title")
    assert [t["data"]["title"] for t in titles] == ["Next.js TODO app"]
    assert titles[0]["seq"] == len(session.events) - 1  # right after the leaf record
    assert_valid_log(session)
    # Growth-stable: importing up to the leaf's line gives a prefix of the same events.
    (cut,) = import_claude_code(to_bytes([early, other, *lines[:-1]]), "t.jsonl")
    assert session.events[:len(cut.events)] == cut.events
    assert not by_type(cut, "session/title")


def test_custom_and_ai_titles() -> None:
    lines = records(CC_1098)[1:8]
    sid = lines[0]["sessionId"]
    named = [{"type": "custom-title", "customTitle": "TODO app", "sessionId": sid},
             {"type": "ai-title", "aiTitle": "Scaffold a Next.js TODO app", "sessionId": sid},
             {"type": "custom-title", "customTitle": ["not", "a", "title"], "sessionId": sid}]
    (session,) = import_claude_code(to_bytes([*lines, *named]), "t.jsonl")
    assert [(t["data"]["title"], t["data"]["via"]) for t in by_type(session, "session/title")] \
        == [("TODO app", "custom-title"), ("Scaffold a Next.js TODO app", "ai-title")]
    assert session.rejections == []


def test_a_boundary_without_its_summary_closes_the_compaction_with_an_error() -> None:
    lines = records(CC_2114)
    boundary = next(i for i, r in enumerate(lines) if r.get("subtype") == "compact_boundary")
    kept = [*lines[:boundary + 1], *lines[boundary + 2:]]  # drop the isCompactSummary record
    (session,) = import_claude_code(to_bytes(kept), "x.jsonl")
    assert_valid_log(session)
    end = by_type(session, "compaction/end")[0]
    assert "without an isCompactSummary" in end["data"]["error"]
    assert "shadowed" not in surfaces(session)
