"""Embedded runtime: ingest (incremental, rewritten sources, bad input), store safety, recovery."""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Callable
from pathlib import Path

import orjson
from factories import assistant, checkpoint, header, log_only, tool_result, user

from projections.fold import SurfaceState, apply
from streams.core.store import SessionStore, session_file_name
from streams.facade import Recall


def test_ingest_samples_and_search_finds_shadowed_stack_trace(recall: Recall,
                                                              samples_dir: Path) -> None:
    report = recall.ingest([samples_dir]).to_json()
    assert report["files"] == 4 and report["sessions"] == 4 and report["rejected"] == 0
    assert report["lines"] == report["headers"] + report["linesAccepted"]
    page = recall.search_sessions("KeyError: 'EUR'")
    best = page["items"][0]["bestMatch"]
    assert best["sessionId"] == "ci-billing-2025-11-24"
    assert best["surface"] == "shadowed" and best["type"] == "tool/result"
    assert "KeyError" in best["snippet"]


def test_reingest_unchanged_costs_a_stat_and_grown_file_adds_only_new_events(
        recall: Recall, write_log: Callable[..., Path]) -> None:
    path = write_log("s.jsonl", header("s"), [user(0, "first needle"), assistant(1, "reply")])
    assert recall.ingest([path]).events_added == 2
    again = recall.ingest([path]).to_json()
    assert again["unchanged"] == 1 and again["eventsAdded"] == 0
    with path.open("ab") as f:
        f.write(orjson.dumps(user(2, "second needle")) + b"\n")
    grown = recall.ingest([path]).to_json()
    assert grown["eventsAdded"] == 1 and grown["lines"] == 1 and grown["rejected"] == 0
    assert [e["seq"] for e in recall.read_session("s")["events"]] == [0, 1, 2]
    assert len(recall.search_events("s", "needle")["items"]) == 2


def test_partial_last_line_waits_until_it_is_complete(recall: Recall,
                                                      write_log: Callable[..., Path]) -> None:
    path = write_log("s.jsonl", header("s"), [user(0, "a")])
    line = orjson.dumps(user(1, "b"))
    with path.open("ab") as f:
        f.write(line[:10])
    report = recall.ingest([path]).to_json()
    assert report["eventsAdded"] == 1 and report["rejected"] == 0
    with path.open("ab") as f:
        f.write(line[10:] + b"\n")
    assert recall.ingest([path]).events_added == 1


def test_rewritten_source_is_reported_and_never_merged(recall: Recall,
                                                       write_log: Callable[..., Path]) -> None:
    path = write_log("s.jsonl", header("s"), [user(0, "original text")])
    recall.ingest([path])
    write_log("s.jsonl", header("s"), [user(0, "rewritten text"), user(1, "more")])
    report = recall.ingest([path]).to_json()
    assert report["rewritten"] == [str(path.resolve())]
    assert report["eventsAdded"] == 0
    assert report["rejectedByCode"] == {"INGEST_REWRITTEN_SOURCE": 1}
    assert recall.search_sessions("rewritten text")["items"] == []
    assert len(recall.read_session("s")["events"]) == 1


def test_bad_input_directory_ingests_valid_sessions_and_parks_the_rest(
        tmp_path: Path, write_log: Callable[..., Path]) -> None:
    logs = tmp_path / "mixed"
    write_log("good.jsonl", header("good"), [user(0, "healthy needle")], directory=logs)
    write_log("malformed.jsonl", header("malformed"), [user(0, "kept")],
              raw_lines=[b'{"type": "user/message", "seq": 1,', orjson.dumps(user(2, "x"))],
              directory=logs)
    write_log("gap.jsonl", header("gap"), [user(0, "a"), user(5, "gap")], directory=logs)
    write_log("big.jsonl", header("big"), [user(0, "a"), user(1, "x" * 3000)], directory=logs)
    write_log("surface.jsonl", header("surface"), [user(0, "a"), checkpoint(1, "s", 0, 0, [])],
              directory=logs)
    (logs / "notes.txt").write_text("not a log")
    with Recall.open(tmp_path / "data", max_event_bytes=2048) as recall:
        report = recall.ingest([logs]).to_json()
        assert report["files"] == 5
        assert report["rejectedByCode"] == {"INGEST_MALFORMED_JSON": 1,
                                            "INGEST_AFTER_REJECTED": 1, "INGEST_SEQ_GAP": 1,
                                            "INGEST_OVERSIZED_EVENT": 1,
                                            "INGEST_INVALID_SURFACE": 1}
        assert report["lines"] == (report["headers"] + report["linesAccepted"]
                                   + report["duplicateLines"] + report["rejected"])
        assert recall.search_sessions("healthy needle")["items"][0]["header"]["id"] == "good"
        ids = {item["header"]["id"] for item in recall.list_sessions()}
        assert ids == {"good", "malformed", "gap", "big", "surface"}
    letters = [orjson.loads(line) for line in
               (tmp_path / "data" / "dead-letter.jsonl").read_bytes().splitlines()]
    malformed = next(x for x in letters if x["code"] == "INGEST_MALFORMED_JSON")
    assert base64.b64decode(malformed["bytes"]) == b'{"type": "user/message", "seq": 1,'
    assert malformed["line"] == 3 and malformed["sessionId"] == "malformed"
    assert malformed["source"].endswith("malformed.jsonl")


