"""Roo Code: a real task folder (Aug–Sep 2025): `ui_messages.json` (what the person saw, with a
`condense_context` compaction, MCP calls, a cancelled request) and `api_conversation_history.json`
(the model's context, with the `isSummary` compaction summary)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner
from importer_support import AGENTS, ROO_API, ROO_UI, agent, assert_valid_log, by_type, surfaces

from projections import extract_text
from streams.faces.cli.main import main
from streams.ingest.importers import ImportedSession, detect_format
from streams.ingest.importers.roo_code import import_roo_api, import_roo_ui

TASK = "ac8aa7b4-319c-4925-a139-4f4adca81921"
SOURCE = f"/h/globalStorage/rooveterinaryinc.roo-cline/tasks/{TASK}/"


def _one(sessions: list[ImportedSession]) -> ImportedSession:
    (session,) = sessions
    assert_valid_log(session)
    assert session.rejections == []
    return session


def test_the_task_as_the_person_saw_it() -> None:
    session = _one(import_roo_ui(agent(ROO_UI), SOURCE + "ui_messages.json"))
    assert session.header == {"type": "session", "version": 0, "id": f"roo-code:{TASK}",
                              "createdAt": 1755635332197, "delegationDepth": 0}
    users = [u for u in by_type(session, "user/message")
             if u["data"]["source"] == {"kind": "user"}]
    assert extract_text(users[0]).startswith("Bonjour, je suis en train de réinstaller")
    assert any(u["data"]["source"] == {"kind": "plugin", "plugin": "roo-code-subtask"}
               for u in by_type(session, "user/message"))
    blocks = [b for a in by_type(session, "assistant/message")
              for b in a["data"]["message"]["content"]]
    assert {"text", "reasoning", "tool-call"} <= {b["type"] for b in blocks}
    names = {c["data"]["name"] for c in by_type(session, "tool/call")}
    assert {"updateTodoList", "newTask", "mcp:roo-state-manager/view_conversation_tree"} <= names
    # an MCP call's response is its result, in the call's step
    call = next(c for c in by_type(session, "tool/call") if c["data"]["name"].startswith("mcp:"))
    result = by_type(session, "tool/result")[0]
    assert result["data"]["message"]["content"][0]["toolCallId"] == call["data"]["callId"]
    assert "Conversation Tree" in extract_text(result)
    # a request the person cancelled ends the turn; its stats are kept
    (end,) = by_type(session, "turn/end")
    assert end["data"]["reason"] == "aborted"
    stats = [e["data"] for e in by_type(session, "roo-code/api_req_started")]
    assert any(s.get("cancelReason") == "user_cancelled" for s in stats)
    assert all("tokensIn" in s and "cost" in s for s in stats)


def test_condense_context_shadows_all_but_the_task_prompt() -> None:
    session = _one(import_roo_ui(agent(ROO_UI), SOURCE + "ui_messages.json"))
    (summary,) = by_type(session, "compaction/summary")
    state = surfaces(session)
    first = next(e["seq"] for e in session.events if e["type"] == "user/message")
    shadowed = summary["data"]["shadowedSeqs"]
    assert first not in shadowed and state[first] == "current"
    assert shadowed and all(state[s] == "shadowed" for s in shadowed)
    assert summary["data"]["shadowedTokenCount"] == 151255
    checkpoint = next(u for u in by_type(session, "user/message")
                      if u["data"]["source"].get("plugin") == "compact")
    assert state[checkpoint["seq"]] == "current"
    assert extract_text(checkpoint).startswith("### 1. Previous Conversation")


def test_the_model_context_with_its_summary_and_tool_results() -> None:
    session = _one(import_roo_api(agent(ROO_API), SOURCE + "api_conversation_history.json"))
    assert session.header["id"] == f"roo-code:{TASK}:api"
    assert session.header["parentSession"] == f"roo-code:{TASK}"
    (summary,) = by_type(session, "compaction/summary")
    assert summary["data"]["summary"].startswith("### 1. Previous Conversation")
    results = by_type(session, "tool/result")
    calls = by_type(session, "tool/call")
    assert len(results) == len(calls) >= 3
    assert calls[0]["data"]["name"] == "attempt_completion"
    assert extract_text(results[0]).startswith("[attempt_completion] Result:")


def test_detection_and_lineage_through_recall_ingest(tmp_path: Path) -> None:
    assert detect_format(Path("ui_messages.json"), agent(ROO_UI)[:4096]) == "roo-code"
    assert detect_format(Path(SOURCE + "api_conversation_history.json"),
                         agent(ROO_API)[:4096]) == "roo-code-api"
    shutil.copytree(AGENTS / "roo-code" / TASK, tmp_path / "tasks" / TASK)
    data = tmp_path / "data"

    def run(*args: str) -> Any:
        result = CliRunner().invoke(main, ["--data-dir", str(data), *args, "--json"])
        assert result.exit_code == 0, result.output
        return orjson.loads(result.stdout)

    report = run("ingest", str(tmp_path / "tasks"))
    assert report["rejected"] == 0 and report["accounting"]["parked"] == 0, report
    listed = {i["header"]["id"]: i for i in run("sessions")}
    assert set(listed) == {f"roo-code:{TASK}", f"roo-code:{TASK}:api"}
    assert listed[f"roo-code:{TASK}"]["title"].startswith("Bonjour, je suis en train")


def test_a_rewritten_task_that_grew_adds_only_what_is_new(tmp_path: Path) -> None:
    """Roo Code rewrites ui_messages.json whole as the task goes on."""
    records = orjson.loads(agent(ROO_UI))
    target = tmp_path / "tasks" / TASK / "ui_messages.json"
    target.parent.mkdir(parents=True)
    target.write_bytes(orjson.dumps(records[:24]))
    data = tmp_path / "data"

    def run(*args: str) -> Any:
        result = CliRunner().invoke(main, ["--data-dir", str(data), *args, "--json"])
        assert result.exit_code == 0, result.output
        return orjson.loads(result.stdout)

    first = run("ingest", str(tmp_path / "tasks"))
    target.write_bytes(orjson.dumps(records))
    grown = run("ingest", str(tmp_path / "tasks"))
    assert grown["rejected"] == 0 and grown["rewritten"] == [], grown
    whole = _one(import_roo_ui(agent(ROO_UI), SOURCE + "ui_messages.json"))
    assert first["eventsAdded"] + grown["eventsAdded"] == len(whole.events)
