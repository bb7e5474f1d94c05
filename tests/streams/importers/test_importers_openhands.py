"""OpenHands: a real event trajectory (Jan 2025): a prompt, agent state changes, shell runs (one
times out, exit code -1), file edits with their diffs, the final message."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
from click.testing import CliRunner
from importer_support import AGENTS, OPENHANDS, agent, assert_valid_log, by_type, with_raw

from projections import extract_text
from streams.faces.cli.main import main
from streams.ingest.importers import ImportedSession, detect_format
from streams.ingest.importers.openhands import import_openhands


def _session() -> ImportedSession:
    (session,) = import_openhands(agent(OPENHANDS), "/t/basic_gui_mode.json")
    assert_valid_log(session)
    assert session.rejections == []
    return session


def test_prompt_calls_results_and_exit_codes() -> None:
    session = _session()
    assert session.header["id"] == "openhands:basic_gui_mode"  # named by its file
    assert session.header["createdAt"] == 1737404953519  # 2025-01-20T20:29:13.519638 (UTC)
    assert len(with_raw(session)) == 18  # every event kept
    (prompt,) = by_type(session, "user/message")
    assert extract_text(prompt).startswith("I want to create a VueJS app")
    calls = by_type(session, "tool/call")
    assert [c["data"]["name"] for c in calls] == ["execute_bash", "str_replace_editor",
                                                  "str_replace_editor", "execute_bash"]
    assert calls[0]["data"]["arguments"]["command"] == "mkdir -p /workspace/todo-app"
    results = by_type(session, "tool/result")
    ids = [r["data"]["message"]["content"][0]["toolCallId"] for r in results]
    assert ids == [c["data"]["callId"] for c in calls]
    timed_out = results[-1]
    assert timed_out["data"]["error"] == {"name": "ToolError", "code": "EXIT_-1"}
    assert "no new output after 30 seconds" in extract_text(timed_out)
    assert "+++ /workspace/todo-app/index.html" in extract_text(results[1])  # the edit's diff
    replies = by_type(session, "assistant/message")
    assert extract_text(replies[0]).startswith("I'll help you create a Vue.js application")
    assert replies[0]["data"]["usage"]["prompt_tokens"] == 3439
    assert extract_text(replies[-1]).startswith("I've created a complete Vue.js todo")


def test_agent_states_and_the_turn_end() -> None:
    session = _session()
    states = [e["data"]["state"] for e in by_type(session, "openhands/agent_state")]
    assert states == ["loading", "init", "running", "awaiting_user_input"]
    (end,) = by_type(session, "turn/end")
    assert end["data"] == {"turn": 0, "reason": "completed", "sourceKey": "event:17/end"}


def test_recall_ingest_of_a_trajectory(tmp_path: Path) -> None:
    assert detect_format(Path("t.json"), agent(OPENHANDS)[:4096]) == "openhands"
    (tmp_path / "in").mkdir()
    shutil.copy(AGENTS / OPENHANDS, tmp_path / "in" / "basic_gui_mode.json")
    runner = CliRunner()
    data = str(tmp_path / "data")
    result = runner.invoke(main, ["--data-dir", data, "ingest", str(tmp_path / "in"), "--json"])
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    assert report["rejected"] == 0 and report["accounting"]["parked"] == 0, report
    (item,) = orjson.loads(runner.invoke(main, ["--data-dir", data, "sessions",
                                                "--json"]).stdout)
    assert item["title"].startswith("I want to create a VueJS app")
