"""Codex CLI importer on a real rollout excerpt: mapping, errors, subagent lineage, compaction."""

from __future__ import annotations

import copy
from typing import Any

import zstandard
from importer_support import (
    CODEX,
    assert_valid_log,
    by_type,
    dumped,
    line_of,
    load,
    records,
    surfaces,
    to_bytes,
    types,
)

from projections import extract_text, fold_surface
from projections.errors import INGEST_MALFORMED_JSON, INGEST_SCHEMA_VIOLATION
from streams.ingest.importers import ImportedSession, import_codex

PARENT = "019ddb75-a272-7d50-b41d-90017f500b5a"
CHILD = "019ddb90-9933-7461-ad38-875618e21ac6"  # new_thread_id of the excerpt's spawn event


def _session(data: bytes | None = None, name: str = CODEX) -> ImportedSession:
    (session,) = import_codex(load(CODEX) if data is None else data, name)
    return session


def test_rollout_maps_to_one_valid_session() -> None:
    session = _session()
    assert session.rejections == []
    assert_valid_log(session)
    assert session.header == {"type": "session", "version": 0, "id": f"codex:{PARENT}",
                              "createdAt": 1777503412854,
                              "cwd": "/Users/alisha/.marvin/worktrees/project-overview",
                              "delegationDepth": 0}
    counts = types(session)
    source_items = records(CODEX)
    calls = sum(1 for r in source_items if r["type"] == "response_item"
                and r["payload"]["type"] in ("function_call", "custom_tool_call"))
    outputs = sum(1 for r in source_items if r["type"] == "response_item"
                  and r["payload"]["type"].endswith("_output"))
    assert counts["tool/call"] == calls == 21
    assert counts["tool/result"] == outputs == 21
    assert counts["turn/start"] == 2 and counts["turn/end"] == 1
    # The UI stream duplicates history: kept, log-only and ignorable, never surface.
    assert counts["codex/exec_command_end"] == 15 and counts["codex/user_message"] == 2
    for event in session.events:
        if event["type"].startswith("codex/"):
            assert event["ignorable"] is True and "surfaceOp" not in event
    assert set(surfaces(session)) == {"current", "log-only"}


def test_person_prompts_and_injected_context_are_told_apart() -> None:
    session = _session()
    sources = [(e["data"]["source"], extract_text(e)[:40]) for e in by_type(session,
                                                                             "user/message")]
    person = [text for source, text in sources if source == {"kind": "user"}]
    assert person == ["marvin work", "what is going on. why is this taking so "]
    injected = [text for source, text in sources if source["kind"] == "plugin"]
    assert [t.split("\n")[0][:22] for t in injected] == [
        "<permissions instructi", "# AGENTS.md instructio", "<subagent_notification",
        "<turn_aborted>"]


def test_failed_command_output_is_an_error_result_and_searchable() -> None:
    session = _session()
    errors = [e for e in by_type(session, "tool/result") if e["data"].get("error")]
    assert {e["data"]["error"]["code"] for e in errors} == {"EXIT_1"}
    flagged = [e for e in errors if "unknown flag: --agent-type" in extract_text(e)]
    assert len(flagged) == 1
    part = flagged[0]["data"]["message"]["content"][0]
    assert part["isError"] is True and part["toolCallId"] == "call_GphHv3nDvoV2EgFmkfICVtzd"
    call = next(c for c in by_type(session, "tool/call")
                if c["data"]["callId"] == part["toolCallId"])
    # arguments were a JSON string in the rollout; the native call holds the decoded object.
    assert call["data"]["arguments"]["cmd"] == "marvin status --agent-type codex"
    assert (call["data"]["turn"], call["data"]["step"]) == (flagged[0]["data"]["turn"],
                                                            flagged[0]["data"]["step"])
    aborted = [e for e in by_type(session, "turn/end") if e["data"]["reason"] == "aborted"]
    assert len(aborted) == 1 and extract_text(aborted[0]) == "aborted"


def test_reasoning_is_kept_but_never_indexed() -> None:
    session = _session()
    thinking = [e for e in by_type(session, "assistant/message")
                if e["data"]["message"]["content"][0]["type"] == "reasoning"]
    assert thinking and all(extract_text(e) == "" for e in thinking)
    assert all(line_of(e)["payload"]["encrypted_content"] == "REDACTED" for e in thinking)


def _child_rollout() -> bytes:
    """A subagent thread as Codex writes it: session_meta.source.subagent.thread_spawn names the
    parent. Built from the excerpt's real lines (the held-out subagent files are not public)."""
    lines = records(CODEX)
    meta = copy.deepcopy(lines[0])
    meta["payload"].update(id=CHILD, timestamp="2026-04-29T23:26:19.900Z", source={
        "subagent": {"thread_spawn": {"parent_thread_id": PARENT, "depth": 1,
                                      "agent_nickname": "Socrates", "agent_role": "worker"}}})
    return to_bytes([meta, *lines[1:20]])


