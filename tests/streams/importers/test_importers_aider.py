"""Aider: one session per run of a real `.aider.chat.history.md`, prompts vs Aider's own output
vs the model's replies, and growth as Aider appends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner
from importer_support import AIDER, agent, assert_steps_announced, assert_valid_log, by_type

from projections import extract_text
from streams.faces.cli.main import main
from streams.ingest.importers import ImportedSession, detect_format
from streams.ingest.importers.aider import import_aider, resume_aider

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


def test_a_run_of_output_lines_is_one_event_keeping_its_lines() -> None:
    first = import_aider(agent(AIDER), SOURCE)[0]
    banner = by_type(first, "user/message")[0]
    lines = agent(AIDER).decode().split("\n")[3:16]
    assert banner["data"]["source"] == {"kind": "plugin", "plugin": "aider"}
    assert banner["data"]["raw"] == {"kind": "output", "text": "\n".join(lines)}
    assert extract_text(banner).split("\n") == [ln[2:].removesuffix("  ") for ln in lines]
    # Runs, prompts and replies: a handful of events per exchange, not one per line.
    assert sum(len(s.events) for s in import_aider(agent(AIDER), SOURCE)) < 70


def _covered(events: list[dict[str, Any]]) -> list[str]:
    """The source lines the events keep in `data.raw`, in log order."""
    return [ln for e in events if "raw" in e["data"] for ln in e["data"]["raw"]["text"].split("\n")
            if ln.strip()]


def _grow(data: bytes, cuts: list[int]) -> dict[str, list[dict[str, Any]]]:
    """Import the file's first `cuts[0]` lines, then resume at each later cut, then at its end
    (as the ingest edge does when it finds the file grown): each session's stored events."""
    lines = data.split(b"\n")
    stored: dict[str, list[dict[str, Any]]] = {}
    done = 0
    for cut in [*cuts, len(lines) - 1]:
        part = b"\n".join(lines[:cut]) + b"\n"
        fresh = (import_aider(part, SOURCE) if done == 0 else
                 resume_aider(part, SOURCE, done, lambda sid: len(stored.get(sid, []))))
        for session in fresh:
            assert session.rejections == []
            got = stored.setdefault(session.header["id"], [])
            assert [e["seq"] for e in session.events] == list(
                range(len(got), len(got) + len(session.events)))
            got.extend(session.events)
        done = cut
    return stored


def test_growth_at_any_line_continues_the_cut_block() -> None:
    """Aider appends one message at a time, so an import may read half an output run (or a
    reply still being flushed): what follows the cut is added as a continuation event."""
    data = agent(AIDER)
    full = {s.header["id"]: s for s in import_aider(data, SOURCE)}
    headers = {sid: s.header for sid, s in full.items()}
    total = data.count(b"\n")
    for cut in range(1, total):
        grown = _grow(data, [cut])
        assert list(grown) == list(full), cut
        for sid, events in grown.items():
            # Nothing lost, nothing twice, in order; the log folds.
            assert _covered(events) == _covered(full[sid].events), (cut, sid)
            assert_valid_log(ImportedSession(headers[sid], events, []))
            assert_steps_announced(ImportedSession(headers[sid], events, []))
            # The same turns and steps as a one-shot import.
            assert [(e["data"]["turn"], e["data"]["step"]) for e in events
                    if e["type"] == "step/start"] == [
                (e["data"]["turn"], e["data"]["step"]) for e in full[sid].events
                if e["type"] == "step/start"], cut
    # Several cuts in a row (a live session read often) and the search text of a cut run.
    grown = _grow(data, [5, 9, 10, 24, 60, 61])
    for sid, events in grown.items():
        assert _covered(events) == _covered(full[sid].events)
    first = grown[next(iter(grown))]
    banner = [extract_text(e) for e in by_type(ImportedSession({}, first, []), "user/message")]
    # Lines 4-5, then 6-9, then 10, then the rest of the banner: four searchable events.
    assert banner[:4] == [
        "You can skip this check with --no-gitignore\n"
        "Add .aider* to .gitignore (recommended)? (Y)es/(N)o [Yes]: y",
        "Added .aider* to .gitignore\n/opt/homebrew/bin/aider .aider.conf.json\n"
        "Using gpt-4o model with API key from environment.\nSkipping /Users/secretservice/"
        "AFI_Modular_Repos/afi-core/.aider.conf.json that matches gitignore spec.",
        "Aider v0.85.1",
        "Main model: gpt-4o with diff edit format\nWeak model: gpt-4o-mini\nGit repo: .git "
        "with 16 files\nRepo-map: using 4096 tokens, auto refresh\nhttps://aider.chat/"
        "HISTORY.html#release-notes\nWould you like to see what's new in this version? "
        "(Y)es/(N)o [Yes]: n"]


