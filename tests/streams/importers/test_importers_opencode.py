"""OpenCode: real export documents (a tool error, a running subagent task, a child session),
the storage layout, growth of a rewritten document, and compaction."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
from importer_support import (
    OPENCODE_CHILD,
    OPENCODE_ERROR,
    OPENCODE_RUNNING,
    agent,
    assert_steps_announced,
    assert_valid_log,
    by_type,
    document,
    surfaces,
    types,
)

from projections import extract_text, fold_surface
from streams.ingest.importers import IMPORTERS, detect_format
from streams.ingest.importers.documents import extend_events
from streams.ingest.importers.opencode import import_opencode


def _one(doc: dict[str, Any] | bytes, name: str = "/x/ses_a.json") -> Any:
    data = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    (session,) = import_opencode(data, name)
    assert_valid_log(session)
    assert session.rejections == []
    return session


def test_a_session_with_steps_reasoning_and_a_failing_tool() -> None:
    session = _one(agent(OPENCODE_ERROR))
    assert session.header == {"type": "session", "version": 0,
                              "id": "opencode:ses_20be19bd6ffeHn5B6DdBVxU8TR",
                              "createdAt": 1777917125673,
                              "cwd": "/Users/t798157/Projects/lab/gatomia-vscode",
                              "delegationDepth": 0}
    kinds = types(session)
    # 14 step-start parts: the first joins the step the prompt opened.
    assert kinds["step/start"] == 14 and kinds["opencode/step-start"] == 1
    assert kinds["step/end"] == 14 and kinds["tool/call"] == kinds["tool/result"] == 13
    assert_steps_announced(session)
    (failed,) = [r for r in by_type(session, "tool/result") if r["data"].get("error")]
    assert failed["data"]["message"]["content"][0]["isError"] is True
    assert "ToolError" in extract_text(failed)
    state = next(p["state"] for m in document(OPENCODE_ERROR)["messages"] for p in m["parts"]
                 if p["type"] == "tool" and p["state"]["status"] == "error")
    assert state["error"][:60] in extract_text(failed)
    thought = next(e for e in by_type(session, "assistant/message")
                   if e["data"]["message"]["content"][0]["type"] == "reasoning")
    assert extract_text(thought) == ""  # kept, never indexed
    (title,) = by_type(session, "session/title")
    assert title["data"]["title"] == "Playbook task execution and synopsis format"
    (prompt,) = by_type(session, "user/message")
    assert prompt["data"]["source"] == {"kind": "user"}


def test_a_running_task_gets_its_result_when_the_document_grows() -> None:
    doc = document(OPENCODE_RUNNING)
    before = _one(doc)
    running = [p for m in doc["messages"] for p in m["parts"]
               if p["type"] == "tool" and p["state"]["status"] == "running"]
    assert [p["tool"] for p in running] == ["task"]
    assert len(by_type(before, "tool/call")) == len(by_type(before, "tool/result")) + 1
    grown = copy.deepcopy(doc)
    task = next(p for m in grown["messages"] for p in m["parts"] if p.get("tool") == "task")
    task["state"] = {**task["state"], "status": "completed", "output": "explored the repo"}
    grown["messages"].append({"info": {"id": "msg_zz", "role": "user",
                                       "time": {"created": 1777908400000}},
                              "parts": [{"id": "prt_zz", "type": "text", "text": "thanks"}]})
    after = _one(grown)
    added = extend_events(before.events, after.events)
    # The finished task's result and the new prompt; nothing imported before comes again.
    assert [e["type"] for e in added] == ["tool/result", "opencode/message", "step/start",
                                          "user/message"]
    assert added[0]["seq"] == len(before.events)
    assert_valid_log(type(before)(before.header, before.events + added, []))


def test_a_child_session_has_its_parent() -> None:
    session = _one(agent(OPENCODE_CHILD))
    assert session.header["parentSession"] == "opencode:ses_2bef27598ffe7m6Lx2BIiN92bh"
    assert session.header["origin"] == "subagent" and session.header["delegationDepth"] == 1
    (title,) = by_type(session, "session/title")
    assert title["data"]["title"] == "Explore codebase for context (@explore subagent)"
    assert len(by_type(session, "tool/call")) == 14


def test_placeholder_titles_are_not_titles() -> None:
    doc = document(OPENCODE_CHILD)
    doc["info"]["title"] = "New session - 2026-03-30T23:21:47.722Z"
    assert not by_type(_one(doc), "session/title")


def test_compaction_shadows_the_messages_before_it() -> None:
    """The shape FORMATS.md describes (no capture is small enough to keep), built on a real
    session: a user message whose only part is `compaction`, an assistant `summary: true`
    message with the summary, then a synthetic "continue" prompt."""
    doc = document(OPENCODE_CHILD)
    sid = doc["info"]["id"]
    doc["messages"] += [
        {"info": {"id": "msg_c1", "sessionID": sid, "role": "user",
                  "time": {"created": 1774912921000}},
         "parts": [{"id": "prt_c1", "type": "compaction", "auto": True, "overflow": False}]},
        {"info": {"id": "msg_c2", "sessionID": sid, "role": "assistant", "mode": "compaction",
                  "agent": "compaction", "summary": True, "providerID": "anthropic",
                  "modelID": "claude-sonnet-4", "tokens": {"input": 41000, "output": 900},
                  "time": {"created": 1774912922000}},
         "parts": [{"id": "prt_c2", "type": "step-start"},
                   {"id": "prt_c3", "type": "text",
                    "text": "Summary: explored the session-bridge codebase layout."},
                   {"id": "prt_c4", "type": "step-finish", "reason": "stop"}]},
        {"info": {"id": "msg_c3", "sessionID": sid, "role": "user",
                  "time": {"created": 1774912923000}},
         "parts": [{"id": "prt_c5", "type": "text", "synthetic": True,
                    "text": "Continue if you have next steps"}]}]
    session = _one(doc)
    kinds = [e["type"] for e in session.events]
    start = kinds.index("compaction/start")
    summary = kinds.index("compaction/summary")
    checkpoint = session.events[summary + 1]
    assert kinds[summary + 2] == "compaction/end"
    before = fold_surface(session.events[:start]).nodes
    assert checkpoint["surfaceOp"] == {"op": "replace", "start": before[0], "end": before[-1]}
    assert checkpoint["data"]["source"]["plugin"] == "compact"
    assert "session-bridge codebase layout" in extract_text(checkpoint)
    assert {surfaces(session)[s] for s in before} == {"shadowed"}
    assert session.events[summary]["data"]["shadowedTokenCount"] == 41000
    cont = by_type(session, "user/message")[-1]
    assert cont["data"]["source"] == {"kind": "plugin", "plugin": "opencode-meta"}


def test_opencode_storage_layout_reads_like_the_export(tmp_path: Path) -> None:
    doc = document(OPENCODE_CHILD)
    storage = tmp_path / "storage"
    info = doc["info"]
    session_file = storage / "session" / info["projectID"] / f"{info['id']}.json"
    session_file.parent.mkdir(parents=True)
    session_file.write_bytes(orjson.dumps(info))
    for message in doc["messages"]:
        mid = message["info"]["id"]
        (storage / "message" / info["id"]).mkdir(parents=True, exist_ok=True)
        (storage / "message" / info["id"] / f"{mid}.json").write_bytes(
            orjson.dumps(message["info"]))
        (storage / "part" / mid).mkdir(parents=True)
        for part in message["parts"]:
            (storage / "part" / mid / f"{part['id']}.json").write_bytes(orjson.dumps(part))
    from_storage = _one(session_file.read_bytes(), str(session_file))
    from_export = _one(doc)
    assert from_storage.header == from_export.header
    assert from_storage.events == from_export.events
    assert detect_format(session_file, session_file.read_bytes()) == "opencode"


def test_detection_and_registry() -> None:
    for name in (OPENCODE_ERROR, OPENCODE_RUNNING, OPENCODE_CHILD):
        assert detect_format(f"/x/{Path(name).name}", agent(name)[:65536]) == "opencode"
    assert IMPORTERS["opencode"].whole_document is True


def test_storage_ids_never_become_paths(tmp_path: Path) -> None:
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "x.json").write_bytes(b'{"id": "msg_x", "role": "user"}')
    session_file = tmp_path / "storage" / "session" / "p" / "ses_a.json"
    session_file.parent.mkdir(parents=True)
    info = {"id": "../../../secret", "projectID": "p", "directory": "/w",
            "time": {"created": 1}}
    session_file.write_bytes(orjson.dumps(info))
    (session,) = import_opencode(session_file.read_bytes(), str(session_file))
    assert not by_type(session, "opencode/message")
