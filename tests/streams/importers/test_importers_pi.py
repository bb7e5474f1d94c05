"""Pi coding agent: a real branched session with two compactions, model and thinking-level
changes, tool errors, aborted turns, an API error and a `!` shell run (excerpt of 59 records)."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
from click.testing import CliRunner
from importer_support import (
    AGENTS,
    agent,
    assert_steps_announced,
    assert_valid_log,
    by_type,
    surfaces,
    with_raw,
)

from projections import extract_text, fold_surface
from streams.faces.cli.main import main
from streams.ingest.importers import IMPORTERS, ImportedSession, detect_format
from streams.ingest.importers.pi import import_pi

PI = "pi/before-compaction.jsonl"
SOURCE = "/h/.pi/agent/sessions/--w--/2025-12-09T00-53-29-825Z_ffae836b.jsonl"
SID = "pi:ffae836b-9420-4060-ac13-7745215f90ff"


def _session(data: bytes | None = None) -> ImportedSession:
    (session,) = import_pi(agent(PI) if data is None else data, SOURCE)
    assert_valid_log(session)
    assert session.rejections == []
    return session


def test_header_cwd_and_branch_lineage() -> None:
    session = _session()
    assert session.header == {
        "type": "session", "version": 0, "id": SID, "createdAt": 1765241609825,
        "cwd": "/Users/badlogic/workspaces/pi-mono",
        # `branchedFrom` names the parent's file: <time>_<session id>.jsonl
        "parentSession": "pi:d97339c6-6c10-4827-846b-9ff1d9c3dc37", "delegationDepth": 0}
    assert len(with_raw(session)) == len(agent(PI).splitlines())  # every record kept
    assert_steps_announced(session)


def test_messages_thinking_tools_and_errors() -> None:
    session = _session()
    users = [u for u in by_type(session, "user/message")
             if u["data"]["source"] == {"kind": "user"}]
    assert extract_text(users[0]).startswith("alright, read @packages/coding-agent")
    assistants = by_type(session, "assistant/message")
    blocks = [b for a in assistants for b in a["data"]["message"]["content"]]
    assert {b["type"] for b in blocks} >= {"text", "reasoning", "tool-call"}
    calls = by_type(session, "tool/call")
    assert calls[0]["data"]["name"] == "read" and calls[0]["data"]["callId"].startswith("toolu_")
    failed = [r for r in by_type(session, "tool/result") if r["data"].get("error")]
    assert len(failed) == 2
    assert failed[0]["data"]["error"] == {"name": "ToolError", "code": "TOOL_ERROR"}
    assert failed[0]["data"]["message"]["content"][0]["isError"] is True
    assert "Could not find the exact text" in extract_text(failed[0])
    ends = by_type(session, "turn/end")
    assert [e["data"]["reason"] for e in ends].count("aborted") == 4
    (api_error,) = [e for e in ends if e["data"]["reason"] == "error"]
    assert "tool_use` ids were found without `tool_result`" in api_error["data"]["error"]["message"]


def test_model_and_thinking_changes_and_shell_runs() -> None:
    session = _session()
    models = [e["data"] for e in by_type(session, "pi/model_change")]
    assert models[0] == {"provider": "anthropic", "model": "claude-3-opus-20240229",
                         "raw": models[0]["raw"]}
    assert all(e["ignorable"] for e in by_type(session, "pi/model_change"))
    levels = [e["data"]["thinkingLevel"] for e in by_type(session, "pi/thinking_level_change")]
    assert levels[0] == "minimal"
    (bash,) = [u for u in by_type(session, "user/message")
               if u["data"]["source"] == {"kind": "plugin", "plugin": "pi-bash"}]
    text = extract_text(bash)
    assert text.startswith("$ ls\nAGENTS.md") and text.endswith("(exit code 0)")


def test_compactions_shadow_what_came_before_the_first_kept_entry() -> None:
    session = _session()
    records = [orjson.loads(line) for line in agent(PI).splitlines()]
    summaries = by_type(session, "compaction/summary")
    assert len(summaries) == 2
    state = surfaces(session)
    for summary in summaries:
        line = int(summary["data"]["compactionId"].rsplit("-", 1)[1])  # pi:line-<n>
        assert records[line - 1]["type"] == "compaction"
        kept_line = records[line - 1]["firstKeptEntryIndex"] + 1
        shadowed = summary["data"]["shadowedSeqs"]
        assert shadowed and all(state[s] == "shadowed" for s in shadowed)
        # the first kept entry (a user prompt) stays out of the summary's shadow
        kept = next(e for e in session.events if e["data"].get("raw") == records[kept_line - 1])
        assert kept["seq"] not in shadowed and kept["seq"] > shadowed[-1]
        assert summary["data"]["shadowedTokenCount"] == records[line - 1]["tokensBefore"]
    checkpoints = [u for u in by_type(session, "user/message")
                   if u["data"]["source"].get("plugin") == "compact"]
    # the second compaction's summary shadows the first one's checkpoint
    assert checkpoints[0]["seq"] in summaries[1]["data"]["shadowedSeqs"]
    nodes = fold_surface(session.events).nodes
    assert nodes[0] == checkpoints[1]["seq"]
    assert state[nodes[1]] == "current"  # the last compaction's first kept entry
    assert "Context Checkpoint" in extract_text(checkpoints[1])


def test_a_grown_file_imports_a_prefix_of_the_events() -> None:
    lines = agent(PI).splitlines(keepends=True)
    whole = _session()
    for cut in (2, 20, 40):
        part = _session(b"".join(lines[:cut]))
        assert part.header == whole.header
        assert part.events == whole.events[:len(part.events)]


def test_a_pi_header_is_not_a_native_one() -> None:
    head = agent(PI)[:4096]
    assert detect_format(Path("x.jsonl"), head) == "pi"
    native = b'{"type":"session","version":0,"id":"n","createdAt":1}\n'
    assert detect_format(Path("x.jsonl"), native) == "dsh"
    # a later Pi release that adds a version field is still Pi's
    header, rest = head.split(b"\n", 1)
    versioned = orjson.dumps({**orjson.loads(header), "version": 3}) + b"\n" + rest
    assert detect_format(Path("x.jsonl"), versioned) == "pi"
    assert "pi" in IMPORTERS


def test_recall_ingest_of_a_pi_folder(tmp_path: Path) -> None:
    folder = tmp_path / "home/.pi/agent/sessions/--Users-badlogic-workspaces-pi-mono--"
    folder.mkdir(parents=True)
    shutil.copy(AGENTS / PI, folder / "2025-12-09T00-53-29-825Z_ffae836b.jsonl")
    data = tmp_path / "data"
    runner = CliRunner()
    result = runner.invoke(main, ["--data-dir", str(data), "ingest", str(tmp_path / "home"),
                                  "--json"])
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    assert report["rejected"] == 0 and report["accounting"]["parked"] == 0, report
    listed = orjson.loads(runner.invoke(main, ["--data-dir", str(data), "sessions",
                                               "--json"]).stdout)
    (item,) = listed
    assert item["header"]["id"] == SID
    assert item["title"].startswith("alright, read @packages/coding-agent")
