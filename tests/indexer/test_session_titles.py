"""Every session of the real logs in tests/data has a title (the agent's, a summary from another
file, else the person's first prompt), its agent and its activity."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import orjson
import pytest

from projections.titles import PROMPT_TITLE_CHARS, shorten
from streams.facade import Recall

DATA = Path(__file__).resolve().parents[1] / "data"
AGENTS = DATA / "agents"
REAL = DATA / "realdata"

#: (path, --format) of every real log; None: auto-detected (directories walk).
SOURCES: list[tuple[Path, str]] = [
    *((p, "gemini-cli") for p in sorted((AGENTS / "gemini-cli-0.34").glob("*.json"))),
    (AGENTS / "gemini-cli-2025-10-pomodoro.json", "gemini-cli"),
    (AGENTS / "gemini-cli-2026-03-control-flash.json", "gemini-cli"),
    (AGENTS / "gemini-cli-2026-04.jsonl", "gemini-cli-jsonl"),
    (AGENTS / "copilot-cli-2025-10-legacy.json", "copilot-cli-legacy"),
    (REAL, "auto"),
    (AGENTS, "auto"),
]

#: Aider's session ids carry a hash of the history file's absolute path (two projects both
#: have a `.aider.chat.history.md`), so they depend on where the checkout lives.
AIDER = "aider:" + hashlib.blake2b(
    str(AGENTS / "aider-0.85" / ".aider.chat.history.md").encode("utf-8"), digest_size=6).hexdigest()

#: The title (and where it came from) of each session, read off the logs by hand.
EXPECTED: dict[str, tuple[str | None, str | None]] = {
    "opencode:ses_20be19bd6ffeHn5B6DdBVxU8TR":
        ("agent", "Playbook task execution and synopsis format"),
    "opencode:ses_20c685993ffe8NJ44bWWcyosxi": ("agent", "Maestro Dori Playbook Task Instructions"),
    "opencode:ses_2bef25635ffe8EzID0I1Oeymal":
        ("agent", "Explore codebase for context (@explore subagent)"),
    "gemini-cli:50316244-145e-46cb-b42b-db11410ad87a/subagent-20260318T014906406Z":
        ("agent", "Get Gemini CLI token usage details."),
    "gemini-cli:50316244-145e-46cb-b42b-db11410ad87a": ("prompt", "Show current token stats"),
    "gemini-cli:209f5a02-005a-47f8-a0f9-a959f14ca9e7": ("prompt", "hello"),
    "gemini-cli:0ab84937-9fe7-4284-986a-33c832af0b6a": ("prompt", "/init"),
    "codex:019ddb75-a272-7d50-b41d-90017f500b5a": ("prompt", "marvin work"),
    "copilot-cli:70b173ed-7b83-485a-b71a-5adb0591db07": ("prompt", "pick up where we left off"),
    "claude-code:fe5e1c67-53e7-4862-81ae-d0e013e3270b":
        ("prompt", "/orchestrator create TODO app by Next.js"),
    "claude-code:deeac353-0765-4439-9056-293619a99172":
        ("prompt", "can you look at the changes in this branch, this is now the 3rd error around "
                   "CWD and being in the…"),
    f"{AIDER}:20250715145334": ("prompt", "chmod +x ~/AFI_Modular_Repos/*.sh"),
    f"{AIDER}:20250715151804": ("prompt", "sync-afi"),
    "continue:5d3764fb-da1f-4d6b-b170-9a6601afa210": ("agent", "Fix PostgreSQL script error"),
    "crush:f306c145-4c83-492c-b575-739c30bbced4": ("agent", "Instructions in CLI.md"),
    "crush:a20c5ed5-41d4-45f7-88eb-7ba0645f1341":
        ("agent", "Create and Enhance CRUSH.md with Codebase Guidelines"),
    "pi:ffae836b-9420-4060-ac13-7745215f90ff":
        ("prompt", "alright, read @packages/coding-agent/src/main.ts "
                   "@packages/coding-agent/src/tui/tui-renderer.ts in…"),
    "roo-code:ac8aa7b4-319c-4925-a139-4f4adca81921":
        ("prompt", "Bonjour, je suis en train de réinstaller cette machine après qu'un disque dur "
                   "a laché. J'aimerais…"),
    "openhands:basic_gui_mode":
        ("prompt", "I want to create a VueJS app that allows me to: * See all the items on my todo "
                   "list * add a new…"),
}


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    with Recall.open(tmp_path_factory.mktemp("real") / "data") as recall:
        for path, fmt in SOURCES:
            report = recall.ingest([path], fmt=fmt)
            assert report.rejected == 0, report.to_json()
        listing = recall.list_sessions()
        # a session without a title has no prompt of the person at all
        for record in listing:
            if record["title"] is None:
                events = recall.read_session(str(record["header"]["id"]))["events"]
                assert not [e for e in events if e["type"] == "user/message"
                            and e["data"].get("source", {}).get("kind") == "user"]
    return listing


def test_every_real_session_with_a_prompt_has_a_title(real: list[dict[str, object]]) -> None:
    by_id = {str(r["header"]["id"]): r for r in real}  # type: ignore[index]
    assert len(by_id) == 31
    for session_id, (source, title) in EXPECTED.items():
        assert (by_id[session_id]["titleSource"], by_id[session_id]["title"]) == (source, title)
    untitled = sorted(i for i, r in by_id.items() if r["title"] is None)
    assert untitled == [f"{AIDER}:20250716201038"]  # its one run has no prompt
    for record in real:
        title = record["title"]
        assert title is None or (isinstance(title, str) and "\n" not in title
                                 and len(title) <= PROMPT_TITLE_CHARS + 1)


def test_agents_come_from_the_id_prefix(real: list[dict[str, object]]) -> None:
    agents = {str(r["header"]["id"]): r["agent"] for r in real}  # type: ignore[index]
    assert {i.split(":")[0] for i in agents} == set(agents.values())
    assert set(agents.values()) == {"aider", "claude-code", "codex", "continue", "copilot-cli",
                                    "crush", "gemini-cli", "kimi-cli", "opencode", "openhands",
                                    "pi", "roo-code"}


def test_counts_and_activity_match_the_log(real: list[dict[str, object]],
                                           tmp_path: Path) -> None:
    record = next(r for r in real
                  if r["header"]["id"] == "codex:019ddb75-a272-7d50-b41d-90017f500b5a")  # type: ignore[index]
    with Recall.open(tmp_path / "d") as recall:
        recall.ingest([REAL / "codex-0.125-parent.jsonl"])
        events = recall.read_session("codex:019ddb75-a272-7d50-b41d-90017f500b5a")["events"]
    assert record["eventCount"] == len(events)
    assert record["firstEventTime"] == min(e["time"] for e in events)
    assert record["lastEventTime"] == max(e["time"] for e in events)


def _claude(path: Path, session: str, records: list[dict[str, object]]) -> Path:
    base = {"isSidechain": False, "userType": "external", "cwd": "/w/app", "sessionId": session,
            "version": "2.1.5", "gitBranch": ""}
    path.write_bytes(b"".join(orjson.dumps({**base, **r}) + b"\n" for r in records))
    return path


def _claude_pair(tmp_path: Path) -> tuple[Path, Path]:
    leaf_session = "5e1c67aa-53e7-4862-81ae-d0e013e3270b"
    older = _claude(tmp_path / f"{leaf_session}.jsonl", leaf_session, [
        {"parentUuid": None, "type": "user", "uuid": "u-1", "timestamp": "2026-01-01T10:00:00Z",
         "message": {"role": "user", "content": "why do the shadow branches pile up?"}},
        {"parentUuid": "u-1", "type": "assistant", "uuid": "a-1",
         "timestamp": "2026-01-01T10:00:05Z",
         "message": {"id": "msg_1", "role": "assistant", "type": "message", "model": "m",
                     "content": [{"type": "text", "text": "Nothing deletes them."}]}},
        {"parentUuid": "a-1", "type": "user", "uuid": "u-2", "timestamp": "2026-01-01T10:01:00Z",
         "message": {"role": "user", "content": "and after a reset?"}},
        {"parentUuid": "u-2", "type": "assistant", "uuid": "a-2",
         "timestamp": "2026-01-01T10:01:05Z",
         "message": {"id": "msg_2", "role": "assistant", "type": "message", "model": "m",
                     "content": [{"type": "text", "text": "They stay."}]}},
    ])
    newer_session = "99b35f7a-4dbd-4d93-9772-3c272cc87caa"
    newer = _claude(tmp_path / f"{newer_session}.jsonl", newer_session, [
        # Claude Code writes the summaries of earlier conversations at the top of a new file:
        # an early one (leaf a-1) and the latest one (leaf a-2) of the older session.
        {"type": "summary", "summary": "Shadow branches", "leafUuid": "a-1"},
        {"type": "summary", "summary": "Shadow branch cleanup after reset", "leafUuid": "a-2"},
        {"parentUuid": None, "type": "user", "uuid": "u-9", "timestamp": "2026-01-02T09:00:00Z",
         "message": {"role": "user", "content": "new work"}},
    ])
    return older, newer


@pytest.mark.parametrize("order", ["summary file last", "summary file first"])
def test_a_summary_in_another_file_titles_the_session_of_its_leaf(tmp_path: Path,
                                                                  order: str) -> None:
    older, newer = _claude_pair(tmp_path)
    files = [older, newer] if order == "summary file last" else [newer, older]
    with Recall.open(tmp_path / "data", shards=3) as recall:
        for path in files:
            recall.ingest([path])
        by_id = {r["header"]["id"]: r for r in recall.list_sessions()}
        hits = recall.search_sessions("shadow branches")["items"]
    leaf = by_id["claude-code:5e1c67aa-53e7-4862-81ae-d0e013e3270b"]
    assert (leaf["title"], leaf["titleSource"]) == ("Shadow branch cleanup after reset", "summary")
    other = by_id["claude-code:99b35f7a-4dbd-4d93-9772-3c272cc87caa"]
    assert (other["title"], other["titleSource"]) == ("new work", "prompt")
    # search hits carry the same title
    assert hits[0]["header"]["id"] == leaf["header"]["id"]
    assert hits[0]["title"] == leaf["title"] and hits[0]["agent"] == "claude-code"


def test_an_own_title_beats_a_summary_and_titles_follow_new_events(tmp_path: Path) -> None:
    older, newer = _claude_pair(tmp_path)
    with Recall.open(tmp_path / "data") as recall:
        recall.ingest([older, newer])
        with older.open("ab") as handle:
            handle.write(orjson.dumps({"type": "custom-title", "customTitle": "Branch janitor",
                                       "sessionId": "5e1c67aa-53e7-4862-81ae-d0e013e3270b"})
                         + b"\n")
        recall.ingest([older])
        [leaf] = recall.list_sessions(title="janitor")
    assert (leaf["title"], leaf["titleSource"]) == ("Branch janitor", "agent")


@pytest.mark.parametrize("limit", [None, 1, 2])
@pytest.mark.parametrize("text", ["shadow branch", "CLEANUP", "new", "work", "reset", "zzz"])
def test_a_title_search_matches_the_listing_titles_summaries_included(
        tmp_path: Path, text: str, limit: int | None) -> None:
    older, newer = _claude_pair(tmp_path)
    with Recall.open(tmp_path / "data", shards=3) as recall:
        recall.ingest([older, newer])
        full = recall.list_sessions()
        found = recall.list_sessions(title=text, limit=limit)
    words = text.lower().split()
    expected = [r for r in full if r["title"] and " ".join(words) in str(r["title"]).lower()]
    assert found == expected[:limit]
    if text == "shadow branch":
        assert [r["titleSource"] for r in found] == ["summary"]


def test_titles_are_shortened_on_a_word_boundary() -> None:
    text = "word " * 40
    short = shorten(text)
    assert short.endswith("…") and len(short) <= PROMPT_TITLE_CHARS + 1
    assert not short[:-1].endswith(" ") and short[:-1].split(" ")[-1] == "word"
    assert shorten("  a\n\tb  ") == "a b"


def test_sessions_cli_json_and_piped_lines(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from streams.faces.cli.main import main

    older, newer = _claude_pair(tmp_path)
    env = {"RECALL_DATA_DIR": str(tmp_path / "data")}
    runner = CliRunner()
    assert runner.invoke(main, ["ingest", str(older), str(newer)], env=env).exit_code == 0
    listed = runner.invoke(main, ["sessions", "--agent", "claude-code", "--json"], env=env)
    records = json.loads(listed.stdout)
    assert [r["title"] for r in records] == ["new work", "Shadow branch cleanup after reset"]
    human = runner.invoke(main, ["sessions", "--cwd", "/w/app/", "--limit", "1"], env=env)
    lines = human.stdout.splitlines()
    assert len(lines) == 2  # the column names, then one session per line
    assert "claude-code:99b35f7a-4dbd-4d93-9772-3c272cc87caa" in lines[1]  # the full id
    assert lines[1].rstrip().endswith("new work")
    found = runner.invoke(main, ["sessions", "--title", "CLEANUP"], env=env)
    assert "Shadow branch cleanup after reset" in found.stdout and "new work" not in found.stdout
