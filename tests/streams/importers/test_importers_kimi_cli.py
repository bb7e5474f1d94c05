"""Kimi CLI: a real context file of a SWE-bench run (Kimi CLI 0.42; 38 of its 236 lines): a task
prompt, a ReadContext sub-agent, Bash calls with exit codes, checkpoints and usage records."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner
from importer_support import AGENTS, KIMI, agent, assert_valid_log, by_type, with_raw

from projections import extract_text
from streams.faces.cli.main import main
from streams.ingest.importers import ImportedSession, detect_format
from streams.ingest.importers.kimi_cli import import_kimi_cli

SID = "kimi-cli:d8447fa8-9d8e-41af-9fc6-a12e4a196b6c"
MTIME_NS = 1_761_843_428_000_000_000


def _session(data: bytes, source: str) -> ImportedSession:
    (session,) = import_kimi_cli(data, source)
    assert_valid_log(session)
    assert session.rejections == []
    return session


def run(data: Path, *args: str) -> Any:
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args, "--json"])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def test_prompt_tool_calls_and_exit_codes(tmp_path: Path) -> None:
    source = tmp_path / "d8447fa8-9d8e-41af-9fc6-a12e4a196b6c.jsonl"
    shutil.copy(AGENTS / KIMI, source)
    os.utime(source, ns=(MTIME_NS, MTIME_NS))
    session = _session(source.read_bytes(), str(source))
    # no times in the format: the file's modification time dates the session and its events
    assert session.header == {"type": "session", "version": 0, "id": SID,
                              "createdAt": MTIME_NS // 1_000_000, "delegationDepth": 0}
    assert {e["time"] for e in session.events} == {MTIME_NS // 1_000_000}
    assert len(with_raw(session)) == len(agent(KIMI).splitlines())  # every record kept
    (prompt,) = by_type(session, "user/message")
    assert extract_text(prompt).startswith("You will be provided with a partial code base")
    calls = by_type(session, "tool/call")
    assert calls[0]["data"]["name"] == "ReadContext"
    assert calls[1]["data"]["name"] == "Bash" and "command" in calls[1]["data"]["arguments"]
    failed = [r for r in by_type(session, "tool/result") if r["data"].get("error")]
    assert [f["data"]["error"]["code"] for f in failed] == ["EXIT_1", "EXIT_4"]
    assert failed[0]["data"]["message"]["content"][0]["isError"] is True
    usage = by_type(session, "kimi-cli/usage")
    assert usage[0]["data"]["tokenCount"] == 4504 and usage[0]["ignorable"] is True


def test_a_read_file_is_a_subagent_of_its_session() -> None:
    (sub,) = import_kimi_cli(agent(KIMI), "/h/.kimi/sessions/x/d8447fa8-9d8e-41af-9fc6-"
                             "a12e4a196b6c_read_1.jsonl")
    assert sub.header["id"] == SID + "_read_1"
    assert sub.header["parentSession"] == SID
    assert sub.header["origin"] == "subagent" and sub.header["delegationDepth"] == 1


def test_a_grown_file_adds_its_new_lines_under_the_first_header(tmp_path: Path) -> None:
    lines = agent(KIMI).splitlines(keepends=True)
    folder = tmp_path / "home" / ".kimi" / "sessions" / "00d5060aaec3fda180930ea52304b87b"
    folder.mkdir(parents=True)
    target = folder / "d8447fa8-9d8e-41af-9fc6-a12e4a196b6c.jsonl"
    target.write_bytes(b"".join(lines[:20]))
    os.utime(target, ns=(MTIME_NS, MTIME_NS))
    data = tmp_path / "data"
    first = run(data, "ingest", str(tmp_path / "home"))
    assert first["rejected"] == 0
    target.write_bytes(b"".join(lines))
    os.utime(target, ns=(MTIME_NS + 60 * 10**9,) * 2)
    grown = run(data, "ingest", str(tmp_path / "home"))
    assert grown["rejected"] == 0 and grown["rewritten"] == [], grown
    whole = _session(b"".join(lines), "/nowhere/x.jsonl")
    (item,) = run(data, "sessions")
    assert item["header"]["createdAt"] == MTIME_NS // 1_000_000  # the first header is kept
    assert first["eventsAdded"] + grown["eventsAdded"] == len(whole.events)
    assert item["title"].startswith("You will be provided with a partial code base")


def test_detection() -> None:
    assert detect_format(Path("x.jsonl"), agent(KIMI)[:4096]) == "kimi-cli"
    assert detect_format(Path("x.jsonl"), b'{"role":"user","content":"hi"}\n') is None