def test_re_import_adds_nothing_and_is_deterministic() -> None:
    data = agent(AIDER)
    once = import_aider(data, SOURCE)
    assert import_aider(data, SOURCE) == once
    done = data.count(b"\n")
    again = resume_aider(data, SOURCE, done, lambda sid: 1 + len(
        next(s for s in once if s.header["id"] == sid).events) - 1)
    assert [s.events for s in again] == [[] for _ in once]
    # A session nothing of which is stored is given whole (its header was parked, say).
    assert [s.events for s in resume_aider(data, SOURCE, 40, lambda sid: 0)] == [
        s.events for s in once]


def test_detection() -> None:
    assert detect_format("/x/history.md", agent(AIDER)[:65536]) == "aider"
    assert detect_format("/repo/.aider.chat.history.md", b"") == "aider"


def test_an_impossible_start_time_is_text_not_a_run() -> None:
    data = agent(AIDER).replace(b"started at 2025-07-15 14:53:34", b"started at 2025-19-45 99:00:00")
    sessions = import_aider(data, SOURCE)
    assert len(sessions) == 4
    for session in sessions:
        assert_valid_log(session)


def _run(data: Path, *args: str) -> Any:
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args, "--json"])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def test_recall_ingest_of_a_growing_history_adds_each_line_once(tmp_path: Path) -> None:
    """`recall ingest` while Aider writes: read mid-banner, then mid-output run, then whole;
    every line is imported once and searchable, the same as ingesting the finished file."""
    data = agent(AIDER)
    lines = data.split(b"\n")
    source = tmp_path / "afi-core" / ".aider.chat.history.md"
    source.parent.mkdir()
    added = 0
    for cut in (43, 61, len(lines) - 1):
        source.write_bytes(b"\n".join(lines[:cut]) + b"\n")
        report = _run(tmp_path / "grown", "ingest", str(source))
        assert report["parkedLines"] == 0 and report["rewritten"] == [], report
        added += report["eventsAdded"]
    assert _run(tmp_path / "grown", "ingest", str(source))["unchanged"] == 1
    whole = tmp_path / "whole" / ".aider.chat.history.md"
    whole.parent.mkdir()
    whole.write_bytes(data)
    once = _run(tmp_path / "once", "ingest", str(whole))["eventsAdded"]
    assert added == once + 2  # the two cut output runs continue as one more event each
    # The continuations are searchable: the rest of the cut banner and of the cut run.
    for text in ("Aider v0.85.1", "Running chmod"):
        hits = [i["bestMatch"] for i in _run(tmp_path / "grown", "search", f'"{text}"')["items"]]
        assert any(h["type"] == "user/message" and h["sessionId"].endswith("20250715145334")
                   for h in hits), (text, hits)
    # A line appended to a file that had stopped growing (a new prompt) is added once.
    with source.open("ab") as out:
        out.write(b"\n#### one more question  \n")
    report = _run(tmp_path / "grown", "ingest", str(source))
    assert report["eventsAdded"] == 2 and report["parkedLines"] == 0  # step/start + the prompt


def test_the_kafka_ingest_publishes_each_line_once(tmp_path: Path) -> None:
    """`recall ingest`/`recall watch` over Kafka: what a file published is kept per file, so a
    grown history resumes after the lines published before (a run cut by a read goes out as
    the first part, then the rest) and an unchanged one publishes nothing. (The edge holds a
    partial last line back; publishing itself is the Kafka suite's.)"""
    from streams.runtime.kafka.sent import fresh_records

    data = agent(AIDER)
    seen: dict[str, Any] = {}
    sent: dict[str, list[dict[str, Any]]] = {}
    lines = data.split(b"\n")
    done = 0
    for text in (b"\n".join(lines[:43]) + b"\n", b"\n".join(lines[:61]) + b"\n", data, data):
        published = dict(seen.get("published") or {})
        imported = (resume_aider(text, SOURCE, done, lambda sid, p=published: p.get(sid, -1) + 1)
                    if done else import_aider(text, SOURCE))
        fresh = fresh_records(imported, seen, resumed=done > 0, whole=False,
                              first_line=done + 1)
        assert fresh.rejections == [] and fresh.conflicts == []
        if text is data and done == data.count(b"\n"):
            assert fresh.records == []  # unchanged: nothing again
        for key, value in fresh.records:
            event = orjson.loads(value)
            if event["type"] != "session":
                sent.setdefault(key.decode(), []).append(event)
        done = text.count(b"\n")
    full = {s.header["id"]: s.events for s in import_aider(data, SOURCE)}
    assert list(sent) == list(full)
    for sid, events in sent.items():
        assert [e["seq"] for e in events] == list(range(len(events)))
        assert _covered(events) == _covered(full[sid])