def test_subagent_thread_gets_parent_session() -> None:
    child = _session(_child_rollout(), f"rollout-2026-04-29T16-26-19-{CHILD}.jsonl")
    assert child.header["id"] == f"codex:{CHILD}"
    assert child.header["parentSession"] == f"codex:{PARENT}"
    assert child.header["origin"] == "subagent" and child.header["delegationDepth"] == 1
    assert_valid_log(child)
    spawn = next(e for e in by_type(_session(), "codex/collab_agent_spawn_end"))
    assert line_of(spawn)["payload"]["new_thread_id"] == CHILD


def _compacted_rollout() -> tuple[bytes, int]:
    """Lines 1-40 of the excerpt, a remote compaction (0.125 shape: empty message, replacement
    history = earlier user messages verbatim, the developer message, one encrypted compaction
    item), its context_compacted event, then lines 41-60."""
    lines = records(CODEX)
    history: list[dict[str, Any]] = [r["payload"] for r in lines[:40]
                                     if r["type"] == "response_item"
                                     and r["payload"]["type"] == "message"
                                     and r["payload"]["role"] in ("user", "developer")]
    history.append({"type": "compaction", "encrypted_content": "REDACTED"})
    compacted = {"timestamp": "2026-04-29T22:58:00.000Z", "type": "compacted",
                 "payload": {"message": "", "replacement_history": history}}
    event = {"timestamp": "2026-04-29T22:58:00.001Z", "type": "event_msg",
             "payload": {"type": "context_compacted"}}
    return to_bytes([*lines[:40], compacted, event, *lines[40:60]]), 41


def test_compacted_item_shadows_what_it_replaced() -> None:
    data, line = _compacted_rollout()
    session = _session(data)
    assert_valid_log(session)
    kinds = [e["type"] for e in session.events]
    start = kinds.index("compaction/start")
    assert kinds[start:start + 5] == ["compaction/start", "compaction/summary", "user/message",
                                      "compaction/end", "codex/context_compacted"]
    before = fold_surface(session.events[:start]).nodes
    checkpoint = session.events[start + 2]
    assert checkpoint["data"]["source"] == {"kind": "plugin", "plugin": "compact",
                                            "compactionId": f"codex:{PARENT}#compact-{line}"}
    assert checkpoint["surfaceOp"] == {"op": "replace", "start": before[0], "end": before[-1]}
    assert checkpoint["sourceEventSeqs"] == [start, start + 1, *before]
    # The surface now holds the replacement history: the earlier prompt, verbatim.
    assert "marvin work" in extract_text(checkpoint).split("\n")
    classes = surfaces(session)
    assert {classes[s] for s in before} == {"shadowed"}
    nodes = fold_surface(session.events).nodes
    assert nodes[0] == checkpoint["seq"] and len(nodes) > 1


def test_zstd_rollout_imports_like_the_plain_one() -> None:
    packed = zstandard.ZstdCompressor().compress(load(CODEX))
    zipped = _session(packed, "rollout.jsonl.zst")
    plain = _session()
    assert dumped(zipped) == dumped(plain)


def test_import_is_deterministic() -> None:
    first, second = _session(), _session()
    assert dumped(first) == dumped(second)


def test_bad_input_is_rejected_with_line_and_the_rest_imports() -> None:
    lines = to_bytes(records(CODEX)[:30]).splitlines(keepends=True)
    data = b"".join([*lines[:10], b'{"type":"event_msg","payload":"not an object"}\n',
                     b'{"timestamp":"x","type":"brand_new_item","payload":{}}\n',
                     *lines[10:], lines[12][:50]])
    session = _session(data)
    assert [(r.line, r.code) for r in session.rejections] == [
        (11, INGEST_SCHEMA_VIOLATION), (33, INGEST_MALFORMED_JSON)]
    assert_valid_log(session)
    assert types(session)["codex/brand_new_item"] == 1
    clean = _session(to_bytes(records(CODEX)[:30]))
    assert types(session) - types(clean) == {"codex/brand_new_item": 1}


def test_corrupt_zstd_is_one_rejection_not_an_exception() -> None:
    (orphan,) = import_codex(b"\x28\xb5\x2f\xfd" + b"garbage", "rollout-x.jsonl.zst")
    assert orphan.events == []
    assert [r.code for r in orphan.rejections] == [INGEST_MALFORMED_JSON]


def test_missing_session_meta_falls_back_to_the_file_name() -> None:
    body = to_bytes(records(CODEX)[1:20])
    session = _session(body, f"rollout-2026-04-29T15-56-52-{PARENT}.jsonl")
    assert session.header["id"] == f"codex:{PARENT}"
    assert session.header["createdAt"] == 1777503417015  # the first record's timestamp
    assert "cwd" not in session.header
    assert_valid_log(session)