def test_hostile_session_ids_never_become_paths_and_files_are_owner_only(
        tmp_path: Path, write_log: Callable[..., Path]) -> None:
    hostile = "../../etc/passwd\x00/../x"
    path = write_log("h.jsonl", header(hostile, cwd="/w"), [user(0, "owned")])
    data = tmp_path / "data"
    with Recall.open(data) as recall:
        recall.ingest([path])
        assert recall.read_session(hostile)["header"]["id"] == hostile
    stored = data / "store" / session_file_name(hostile)
    assert stored.exists()
    assert not (tmp_path / "etc").exists()
    for item in data.rglob("*"):
        mode = stat.S_IMODE(item.stat().st_mode)
        assert mode & 0o077 == 0, f"{item} is {oct(mode)}"


def test_exact_duplicates_are_skipped_and_conflicts_parked(
        recall: Recall, write_log: Callable[..., Path]) -> None:
    first = write_log("a.jsonl", header("s"), [user(0, "a"), assistant(1, "b")])
    recall.ingest([first])
    copy = write_log("b.jsonl", header("s"), [user(0, "a"), assistant(1, "b"), user(2, "c")])
    report = recall.ingest([copy]).to_json()
    assert report["duplicateLines"] == 2 and report["eventsAdded"] == 1
    conflict = write_log("c.jsonl", header("s"), [user(0, "DIFFERENT")])
    assert recall.ingest([conflict]).rejected_by_code == {"INGEST_DUPLICATE_CONFLICT": 1}
    other_header = write_log("d.jsonl", header("s", created_at=5), [user(0, "a")])
    assert recall.ingest([other_header]).rejected_by_code["INGEST_HEADER_CONFLICT"] == 1


def test_crash_between_store_and_index_is_repaired_on_open(
        tmp_path: Path, write_log: Callable[..., Path]) -> None:
    data = tmp_path / "data"
    path = write_log("s.jsonl", header("s"), [user(0, "alpha needle")])
    with Recall.open(data) as recall:
        recall.ingest([path])
    # simulate a crash after the store append of a second event, before its index write
    store_file = data / "store" / session_file_name("s")
    with store_file.open("ab") as f:
        f.write(orjson.dumps(assistant(1, "beta needle")) + b"\n")
    (data / "index-pending").touch()
    with Recall.open(data) as recall:
        hits = recall.search_events("s", "needle")["items"]
        assert sorted(h["seq"] for h in hits) == [0, 1]
    assert not (data / "index-pending").exists()


def test_store_is_append_only_native_format(recall: Recall, write_log: Callable[..., Path],
                                            tmp_path: Path) -> None:
    events = [user(0, "a"), tool_result(1, "out"), log_only(2, "turn/end", {"reason": "completed"})]
    path = write_log("s.jsonl", header("s", cwd="/w"), events)
    recall.ingest([path])
    stored = tmp_path / "data" / "store" / session_file_name("s")
    assert stored.read_bytes() == path.read_bytes()
    assert os.stat(stored).st_mode & 0o777 == 0o600


def test_a_write_torn_by_a_crash_is_cut_off_and_appends_continue(tmp_path: Path) -> None:
    """kill -9 mid-append leaves a torn last line, or an empty file if the header was torn."""
    store = SessionStore(tmp_path / "store")
    head = header("torn", cwd="/w")
    events = [user(0, "first"), assistant(1, "second")]
    state = SurfaceState()
    for event in events:
        state = apply(state, event)
    store.append(head, events, state)
    path = store.path_of("torn")
    with path.open("ab") as f:
        f.write(b'{"type":"user/message","seq":2,"da')  # the crash
    reopened = SessionStore(tmp_path / "store")
    stored = reopened.load("torn")
    assert stored is not None and stored.state.next_seq == 2
    assert path.read_bytes().endswith(b"\n")  # the torn tail is gone
    third = user(2, "third")
    reopened.append(head, [third], apply(stored.state, third))
    assert [e["seq"] for e in SessionStore(tmp_path / "store").read("torn")[1]] == [0, 1, 2]
    # a header torn before its newline: the session is not stored yet, and can be again
    empty = reopened.path_of("empty")
    empty.write_bytes(b'{"id":"emp')
    assert "empty" not in reopened.session_ids() and reopened.load("empty") is None
    reopened.append(header("empty", cwd="/w"), [], SurfaceState())
    assert reopened.read("empty")[0]["id"] == "empty" and "empty" in reopened.session_ids()
