"""Every supported agent through `recall ingest` end to end: the layouts agents write (found by
walking a home directory), growth of rewritten documents, re-imports under a changed mapping,
and the current-session clamp of PROTOCOL §6.2 on imported sessions."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from importer_support import (
    AGENTS,
    AIDER,
    CC_2114,
    CODEX,
    COPILOT,
    COPILOT_LEGACY,
    DATA,
    GEMINI_JSONL,
    GEMINI_MAIN,
    GEMINI_SUB1,
    GEMINI_SUB2,
    OPENCODE_CHILD,
    OPENCODE_ERROR,
    document,
    records,
    to_bytes,
)

from streams.facade import Recall
from streams.faces.cli.main import main
from streams.faces.mcp import Caller, SessionTools
from streams.ingest.importers import default_locations


def run(data: Path, *args: str) -> Any:
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args, "--json"])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def _home(tmp_path: Path) -> Path:
    """The real excerpts placed where each agent writes them."""
    home = tmp_path / "home"
    place = {
        GEMINI_MAIN: ".gemini/tmp/aim/chats/session-2026-03-18T01-46-50316244.json",
        GEMINI_SUB1: ".gemini/tmp/aim/chats/session-2026-03-18T01-47-50316244.json",
        GEMINI_SUB2: ".gemini/tmp/aim/chats/session-2026-03-18T01-49-50316244.json",
        GEMINI_JSONL: ".gemini/tmp/discordbot/chats/session-2026-04-23T12-52-0ab84937.jsonl",
        COPILOT: ".copilot/session-state/96ef38f0-9d09-45c3-8124-6448c36090ed/events.jsonl",
        COPILOT_LEGACY: ".copilot/history-session-state/06141331.json",
        OPENCODE_ERROR: ".local/share/opencode/storage/session/p/ses_20be19bd6ffeHn5B6DdBVxU8TR.json",
        OPENCODE_CHILD: "exports/ses_2bef25635ffe8EzID0I1Oeymal.json",
        AIDER: "src/afi-core/.aider.chat.history.md",
    }
    for name, where in place.items():
        target = home / where
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(AGENTS / name, target)
    (home / ".gemini/tmp/aim/logs.json").write_text("[]")  # not a chat: not picked up
    (home / ".claude/projects/-w").mkdir(parents=True)
    shutil.copy(DATA / CC_2114, home / ".claude/projects/-w" / CC_2114)
    (home / ".codex/sessions/2026").mkdir(parents=True)
    shutil.copy(DATA / CODEX, home / ".codex/sessions/2026" / CODEX)
    return home


def test_every_agent_ingests_from_where_it_writes(tmp_path: Path) -> None:
    home = _home(tmp_path)
    data = tmp_path / "data"
    report = run(data, "ingest", str(home))
    assert report["files"] == 11 and report["rejected"] == 0, report
    listing = {i["header"]["id"].split(":", 1)[0] for i in run(data, "sessions")}
    assert listing == {"gemini-cli", "copilot-cli", "opencode", "aider", "claude-code", "codex"}
    # A failing tool's error text is searchable, per agent.
    for text, prefix in (('Tool \\"run_shell_command\\" not found', "gemini-cli:"),
                         ("SchemaError(Missing key", "opencode:")):
        page = run(data, "search", text)
        hit = page["items"][0]["bestMatch"]
        assert hit["type"] == "tool/result" and hit["sessionId"].startswith(prefix), text
    # Lineage: Gemini subagent runs and the OpenCode child point at their parents.
    children = [i["header"] for i in run(data, "sessions") if i["header"].get("parentSession")]
    assert sorted(c["parentSession"] for c in children) == [
        "gemini-cli:50316244-145e-46cb-b42b-db11410ad87a",
        "gemini-cli:50316244-145e-46cb-b42b-db11410ad87a",
        "opencode:ses_2bef27598ffe7m6Lx2BIiN92bh"]
    lineage = run(data, "trace", next(c["id"] for c in children
                                      if c["id"].startswith("gemini-cli:")))
    assert lineage["ancestors"][0]["id"] == "gemini-cli:50316244-145e-46cb-b42b-db11410ad87a"
    assert run(data, "ingest", str(home))["unchanged"] == 11


def test_format_choices_come_from_the_registry(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["ingest", "--help"])
    for name in ("gemini-cli", "gemini-cli-jsonl", "copilot-cli", "copilot-cli-legacy",
                 "opencode", "aider", "claude-code", "codex"):
        assert name in result.output
    source = tmp_path / "history.md"
    shutil.copy(AGENTS / AIDER, source)
    assert run(tmp_path / "d", "ingest", "--format", "aider", str(source))["sessions"] == 5


def test_default_locations_per_agent(tmp_path: Path) -> None:
    found = default_locations({}, tmp_path)
    assert found["claude-code"] == [tmp_path / ".claude/projects"]
    assert found["codex"] == [tmp_path / ".codex/sessions", tmp_path / ".codex/archived_sessions"]
    assert found["gemini-cli"] == found["gemini-cli-jsonl"] == [tmp_path / ".gemini/tmp"]
    assert found["copilot-cli"] == [tmp_path / ".copilot/session-state"]
    assert found["opencode"] == [tmp_path / ".local/share/opencode/storage/session"]
    assert found["aider"] == []  # Aider writes its history inside each project
    moved = default_locations({"CLAUDE_CONFIG_DIR": "/cfg/claude", "CODEX_HOME": "/c",
                               "COPILOT_HOME": "/cp", "XDG_DATA_HOME": "/xdg"}, tmp_path)
    assert moved["claude-code"] == [Path("/cfg/claude/projects")]
    assert moved["codex"][0] == Path("/c/sessions")
    assert moved["copilot-cli"] == [Path("/cp/session-state")]
    assert moved["opencode"] == [Path("/xdg/opencode/storage/session")]


def test_default_locations_of_pi_continue_kimi_roo_and_the_per_project_agents(
        tmp_path: Path) -> None:
    found = default_locations({}, tmp_path)
    assert found["pi"] == [tmp_path / ".pi/agent/sessions"]
    assert found["continue"] == [tmp_path / ".continue/sessions"]
    assert found["kimi-cli"] == [tmp_path / ".kimi/sessions"]
    vscode = "Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks"
    assert found["roo-code"][:2] == [tmp_path / ".config" / vscode,
                                     tmp_path / "Library/Application Support" / vscode]
    assert found["roo-code-api"] == found["roo-code"]
    assert found["crush"] == found["openhands"] == []  # in each project / saved trajectories
    moved = default_locations({"CONTINUE_GLOBAL_DIR": "/cont", "APPDATA": "/appdata"}, tmp_path)
    assert moved["continue"] == [Path("/cont/sessions")]
    assert moved["roo-code"][0] == Path("/appdata") / vscode


@pytest.mark.parametrize("name", [GEMINI_MAIN, OPENCODE_ERROR])
def test_a_rewritten_document_that_grew_adds_only_what_is_new(tmp_path: Path, name: str) -> None:
    doc = document(name)
    key = "messages"
    early = copy.deepcopy(doc)
    early[key] = doc[key][:3]
    if name == GEMINI_MAIN:  # the last message's tool calls had not finished yet
        early[key][-1].pop("toolCalls", None)
        early.pop("summary", None)
    else:
        early["info"]["title"] = "New session - 2026-05-04T17:52:05.673Z"
    source = tmp_path / "chats" / Path(name).name
    source.parent.mkdir()
    source.write_bytes(orjson.dumps(early, option=orjson.OPT_INDENT_2))
    first = run(tmp_path / "data", "ingest", str(source))
    source.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    grown = run(tmp_path / "data", "ingest", str(source))
    assert grown["rewritten"] == [] and grown["rejected"] == 0, grown
    clean = run(tmp_path / "clean", "ingest", str(source))
    assert first["eventsAdded"] + grown["eventsAdded"] == clean["eventsAdded"]
    with Recall.open(tmp_path / "data") as a, Recall.open(tmp_path / "clean") as b:
        sid = b.list_sessions()[0]["header"]["id"]
        assert len(a.read_session(sid)["events"]) == len(b.read_session(sid)["events"])
        got = {e["data"].get("sourceKey") for e in a.read_session(sid)["events"]}
        assert got == {e["data"].get("sourceKey") for e in b.read_session(sid)["events"]}
    assert run(tmp_path / "data", "ingest", str(source))["unchanged"] == 1


def test_a_gemini_cwd_found_later_keeps_the_first_header(tmp_path: Path) -> None:
    lines = (AGENTS / GEMINI_JSONL).read_bytes().splitlines(keepends=True)
    source = tmp_path / "chats" / "session-x.jsonl"
    source.parent.mkdir()
    source.write_bytes(b"".join(lines[:4]))  # the header and the first prompt: no path yet
    first = run(tmp_path / "data", "ingest", str(source))
    source.write_bytes(b"".join(lines))
    grown = run(tmp_path / "data", "ingest", str(source))
    assert grown["rejected"] == 0 and grown["eventsAdded"] > 0 and first["eventsAdded"] > 0
    (session,) = run(tmp_path / "data", "sessions")
    assert "cwd" not in session["header"]
    run(tmp_path / "clean", "ingest", str(source))
    (clean,) = run(tmp_path / "clean", "sessions")
    assert clean["header"]["cwd"] == "/home/wei/repo/discordbot"


def test_a_file_imported_under_another_mapping_is_reported_once(tmp_path: Path) -> None:
    """A session stored by an older importer version (no step/start events here) is not
    merged with a re-import of its grown file: one rewrite report, no cascade of conflicts."""
    lines = records(CC_2114)
    source = tmp_path / "p" / "839b35f7-4dbd-4d93-9772-3c272cc87caa.jsonl"
    source.parent.mkdir()
    source.write_bytes(to_bytes(lines[:30]))
    data = tmp_path / "data"
    run(data, "ingest", str(source))
    with Recall.open(data) as recall:
        (item,) = recall.list_sessions()
        sid = item["header"]["id"]
        stored = recall.read_session(sid)["events"]
    # Rewrite the stored log as the previous mapping made it: without step/start events.
    old = [e for e in stored if e["type"] != "step/start"]
    assert len(old) < len(stored)
    store_file = next((data / "store").rglob("*.jsonl"))
    header = store_file.read_bytes().split(b"\n", 1)[0]
    renumbered = [{**e, "seq": i} for i, e in enumerate(old)]
    assert all("surfaceOp" not in e or e["surfaceOp"] == "append" for e in renumbered)
    store_file.write_bytes(header + b"\n" + b"".join(orjson.dumps(e) + b"\n" for e in renumbered))
    source.write_bytes(to_bytes(lines))
    report = run(data, "ingest", str(source))
    assert report["rewritten"] == [str(source.resolve())]
    assert report["rejectedByCode"] == {"INGEST_REWRITTEN_SOURCE": 1}
    assert report["eventsAdded"] == 0


def _calls_tool(record: dict[str, Any]) -> bool:
    """The agent is running a tool call once this record is written."""
    message = record.get("message")
    payload = record.get("payload")
    return (record.get("type") == "assistant" and isinstance(message, dict) and any(
        isinstance(b, dict) and b.get("type") == "tool_use" for b in message.get("content", [])
    )) or (record.get("type") == "response_item" and isinstance(payload, dict)
           and payload.get("type") == "function_call") or (
        record.get("type") == "tool.execution_start")


@pytest.mark.parametrize("name", [CC_2114, CODEX, COPILOT])
def test_the_current_step_clamp_works_on_imported_sessions(tmp_path: Path, name: str) -> None:
    """PROTOCOL §6.2: an imported session searching its own history finds what came before the
    step it is running, and nothing of that step (its own tool call included)."""
    lines = records(name) if name in (CC_2114, CODEX) else [
        orjson.loads(line) for line in (AGENTS / name).read_bytes().splitlines()]
    # Cut right after a tool call of a later step: the agent is running that call now.
    calls = [i for i, r in enumerate(lines) if _calls_tool(r)]
    cut = calls[len(calls) // 2]
    source = tmp_path / "session-state" / "96ef38f0-9d09-45c3-8124-6448c36090ed" / (
        "839b35f7-4dbd-4d93-9772-3c272cc87caa.jsonl" if name == CC_2114 else
        "rollout-x.jsonl" if name == CODEX else "events.jsonl")
    source.parent.mkdir(parents=True)
    source.write_bytes(to_bytes(lines[:cut + 1]))
    with Recall.open(tmp_path / "data") as recall:
        recall.ingest([source])
        (item,) = recall.list_sessions()
        sid = item["header"]["id"]
        cwd = str(item["header"]["cwd"])
        events = recall.read_session(sid)["events"]
        last_step = max(e["seq"] for e in events if e["type"] == "step/start")
        call = next(e for e in reversed(events) if e["type"] == "tool/call")
        assert call["seq"] > last_step
        tools = SessionTools(recall)
        text = tools.call("session_event_search", {"query": call["data"]["name"]},
                          Caller(sid, cwd)).text
        assert "no step to search before" not in text
        seqs = [int(part.split(" |")[0]) for part in text.split("seq ")[1:]]
        assert seqs and max(seqs) < last_step


def test_an_imported_event_over_the_line_cap_is_parked(tmp_path: Path) -> None:
    """A record under RECALL_MAX_EVENT_BYTES can map to a larger event (data.raw beside the
    mapped content): it is parked as INGEST_OVERSIZED_EVENT, as the Kafka fold parks its line;
    the events before it are stored."""
    source = tmp_path / "chats" / "session-2026-03-18T01-46-50316244.json"
    source.parent.mkdir()
    shutil.copy(AGENTS / GEMINI_MAIN, source)
    with Recall.open(tmp_path / "small", max_event_bytes=4096) as small, \
            Recall.open(tmp_path / "large") as large:
        kept = small.ingest([source]).to_json()
        whole = large.ingest([source]).to_json()
        letters = small.dead_letters()
        assert [d["code"] for d in letters] == ["INGEST_OVERSIZED_EVENT"]
        assert "the limit is 4096" in letters[0]["reason"]
        assert letters[0]["length"] > 4096  # kept bounded: its length and digest
        (sid,) = [s["header"]["id"] for s in small.list_sessions()]
        stored = small.read_session(sid)["events"]
        assert all(len(orjson.dumps(e)) <= 4096 for e in stored)
        assert kept["eventsAdded"] == whole["eventsAdded"] - 1 == len(stored)
        assert stored == large.read_session(sid)["events"][:len(stored)]
        assert large.dead_letters() == []
