"""Crush: a real project database (Aug 2025, gpt-5; 2 sessions, 82 messages) with tool errors,
API errors, permission denials and a cancel. The database is read, never written: while Crush
(here: a second connection) writes it in WAL mode, imports go on, and only new messages are
added on the next ingest."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path, PurePath
from typing import Any

import apsw
import orjson
from click.testing import CliRunner
from importer_support import AGENTS, CRUSH, assert_valid_log, by_type, surfaces

from projections import extract_text
from streams.faces.cli.main import main
from streams.ingest.importers import ImportedSession, detect_format
from streams.ingest.importers.crush import import_crush

MAIN = "crush:a20c5ed5-41d4-45f7-88eb-7ba0645f1341"
OTHER = "crush:f306c145-4c83-492c-b575-739c30bbced4"


def _copy(tmp_path: Path) -> Path:
    """The database in a project folder, as Crush keeps it."""
    target = tmp_path / "project" / ".crush" / "crush.db"
    target.parent.mkdir(parents=True)
    shutil.copy(AGENTS / CRUSH, target)
    return target


def _sessions(path: Path) -> dict[str, ImportedSession]:
    found = {s.header["id"]: s for s in import_crush(b"", str(path))}
    for session in found.values():
        assert_valid_log(session)
        assert session.rejections == []
    return found


def run(data: Path, *args: str) -> Any:
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args, "--json"])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sessions_titles_messages_and_errors(tmp_path: Path) -> None:
    db = _copy(tmp_path)
    sessions = _sessions(db)
    assert set(sessions) == {MAIN, OTHER}
    main_session = sessions[MAIN]
    # Times: the rows hold seconds although the schema says milliseconds.
    assert main_session.header == {"type": "session", "version": 0, "id": MAIN,
                                   "createdAt": 1754709060000,
                                   "cwd": str(tmp_path / "project"), "delegationDepth": 0}
    (title,) = by_type(main_session, "session/title")
    assert title["data"]["title"] == "Create and Enhance CRUSH.md with Codebase Guidelines"
    prompt = by_type(main_session, "user/message")[0]
    assert extract_text(prompt).startswith("`Please analyze this codebase and create a **CRUSH.md**")
    models = by_type(main_session, "crush/model")
    assert [(m["data"]["provider"], m["data"]["model"]) for m in models] == [("openai", "gpt-5")]
    calls, results = by_type(main_session, "tool/call"), by_type(main_session, "tool/result")
    assert len(calls) == len(results) == 40
    assert calls[0]["data"]["name"] == "ls"
    assert calls[0]["data"]["arguments"] == {"path": "/Users/max/codeZ/dbos-transact-golang"}
    failed = [r for r in results if r["data"].get("error")]
    assert len(failed) == 8
    assert "File not found" in extract_text(failed[0])
    ends = [e["data"] for e in by_type(main_session, "turn/end")]
    assert [e["reason"] for e in ends].count("error") == 3
    assert "400 Bad Request" in ends[0]["error"]["message"]
    assert [e["error"]["code"] for e in ends if e["reason"] == "aborted"] == [
        "permission_denied", "permission_denied", "permission_denied", "canceled"]


def test_reading_never_writes_the_database_nor_beside_it(tmp_path: Path) -> None:
    db = _copy(tmp_path)
    before, mtime = _digest(db), db.stat().st_mtime_ns
    _sessions(db)
    assert _digest(db) == before and db.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in db.parent.iterdir()) == ["crush.db"]
    assert detect_format(db, db.read_bytes()[:4096]) == "crush"


def test_while_crush_writes_in_wal_mode_an_ingest_adds_only_new_messages(tmp_path: Path) -> None:
    db = _copy(tmp_path)
    data = tmp_path / "data"
    writer = apsw.Connection(str(db))  # Crush, holding the database open in WAL mode
    try:
        assert writer.execute("PRAGMA journal_mode").fetchall() == [("wal",)]
        first = run(data, "ingest", str(tmp_path / "project"))
        assert first["rejected"] == 0 and first["accounting"]["parked"] == 0, first
        writer.execute("BEGIN IMMEDIATE")  # a write in progress does not block the read
        writer.execute(
            "INSERT INTO messages (id, session_id, role, parts, model, created_at, updated_at, "
            "finished_at, provider) VALUES ('m-new', 'f306c145-4c83-492c-b575-739c30bbced4', "
            "'user', ?, NULL, 1755891900, 1755891900, NULL, NULL)",
            ('[{"type":"text","data":{"text":"and now the README"}},'
             '{"type":"finish","data":{"reason":"stop","time":0}}]',))
        assert run(data, "ingest", str(tmp_path / "project"))["eventsAdded"] == 0
        writer.execute("COMMIT")  # lands in crush.db-wal: crush.db itself does not change
        grown = run(data, "ingest", str(tmp_path / "project"))
        assert grown["rejected"] == 0 and grown["rewritten"] == [], grown
        # the new prompt (with its step/start), and the reply it followed: the session's last
        # message, unfinished, held back while Crush had it open, now imported as it stands
        assert grown["eventsAdded"] == 2 + 3
        hits = run(data, "search", "now the README")["items"]
        assert hits[0]["bestMatch"]["sessionId"] == OTHER
        assert run(data, "ingest", str(tmp_path / "project"))["unchanged"] == 1
    finally:
        writer.close()
    titles = {i["header"]["id"]: i["title"] for i in run(data, "sessions")}
    assert titles == {MAIN: "Create and Enhance CRUSH.md with Codebase Guidelines",
                      OTHER: "Instructions in CLI.md"}


def test_a_message_still_being_written_waits_for_its_finish(tmp_path: Path) -> None:
    db = _copy(tmp_path)
    writer = apsw.Connection(str(db))
    try:
        writer.execute(
            "INSERT INTO messages (id, session_id, role, parts, model, created_at, updated_at, "
            "finished_at, provider) VALUES ('m-stream', 'f306c145-4c83-492c-b575-739c30bbced4', "
            "'assistant', '[{\"type\":\"text\",\"data\":{\"text\":\"Partial\"}}]', 'gpt-5', "
            "1755891900, 1755891900, NULL, 'openai')")
        before = {e["data"].get("sourceKey") for e in _sessions(db)[OTHER].events}
        writer.execute("UPDATE messages SET parts = ? WHERE id = 'm-stream'",
                       ('[{"type":"text","data":{"text":"Partial, then whole."}},'
                        '{"type":"finish","data":{"reason":"end_turn","time":1755891901}}]',))
        after = _sessions(db)[OTHER]
    finally:
        writer.close()
    new = [e for e in after.events if e["data"].get("sourceKey") not in before]
    assert [e["type"] for e in new] == ["step/start", "assistant/message", "crush/finish"]
    assert extract_text(new[1]) == "Partial, then whole."


def test_summary_message_shadows_what_came_before_and_children_have_lineage(
        tmp_path: Path) -> None:
    db = _copy(tmp_path)
    writer = apsw.Connection(str(db))
    try:
        (summary_id,) = writer.execute(
            "SELECT id FROM messages WHERE session_id = 'a20c5ed5-41d4-45f7-88eb-7ba0645f1341' "
            "AND role = 'assistant' ORDER BY rowid DESC LIMIT 1").fetchone()
        writer.execute("UPDATE sessions SET summary_message_id = ? WHERE id = "
                       "'a20c5ed5-41d4-45f7-88eb-7ba0645f1341'", (summary_id,))
        writer.execute("UPDATE sessions SET parent_session_id = "
                       "'a20c5ed5-41d4-45f7-88eb-7ba0645f1341' WHERE id = "
                       "'f306c145-4c83-492c-b575-739c30bbced4'")
        sessions = _sessions(db)
    finally:
        writer.close()
    main_session = sessions[MAIN]
    (summary,) = by_type(main_session, "compaction/summary")
    state = surfaces(main_session)
    assert summary["data"]["shadowedSeqs"] and all(
        state[s] == "shadowed" for s in summary["data"]["shadowedSeqs"])
    checkpoint = next(u for u in by_type(main_session, "user/message")
                      if u["data"]["source"].get("plugin") == "compact")
    assert state[checkpoint["seq"]] == "current"
    child = sessions[OTHER].header
    assert child["parentSession"] == MAIN and child["origin"] == "subagent"


def test_recall_watch_takes_a_wal_change_for_the_database() -> None:
    from streams.ingest.importers.detect import source_of
    from streams.ingest.watch import is_log_file

    assert is_log_file("/p/.crush/crush.db") and is_log_file("/p/.crush/crush.db-wal")
    assert source_of(PurePath("/p/.crush/crush.db-wal")) == PurePath("/p/.crush/crush.db")
    assert not is_log_file("/p/other.db-wal")


def test_a_database_that_cannot_be_read_is_parked_whole(tmp_path: Path) -> None:
    db = tmp_path / "project" / ".crush" / "crush.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"SQLite format 3\x00" + b"\x00" * 84 + b"not a database")
    report = run(tmp_path / "data", "ingest", str(tmp_path / "project"))
    assert report["rejectedByCode"] == {"INGEST_IMPORTER_FAILED": 1}
    assert report["accounting"]["balanced"] is True
