"""Continue: a real session document (Dec 2024, Mistral Large; its first 8 of 26 history items)
and the `sessions.json` entry that dates it (copied from the same folder of the same commit,
see tests/data/agents/continue/README.md; written beside the document by `_placed`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path, PurePath
from typing import Any

import orjson
from click.testing import CliRunner
from importer_support import AGENTS, agent, assert_valid_log, by_type, document, with_raw

from projections import extract_text
from streams.faces.cli.main import main
from streams.ingest.importers import ImportedSession, detect_format
from streams.ingest.importers.continue_dev import import_continue

DOC = "continue/5d3764fb-da1f-4d6b-b170-9a6601afa210.json"
SID = "continue:5d3764fb-da1f-4d6b-b170-9a6601afa210"
INDEX = [{"sessionId": "5d3764fb-da1f-4d6b-b170-9a6601afa210",
          "title": "Fix PostgreSQL script error", "dateCreated": "1734768169673",
          "workspaceDirectory": "/workspace"}]


def _placed(folder: Path) -> Path:
    """The document and its `sessions.json`, as Continue keeps them."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(AGENTS / DOC, folder / PurePath(DOC).name)
    (folder / "sessions.json").write_bytes(orjson.dumps(INDEX, option=orjson.OPT_INDENT_2))
    return folder / PurePath(DOC).name


def _session(data: bytes, source: str) -> ImportedSession:
    (session,) = import_continue(data, source)
    assert_valid_log(session)
    assert session.rejections == []
    return session


def run(data: Path, *args: str) -> Any:
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args, "--json"])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def test_messages_title_model_and_workspace(tmp_path: Path) -> None:
    source = _placed(tmp_path / "sessions")
    session = _session(source.read_bytes(), str(source))
    assert session.header == {"type": "session", "version": 0, "id": SID,
                              "createdAt": 1734768169673, "cwd": "/workspace",
                              "delegationDepth": 0}
    assert len(with_raw(session)) == 1 + 8  # the document's own fields, and every item
    users, replies = by_type(session, "user/message"), by_type(session, "assistant/message")
    assert len(users) == len(replies) == 4
    assert users[1]["data"]["source"] == {"kind": "user"}
    assert extract_text(users[1]) == "надрукуй весь скрипт з початку"
    assert extract_text(replies[0]).startswith("Ошибка `Error: PGDATA или PGPORT")
    assert [e["data"]["model"] for e in by_type(session, "continue/model")] == ["Mistral Large"]
    (title,) = by_type(session, "session/title")
    assert title["data"]["title"] == "Fix PostgreSQL script error"
    # Continue records no times: every event takes the session's date, and says where it is from
    (top,) = by_type(session, "continue/session")
    assert top["data"]["timeFrom"] == "sessions.json dateCreated"
    assert {e["time"] for e in session.events} == {1734768169673}


def test_without_sessions_json_the_file_modification_time_dates_it(tmp_path: Path) -> None:
    source = tmp_path / "sessions" / "s.json"
    source.parent.mkdir()
    shutil.copy(AGENTS / DOC, source)
    os.utime(source, ns=(1_700_000_000_123_000_000, 1_700_000_000_123_000_000))
    session = _session(source.read_bytes(), str(source))
    assert session.header["createdAt"] == 1_700_000_000_123
    (top,) = by_type(session, "continue/session")
    assert top["data"]["timeFrom"] == "file modification time"
    # bytes alone (no file): dated 0, said so
    bare = _session(agent(DOC), "/nowhere/s.json")
    assert bare.header["createdAt"] == 0
    assert by_type(bare, "continue/session")[0]["data"]["timeFrom"] == "none"


def test_a_rewritten_document_that_grew_adds_only_what_is_new(tmp_path: Path) -> None:
    """Continue rewrites the document as the session grows (and its modification time moves):
    the grown document adds only its new exchanges, under the first header."""
    doc = document(DOC)
    folder = tmp_path / "home" / ".continue" / "sessions"
    folder.mkdir(parents=True)
    target = folder / "5d3764fb-da1f-4d6b-b170-9a6601afa210.json"
    target.write_bytes(orjson.dumps({**doc, "history": doc["history"][:4]},
                                    option=orjson.OPT_INDENT_2))
    os.utime(target, ns=(1_700_000_000_000_000_000,) * 2)
    data = tmp_path / "data"
    first = run(data, "ingest", str(tmp_path / "home"))
    assert first["rejected"] == 0 and first["eventsAdded"] > 0
    target.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    os.utime(target, ns=(1_700_000_600_000_000_000,) * 2)
    grown = run(data, "ingest", str(tmp_path / "home"))
    assert grown["rejected"] == 0 and grown["rewritten"] == [], grown
    assert grown["eventsAdded"] == 2 + 4  # two step/starts, four messages
    (item,) = run(data, "sessions")
    assert item["header"]["createdAt"] == 1_700_000_000_000  # the first header is kept
    assert item["title"] == "Fix PostgreSQL script error"


def test_detection_tells_a_continue_document() -> None:
    assert detect_format(Path("x.json"), agent(DOC)[:4096]) == "continue"
    assert detect_format(Path("x.json"), b'[{"sessionId":"a","title":"t"}]') is None


def test_recall_ingest_of_a_continue_folder(tmp_path: Path) -> None:
    _placed(tmp_path / "in")
    data = tmp_path / "data"
    report = run(data, "ingest", str(tmp_path / "in"))
    assert report["rejected"] == 0 and report["accounting"]["parked"] == 0, report
    assert not report.get("passedOver")  # sessions.json is read by the importer, not a log
    (item,) = run(data, "sessions")
    assert item["header"]["id"] == SID and item["title"] == "Fix PostgreSQL script error"
