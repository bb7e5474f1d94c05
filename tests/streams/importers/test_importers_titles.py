"""Titles and first prompts of every real log in tests/data (issue 14, importer side): the
agent's own title when it recorded one, and the first `user/message` whose source is the person
(`source.kind == "user"`), from which the listing side derives a title otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from importer_support import AGENTS, DATA, by_type

from streams.ingest.importers import IMPORTERS, ImportedSession, detect_format

#: file → [(session id suffix, agent title or None, first prompt's start or None)]
EXPECTED: dict[str, list[tuple[str, str | None, str | None]]] = {
    "realdata/claude-code-1.0.98-sidechains.jsonl": [
        ("fe5e1c67-53e7-4862-81ae-d0e013e3270b", None, "/orchestrator create TODO app by Next.js"),
        ("agent-6690d10e-f521-4ac0-800d-e5eb7a2d8072", None, "Create React components for"),
        ("agent-60dade70-20bb-4edb-9dad-9f08267e0cc2", None, "Create a new Next.js project")],
    "realdata/claude-code-2.1.14-compaction.jsonl": [
        ("839b35f7-4dbd-4d93-9772-3c272cc87caa", None, "let's go back to current code")],
    "realdata/claude-code-2.1.5-compaction.jsonl": [
        ("deeac353-0765-4439-9056-293619a99172", None, "can you look at the changes in this")],
    "realdata/codex-0.125-parent.jsonl": [
        ("019ddb75-a272-7d50-b41d-90017f500b5a", None, "marvin work")],
    "agents/gemini-cli-0.34/session-2026-03-18T01-46-50316244.json": [
        ("50316244-145e-46cb-b42b-db11410ad87a", None, "Show current token stats")],
    "agents/gemini-cli-0.34/session-2026-03-18T01-47-50316244.json": [
        ("subagent-20260318T014714412Z", None, "Your task is to answer the following")],
    "agents/gemini-cli-0.34/session-2026-03-18T01-49-50316244.json": [
        ("subagent-20260318T014906406Z", "Get Gemini CLI token usage details.",
         "Your task is to answer the following")],
    "agents/gemini-cli-2025-10-pomodoro.json": [
        ("0b23371a-ce2e-4b1c-81a0-44af5d94d9ce", None, "Build a simple Pomodoro timer")],
    "agents/gemini-cli-2026-03-control-flash.json": [
        ("209f5a02-005a-47f8-a0f9-a959f14ca9e7", None, "hello")],
    "agents/gemini-cli-2026-04.jsonl": [("0ab84937-9fe7-4284-986a-33c832af0b6a", None, "/init")],
    "agents/pi/before-compaction.jsonl": [
        ("ffae836b-9420-4060-ac13-7745215f90ff", None, "alright, read @packages/coding-agent")],
    "agents/continue/5d3764fb-da1f-4d6b-b170-9a6601afa210.json": [
        ("5d3764fb-da1f-4d6b-b170-9a6601afa210", "Fix PostgreSQL script error",
         "\n\n```sh test_set1.sh (1-462)")],
    "agents/roo-code/ac8aa7b4-319c-4925-a139-4f4adca81921/ui_messages.json": [
        ("ac8aa7b4-319c-4925-a139-4f4adca81921", None, "Bonjour, je suis en train de")],
    "agents/roo-code/ac8aa7b4-319c-4925-a139-4f4adca81921/api_conversation_history.json": [
        ("ac8aa7b4-319c-4925-a139-4f4adca81921:api", None, "<task>\nBonjour, je suis")],
    "agents/kimi-cli/00d5060aaec3fda180930ea52304b87b/d8447fa8-9d8e-41af-9fc6-a12e4a196b6c.jsonl": [
        ("d8447fa8-9d8e-41af-9fc6-a12e4a196b6c", None, "You will be provided with a partial")],
    "agents/openhands/basic_gui_mode.json": [("basic_gui_mode", None, "I want to create a VueJS")],
    "agents/crush/.crush/crush.db": [
        ("a20c5ed5-41d4-45f7-88eb-7ba0645f1341",
         "Create and Enhance CRUSH.md with Codebase Guidelines", "`Please analyze this codebase"),
        ("f306c145-4c83-492c-b575-739c30bbced4", "Instructions in CLI.md",
         "I have instructions for you in @CLI.md")],
    "agents/copilot-cli-1.0.34-events.jsonl": [
        ("96ef38f0-9d09-45c3-8124-6448c36090ed", None, "請不要修改任何代碼")],
    "agents/copilot-cli-1.0.74-compaction.jsonl": [
        ("70b173ed-7b83-485a-b71a-5adb0591db07", None, "pick up where we left off")],
    "agents/copilot-cli-2025-10-legacy.json": [
        ("06141331-92e8-4e9e-8bbb-9b7a729eb01a", None, "專案經過了多輪跌代")],
    "agents/opencode/ses_20be19bd6ffeHn5B6DdBVxU8TR.json": [
        ("ses_20be19bd6ffeHn5B6DdBVxU8TR", "Playbook task execution and synopsis format",
         '"# Context')],
    "agents/opencode/ses_20c685993ffe8NJ44bWWcyosxi.json": [
        ("ses_20c685993ffe8NJ44bWWcyosxi", "Maestro Dori Playbook Task Instructions",
         '"# Context')],
    "agents/opencode/ses_2bef25635ffe8EzID0I1Oeymal.json": [
        ("ses_2bef25635ffe8EzID0I1Oeymal", "Explore codebase for context (@explore subagent)",
         "Quickly explore the codebase")],
    "agents/aider-0.85/.aider.chat.history.md": [
        ("20250715113837", None, "add a comment at the top of schemas/"),
        ("20250715145334", None, "chmod +x ~/AFI_Modular_Repos/*.sh"),
        ("20250715150638", None, "for dir in ~/AFI_Modular_Repos/afi-*; do"),
        ("20250715151804", None, "sync-afi"),
        ("20250716201038", None, None)],  # a run that was quit before any prompt
}


def _sessions(relative: str) -> list[ImportedSession]:
    path = DATA.parent / relative
    data = path.read_bytes()
    fmt = detect_format(path, data[:65536])
    assert fmt is not None
    return IMPORTERS[fmt](data, str(path))


def _first_prompt(session: ImportedSession) -> str | None:
    for event in by_type(session, "user/message"):
        if event["data"]["source"] == {"kind": "user"}:
            text: str = event["data"]["content"][0]["text"]
            return text
    return None


def test_every_real_log_is_listed() -> None:
    files = {str(p.relative_to(DATA.parent)) for root in (DATA, AGENTS)
             for p in root.rglob("*") if p.is_file() and p.name != "README.md"}
    assert files == set(EXPECTED)


@pytest.mark.parametrize("relative", sorted(EXPECTED))
def test_titles_and_first_prompts(relative: str) -> None:
    sessions = _sessions(relative)
    got = [(s.header["id"], [t["data"]["title"] for t in by_type(s, "session/title")],
            _first_prompt(s)) for s in sessions]
    assert len(got) == len(EXPECTED[relative])
    for (sid, titles, prompt), (suffix, title, start) in zip(got, EXPECTED[relative],
                                                             strict=True):
        assert sid.endswith(suffix)
        assert titles == ([title] if title else [])
        if start is None:
            assert prompt is None
        else:
            assert prompt is not None and prompt.startswith(start), prompt


def test_a_claude_summary_naming_another_file_stays_for_the_index_side() -> None:
    (main, *_) = _sessions("realdata/claude-code-1.0.98-sidechains.jsonl")
    (summary,) = by_type(main, "claude-code/summary")
    assert summary["data"]["summary"] == "Empty Repo Setup: CLAUDE.md Foundation Created"
    assert summary["data"]["leafUuid"] == "549b3502-6e30-4fa5-869f-c998df26c3f0"
    (later,) = _sessions("realdata/claude-code-2.1.5-compaction.jsonl")
    assert len(by_type(later, "claude-code/summary")) == 20
    assert not by_type(later, "session/title")


def test_a_codex_thread_name_is_its_title() -> None:
    path = Path(DATA / "codex-0.125-parent.jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    rename = (b'{"timestamp":"2026-04-29T20:00:00.000Z","type":"event_msg","payload":'
              b'{"type":"thread_name_updated","thread_id":"x","thread_name":"Marvin work '
              b'triage"}}\n')
    named = [*lines, rename]
    (session,) = IMPORTERS["codex"](b"".join(named), str(path))
    assert [t["data"]["title"] for t in by_type(session, "session/title")] == [
        "Marvin work triage"]


def test_imports_are_the_same_in_every_process() -> None:
    """Same file, same events: no dict/set order or hash seed leaks into the mapping."""
    script = (
        "import hashlib, orjson, sys\n"
        "from pathlib import Path\n"
        "from streams.ingest.importers import IMPORTERS, detect_format\n"
        "h = hashlib.blake2b()\n"
        "for name in sys.argv[1:]:\n"
        "    data = Path(name).read_bytes()\n"
        "    for s in IMPORTERS[detect_format(name, data[:65536])](data, name):\n"
        "        h.update(orjson.dumps([s.header, s.events], option=orjson.OPT_SORT_KEYS))\n"
        "print(h.hexdigest())\n")
    files = [str(DATA.parent / relative) for relative in sorted(EXPECTED)]
    digests = set()
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-c", script, *files], capture_output=True,
                              text=True, env={**os.environ, "PYTHONHASHSEED": seed}, check=True)
        digests.add(done.stdout.strip())
    assert len(digests) == 1
