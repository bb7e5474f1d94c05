"""Aider: one session per run of a real `.aider.chat.history.md`, prompts vs Aider's own output
vs the model's replies, and growth as Aider appends."""

from __future__ import annotations

from importer_support import AIDER, agent, assert_steps_announced, assert_valid_log, by_type

from projections import extract_text
from streams.importers import detect_format
from streams.importers.aider import import_aider

SOURCE = "/home/dev/afi-core/.aider.chat.history.md"


def test_each_run_is_a_session_in_the_folder_of_the_history() -> None:
    sessions = import_aider(agent(AIDER), SOURCE)
    assert [s.header["createdAt"] for s in sessions] == [
        1752579517000, 1752591214000, 1752591998000, 1752592684000, 1752696638000]
    for session in sessions:
        assert_valid_log(session)
        assert session.rejections == []
        assert session.header["cwd"] == "/home/dev/afi-core"
        assert session.header["id"].startswith("aider:") and session.header["id"].endswith(
            str(session.header["id"].rsplit(":", 1)[1]))
        assert_steps_announced(session)
    assert len({s.header["id"] for s in sessions}) == 5
    # Stable ids: the same file imports to the same sessions.
    assert [s.header for s in import_aider(agent(AIDER), SOURCE)] == [s.header for s in sessions]


def test_prompts_replies_and_aider_output() -> None:
    first, second = import_aider(agent(AIDER), SOURCE)[:2]
    prompts = [u for u in by_type(first, "user/message") if u["data"]["source"]["kind"] == "user"]
    assert [p["data"]["content"][0]["text"] for p in prompts] == [
        'add a comment at the top of schemas/pipeline_config_schema.ts that says: "// This file '
        "defines the Zod schema for AFI's pipeline configuration\""]
    (reply,) = by_type(first, "assistant/message")
    assert extract_text(reply).startswith("Please add `schemas/pipeline_config_schema.ts`")
    outputs = [u for u in by_type(first, "user/message") if u["data"]["source"]["kind"] != "user"]
    assert outputs and all(o["data"]["source"] == {"kind": "plugin", "plugin": "aider"}
                           for o in outputs)
    assert any("Aider v0.85.1" in extract_text(o) for o in outputs)
    # Edits applied, commits and shell runs are searchable.
    texts = "\n".join(extract_text(u) for u in by_type(second, "user/message"))
    assert "Applied edit to sync-afi.sh" in texts
    assert "Commit dde0244 feat: add sync-afi and aider-afi shell scripts" in texts
    assert "Running chmod +x ~/AFI_Modular_Repos/*.sh" in texts
    replies = by_type(second, "assistant/message")
    assert any("<<<<<<< SEARCH" in extract_text(r) for r in replies)
    # A multi-line prompt is one message.
    third = import_aider(agent(AIDER), SOURCE)[2]
    (prompt,) = [u for u in by_type(third, "user/message") if u["data"]["source"]["kind"] == "user"]
    assert prompt["data"]["content"][0]["text"].startswith("for dir in ~/AFI_Modular_Repos/afi-*")
    assert prompt["data"]["content"][0]["text"].endswith("\n  cd $dir && zsh ~/AFI_Modular_"
                                                         "Repos/afi-audit.sh\n  echo \"" +
                                                         "─" * 47 + "\"\ndone")


def test_growth_at_block_boundaries_is_a_prefix() -> None:
    data = agent(AIDER)
    full = {s.header["id"]: s.events for s in import_aider(data, SOURCE)}
    lines = data.split(b"\n")
    # Aider writes each block at once: cut before every line that starts one (a run, a prompt,
    # an output message; a reply always ends where one of these starts).
    cuts = [sum(len(x) + 1 for x in lines[:i]) for i, line in enumerate(lines)
            if line.startswith((b"# aider", b">"))
            or (line.startswith(b"####") and not lines[i - 1].startswith(b"####"))]
    assert len(cuts) > 80
    for cut in cuts:
        for session in import_aider(data[:cut], SOURCE):
            assert session.events == full[session.header["id"]][:len(session.events)], cut


def test_detection() -> None:
    assert detect_format("/x/history.md", agent(AIDER)[:65536]) == "aider"
    assert detect_format("/repo/.aider.chat.history.md", b"") == "aider"


def test_an_impossible_start_time_is_text_not_a_run() -> None:
    data = agent(AIDER).replace(b"started at 2025-07-15 14:53:34", b"started at 2025-19-45 99:00:00")
    sessions = import_aider(data, SOURCE)
    assert len(sessions) == 4
    for session in sessions:
        assert_valid_log(session)
