"""One writer per session. A reference into a session someone else writes (an agent's file)
returns its messages instead of appending, so the file's next lines still ingest; sessions recall
writes (`recall create`) get the two appends and replay byte for byte."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from datadirs import REALDATA, SAMPLES, dead_letters, recall_cmd

from projections import model_transcript
from projections.errors import RecallError
from streams.core.store import session_file_name
from streams.facade import Recall

CLAUDE = REALDATA / "claude-code-2.1.14-compaction.jsonl"


def _claude_session(recall: Recall) -> str:
    ids = [s["header"]["id"] for s in recall.list_sessions()
           if s["header"]["id"] not in {"ci-billing-2025-11-24", "docs-quickstart-2025-11-25",
                                        "infra-kafka-2025-11-26", "ci-followup-2025-12-01"}]
    assert len(ids) == 1, ids
    return str(ids[0])


def test_reference_into_an_imported_session_returns_and_the_file_keeps_growing(
        tmp_path: Path) -> None:
    lines = CLAUDE.read_bytes().splitlines(keepends=True)
    live = tmp_path / "agent" / "session.jsonl"
    live.parent.mkdir()
    live.write_bytes(b"".join(lines[:30]))
    with Recall.open(tmp_path / "data") as recall:
        recall.ingest([SAMPLES, live])
        target = _claude_session(recall)
        before = recall.read_session(target)["events"]
        result = recall.prepare_reference(target, "same failure?",
                                          references=[{"sessionId": "ci-billing-2025-11-24"}],
                                          message_id="m-ref")
        assert result["delivery"] == "returned" and "appended" not in result
        context, readable = result["messages"]
        assert context == result["additionalContext"]
        assert readable["id"] == "m-ref" and readable["content"] == result["content"]
        assert recall.read_session(target)["events"] == before  # nothing appended
        # the agent keeps writing its file: every new line ingests, nothing is parked
        with live.open("ab") as f:
            f.write(b"".join(lines[30:]))
        report = recall.ingest([live]).to_json()
        assert report["parkedLines"] == 0 and report["accounting"]["balanced"]
        assert report["linesAccepted"] == len(lines) - 30
        grown = recall.read_session(target)["events"]
    assert dead_letters(tmp_path / "data") == []
    with Recall.open(tmp_path / "clean") as clean:  # equal to a clean import of the whole file
        clean.ingest([CLAUDE])
        assert clean.read_session(target)["events"] == grown


def test_reference_into_a_recall_written_session_appends_and_replays(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Recall.open(data) as recall:
        recall.ingest([SAMPLES])
        header = recall.create_session("own-1", cwd="/home/dev/shop")
        assert header["writer"] == "recall"
        assert recall.append_message("own-1", "what broke last time?")["seqs"] == [0]
        result = recall.prepare_reference("own-1", "this one",
                                          references=[{"sessionId": "ci-billing-2025-11-24"}],
                                          message_id="m-own")
        assert result["delivery"] == "appended" and result["appended"] == [1, 2]
        log = recall.read_session("own-1")["events"]
        assert [e["data"]["id"] for e in log[1:]] == ["m-own:context", "m-own"]
        assert log[1]["data"] == result["messages"][0] == result["additionalContext"]
        stored = (data / "store" / session_file_name("own-1")).read_bytes()
        transcript = model_transcript(log)
        digest = recall.index_digest()
        replayed = recall.replay()
        assert replayed["digest"] == digest["digest"]
        assert recall.read_session("own-1")["events"] == log
    # the stored log, given to a fresh data dir, replays byte for byte
    exported = tmp_path / "own-1.jsonl"
    exported.write_bytes(stored)
    with Recall.open(tmp_path / "other") as other:
        other.ingest([exported])
        again = other.read_session("own-1")
        assert again["header"]["writer"] == "recall"
        assert again["events"] == log and model_transcript(again["events"]) == transcript
        assert b"\n".join(orjson.dumps(e) for e in again["events"]) == b"\n".join(
            stored.splitlines()[1:])


def test_recall_appends_only_to_sessions_it_writes(tmp_path: Path) -> None:
    with Recall.open(tmp_path / "data") as recall:
        recall.ingest([SAMPLES])
        with pytest.raises(RecallError) as refused:
            recall.append_message("docs-quickstart-2025-11-25", "hi")
        assert refused.value.code == "RECALL_NOT_WRITER"
        recall.create_session("own-2", created_at=1_700_000_000_000)
        with pytest.raises(RecallError) as exists:
            recall.create_session("own-2")
        assert exists.value.code == "RECALL_SESSION_EXISTS"
        with pytest.raises(RecallError) as bad:  # validated before anything is written
            recall.append_events("own-2", [{"type": "user/message", "data": {}}])
        assert recall.read_session("own-2")["events"] == []
        assert bad.value.code.startswith(("INGEST_", "SESSION_QUERY_"))
    # an outside log claiming a recall-written id is a second writer: a header conflict
    claim = tmp_path / "claim.jsonl"
    claim.write_bytes(orjson.dumps({"type": "session", "version": 0, "id": "own-2",
                                    "createdAt": 1_700_000_000_000, "delegationDepth": 0})
                      + b"\n")
    with Recall.open(tmp_path / "data") as recall:
        report = recall.ingest([claim]).to_json()
        assert report["rejectedByCode"] == {"INGEST_HEADER_CONFLICT": 1}
        assert recall.read_session("own-2")["header"]["writer"] == "recall"


def test_cli_create_append_and_reference_delivery(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert recall_cmd(data, "ingest", str(SAMPLES)).returncode == 0
    created = recall_cmd(data, "create", "--id", "own-3", "--cwd", "/home/dev/shop", "--json")
    assert created.returncode == 0 and orjson.loads(created.stdout)["writer"] == "recall"
    events = b'{"type":"session/title","data":{"title":"Own work"}}\n'
    appended = recall_cmd(data, "append", "own-3", "--message", "hello", "--events", "-",
                          "--json", stdin=events)
    assert appended.returncode == 0, appended.stderr
    assert orjson.loads(appended.stdout) == {"sessionId": "own-3", "seqs": [0, 1]}
    ref = recall_cmd(data, "reference", "--target", "own-3", "--message", "x", "--source",
                     "ci-billing-2025-11-24", "--json")
    assert orjson.loads(ref.stdout)["delivery"] == "appended"
    ref = recall_cmd(data, "reference", "--target", "docs-quickstart-2025-11-25", "--message",
                     "x", "--source", "ci-billing-2025-11-24")
    assert ref.returncode == 0 and b"not appended" in ref.stdout
    refused = recall_cmd(data, "append", "docs-quickstart-2025-11-25", "--message", "x",
                         "--json")
    assert refused.returncode == 1
    assert orjson.loads(refused.stdout)["error"]["code"] == "RECALL_NOT_WRITER"
