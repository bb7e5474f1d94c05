"""Gemini CLI: real chat documents and the JSONL chat format, subagent runs, the recovered
workspace, tool errors, titles, and what a rewritten message id adds."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
from importer_support import (
    GEMINI_2025,
    GEMINI_ERRORS,
    GEMINI_JSONL,
    GEMINI_MAIN,
    GEMINI_SUB1,
    GEMINI_SUB2,
    agent,
    assert_steps_announced,
    assert_valid_log,
    by_type,
    document,
    types,
    with_raw,
)

from projections import extract_text
from streams.ingest.importers import IMPORTERS, detect_format
from streams.ingest.importers.gemini_cli import import_gemini_document, import_gemini_jsonl

MAIN_ID = "gemini-cli:50316244-145e-46cb-b42b-db11410ad87a"


def _one(name: str, source: str | None = None) -> object:
    (session,) = import_gemini_document(agent(name), source or f"/h/.gemini/tmp/x/chats/{name}")
    assert_valid_log(session)
    assert session.rejections == []
    return session


def test_main_session_maps_prompt_steps_calls_and_results() -> None:
    session = _one(GEMINI_MAIN)
    assert session.header == {"type": "session", "version": 0, "id": MAIN_ID,
                              "createdAt": 1773798368884, "cwd": "/home/kingb/aim",
                              "delegationDepth": 0}
    assert types(session) == {"gemini-cli/session": 1, "step/start": 7, "user/message": 1,
                              "assistant/message": 13, "tool/call": 6, "tool/result": 6}
    (prompt,) = by_type(session, "user/message")
    assert prompt["data"]["source"] == {"kind": "user"}
    assert prompt["data"]["content"] == [{"type": "text", "text": "Show current token stats"}]
    assert_steps_announced(session)
    # One message = one step: its text, then each call as its own assistant part and tool/call.
    calls = by_type(session, "tool/call")
    assert [c["data"]["name"] for c in calls] == [
        "cli_help", "run_shell_command", "cli_help", "read_file", "cli_help", "grep_search"]
    results = {r["data"]["message"]["content"][0]["toolCallId"]: r
               for r in by_type(session, "tool/result")}
    assert set(results) == {c["data"]["callId"] for c in calls}
    for call in calls:
        result = results[call["data"]["callId"]]
        assert (result["data"]["turn"], result["data"]["step"]) == (call["data"]["turn"],
                                                                    call["data"]["step"])
    # Every message is kept: the message's own fields on its first event, each finished call's
    # record on its result.
    raws = [e["data"]["raw"] for e in with_raw(session)]
    ids = {r.get("id") for r in raws}
    assert {m["id"] for m in document(GEMINI_MAIN)["messages"]} <= ids
    assert {c["data"]["callId"] for c in calls} <= ids


def test_a_failing_tool_keeps_its_error_searchable_and_reasoning_is_not_indexed() -> None:
    session = _one(GEMINI_MAIN)
    (failed,) = [r for r in by_type(session, "tool/result") if r["data"].get("error")]
    assert failed["data"]["error"] == {"name": "ToolError", "code": "TOOL_ERROR"}
    assert failed["data"]["message"]["content"][0]["isError"] is True
    text = extract_text(failed)
    assert 'Tool "run_shell_command" not found' in text and "ToolError" in text
    thinking = next(e for e in by_type(session, "assistant/message")
                    if e["data"]["message"]["content"]
                    and e["data"]["message"]["content"][0]["type"] == "reasoning")
    reasoning = thinking["data"]["message"]["content"][0]["text"]
    assert reasoning.startswith("Gathering Token Data: ")
    assert reasoning not in extract_text(thinking)
    assert "I will use the `cli_help` tool" in extract_text(thinking)


def test_subagent_runs_are_child_sessions_and_a_summary_titles_them() -> None:
    first, second = _one(GEMINI_SUB1), _one(GEMINI_SUB2)
    assert first.header["id"] == f"{MAIN_ID}/subagent-20260318T014714412Z"
    assert second.header["id"] == f"{MAIN_ID}/subagent-20260318T014906406Z"
    for child in (first, second):
        assert child.header["parentSession"] == MAIN_ID
        assert child.header["origin"] == "subagent" and child.header["delegationDepth"] == 1
        assert child.header["cwd"] == "/home/kingb/aim"  # verified from paths in the prompts
    assert not by_type(first, "session/title")
    (title,) = by_type(second, "session/title")
    assert title["data"] == {"title": "Get Gemini CLI token usage details.", "via": "summary",
                             "sourceKey": "title:Get Gemini CLI token usage details."}
    assert title["seq"] == len(second.events) - 1


def test_legacy_2025_format_and_its_failing_replace() -> None:
    session = _one(GEMINI_2025)
    assert session.header["cwd"] == "/Users/yoavfarhi/dev/pomodoro/gemini"
    prompts = [e for e in by_type(session, "user/message") if e["data"]["source"]["kind"] == "user"]
    assert len(prompts) == 5
    assert len(by_type(session, "tool/call")) == 11
    (failed,) = [r for r in by_type(session, "tool/result") if r["data"].get("error")]
    assert by_type(session, "tool/call")[[c["data"]["callId"] for c in by_type(
        session, "tool/call")].index(failed["data"]["message"]["content"][0]["toolCallId"])][
        "data"]["name"] == "replace"
    assert_steps_announced(session)


def test_api_errors_end_their_turn_searchably_and_notices_stay_log_only() -> None:
    session = _one(GEMINI_ERRORS)
    ends = by_type(session, "turn/end")
    assert [e["data"]["reason"] for e in ends] == ["error"] * 3
    assert all("[API Error: Requested entity was not found.]" in extract_text(e) for e in ends)
    notices = by_type(session, "gemini-cli/info")
    assert len(notices) == 7 and all(n["ignorable"] is True for n in notices)
    assert notices[0]["data"]["text"] == "Model set to gemini-3.1-flash"


def test_workspace_is_only_what_the_project_hash_verifies(tmp_path: Path) -> None:
    doc = document(GEMINI_MAIN)
    # An unknown hash: nothing verifies, so there is no cwd (never a guess).
    unknown = {**doc, "projectHash": "0" * 64}
    (session,) = import_gemini_document(orjson.dumps(unknown), "/x/chats/s.json")
    assert "cwd" not in session.header
    # Gemini's own marker beside chats/ names the root, checked against the hash as well.
    root = "/srv/checkout/project"
    chats = tmp_path / "project" / "chats"
    chats.mkdir(parents=True)
    (chats.parent / ".project_root").write_text(root + "\n")
    marked = {**doc, "projectHash": hashlib.sha256(root.encode()).hexdigest(), "messages":
              doc["messages"][:1]}
    (session,) = import_gemini_document(orjson.dumps(marked), str(chats / "session-x.json"))
    assert session.header["cwd"] == root
    (chats.parent / ".project_root").write_text("/somewhere/else")
    (session,) = import_gemini_document(orjson.dumps(marked), str(chats / "session-x.json"))
    assert "cwd" not in session.header


def test_jsonl_chat_rewrites_add_only_what_is_new() -> None:
    data = agent(GEMINI_JSONL)
    (session,) = import_gemini_jsonl(data, "/h/.gemini/tmp/discordbot/chats/session-x.jsonl")
    assert_valid_log(session)
    assert session.rejections == []
    assert session.header["id"] == "gemini-cli:0ab84937-9fe7-4284-986a-33c832af0b6a"
    assert session.header["cwd"] == "/home/wei/repo/discordbot"
    lines = [orjson.loads(line) for line in data.splitlines()]
    kept = [e["data"]["raw"] for e in with_raw(session)]
    assert kept == lines  # every line kept whole, once, in order
    calls = by_type(session, "tool/call")
    assert len(calls) == 12 == len({c["data"]["callId"] for c in calls})
    assert len(by_type(session, "tool/result")) == 12
    # `/init` as typed, then its expansion; a synthetic continuation is context, not a prompt.
    users = by_type(session, "user/message")
    assert [(u["data"]["source"]["kind"], u["data"]["content"][0]["text"][:30]) for u in users][
        :2] == [("user", "/init"), ("plugin", "\nYou are an AI agent that brin")]
    continued = next(u for u in users if u["data"]["content"][0]["text"] ==
                     "System: Please continue.")
    assert continued["data"]["source"] == {"kind": "plugin", "plugin": "gemini-cli-meta"}
    assert [u["data"]["source"]["kind"] for u in users].count("user") == 2
    assert_steps_announced(session)


def test_jsonl_import_of_any_prefix_is_a_prefix_of_the_events() -> None:
    data = agent(GEMINI_JSONL)
    (full,) = import_gemini_jsonl(data, "s.jsonl")
    cuts = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    for cut in cuts[1:]:
        (part,) = import_gemini_jsonl(data[:cut], "s.jsonl")
        # The cwd is verified from paths that appear only after the first prompt; an earlier
        # import has none, and the ingest edge then keeps that first header (late_cwd).
        assert IMPORTERS["gemini-cli-jsonl"].settle_header(part.header, full.header) \
            == part.header
        assert part.events == full.events[:len(part.events)], cut


def test_detection_by_content_and_name() -> None:
    for name in (GEMINI_MAIN, GEMINI_SUB1, GEMINI_2025, GEMINI_ERRORS):
        assert detect_format(f"/any/{Path(name).name}", agent(name)[:65536]) == "gemini-cli"
    assert detect_format("/any/x.jsonl", agent(GEMINI_JSONL)[:65536]) == "gemini-cli-jsonl"
    assert detect_format("/h/.gemini/tmp/p/chats/session-1.json", b"") == "gemini-cli"
    assert IMPORTERS["gemini-cli"].whole_document is True
    assert IMPORTERS["gemini-cli-jsonl"].whole_document is False
