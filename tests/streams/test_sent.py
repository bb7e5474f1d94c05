"""What each file published over Kafka (streams/runtime/kafka/sent.py): one record per data dir shared under
the writer lock, and a new import of a file reduced to what the embedded store would add."""

from __future__ import annotations

import copy
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.ingest.importers import IMPORTERS
from streams.ingest.importers.documents import extend_events
from streams.runtime.kafka.sent import STATE_FILE, SentFiles, fresh_records, target_of

AGENTS = Path(__file__).resolve().parents[1] / "data" / "agents"
GEMINI = "gemini-cli-0.34/session-2026-03-18T01-46-50316244.json"
OPENCODE = "opencode/ses_20be19bd6ffeHn5B6DdBVxU8TR.json"
TARGET = target_of("localhost:9092", "recall")


def _sent(records: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
    return [orjson.loads(value) for _, value in records]


def test_two_processes_share_one_record_under_the_writer_lock(tmp_path: Path) -> None:
    ingest, watch = (SentFiles(tmp_path, lock_timeout_s=5) for _ in range(2))
    with ingest.hold() as state:
        state["/logs/a.jsonl"] = {"size": 10, "mtime": 1, "target": TARGET, "lines": 2}
    with watch.hold():  # another process wrote since: read again
        assert watch.seen("/logs/a.jsonl", TARGET)["lines"] == 2
        watch.state["/logs/a.jsonl"] = {**watch.seen("/logs/a.jsonl", TARGET), "lines": 5}
    with ingest.hold():
        assert ingest.seen("/logs/a.jsonl", TARGET)["lines"] == 5
        # what went to another cluster or topic prefix says nothing about this one
        assert ingest.seen("/logs/a.jsonl", target_of("other:9092", "recall")) == {}
        assert ingest.seen("/logs/new.jsonl", TARGET) == {}
    assert stat.S_IMODE((tmp_path / STATE_FILE).stat().st_mode) == 0o600


def _event(seq: int, text: str) -> dict[str, Any]:
    return {"seq": seq, "type": "user/message", "data": {"text": text}}


HEADER = {"type": "session", "id": "claude:s1", "createdAt": 1}


def test_a_grown_append_only_import_sends_only_the_new_events() -> None:
    seen: dict[str, Any] = {}
    first = fresh_records([(HEADER, [_event(0, "a"), _event(1, "b")], [])], seen,
                          resumed=False, whole=False, first_line=1)
    assert [e["type"] for e in _sent(first.records)] == ["session", "user/message",
                                                         "user/message"]
    assert (first.headers, first.events) == (1, 2)
    again = fresh_records([(HEADER, [_event(0, "a"), _event(1, "b")], [])], seen,
                          resumed=False, whole=False, first_line=3)
    assert again.records == [] and again.conflicts == []
    grown = fresh_records([(HEADER, [_event(0, "a"), _event(1, "b"), _event(2, "c")], [])],
                          seen, resumed=False, whole=False, first_line=3)
    assert _sent(grown.records) == [_event(2, "c")] and grown.headers == 0
    assert seen["published"] == {"claude:s1": 2}


def test_an_append_only_import_that_changed_what_was_sent_is_a_conflict() -> None:
    seen: dict[str, Any] = {}
    fresh_records([(HEADER, [_event(0, "a"), _event(1, "b")], [])], seen, resumed=False,
                  whole=False, first_line=1)
    changed = fresh_records([(HEADER, [_event(0, "A"), _event(1, "b"), _event(2, "c")], [])],
                            seen, resumed=False, whole=False, first_line=3)
    # as the embedded ingest: reported (once per file, by the caller), nothing merged
    assert changed.records == [] and changed.conflicts == [("claude:s1", 2)]
    assert seen["published"] == {"claude:s1": 1}


def test_a_record_without_hashes_continues_by_seq() -> None:
    """A file published by an earlier shipper (no `chains`): the events beyond its seqs."""
    seen: dict[str, Any] = {"published": {"claude:s1": 0}}
    grown = fresh_records([(HEADER, [_event(0, "a"), _event(1, "b")], [])], seen,
                          resumed=False, whole=False, first_line=2)
    assert _sent(grown.records) == [_event(1, "b")]


@pytest.mark.parametrize("name", [GEMINI, OPENCODE])
def test_a_rewritten_document_continues_as_the_embedded_store_does(name: str) -> None:
    """Gemini CLI JSON / OpenCode: the file is one document rewritten as it grows; what goes
    out is exactly what the embedded ingest appends (extend_events on the stored events)."""
    importer = IMPORTERS["gemini-cli" if name == GEMINI else "opencode"]
    doc = orjson.loads((AGENTS / name).read_bytes())
    early = copy.deepcopy(doc)
    early["messages"] = doc["messages"][:3]
    if name == GEMINI:  # the last message's tool calls had not finished yet
        early["messages"][-1].pop("toolCalls", None)
        early.pop("summary", None)
    else:
        early["info"]["title"] = "New session - 2026-05-04T17:52:05.673Z"
    source = f"/chats/{Path(name).name}"
    ((header, stored, _),) = importer(orjson.dumps(early), source)
    ((_, full, _),) = importer(orjson.dumps(doc), source)
    # as an earlier version of the agent wrote it: its first piece read differently, so the
    # new import does not extend what was sent (the key-based path)
    stored = copy.deepcopy(stored)
    stored[0]["data"]["raw"] = {"written": "differently"}
    assert full[:len(stored)] != stored
    seen: dict[str, Any] = {}
    first = fresh_records([(header, stored, [])], seen, resumed=False, whole=True,
                          first_line=1)
    assert _sent(first.records)[1:] == stored
    grown = fresh_records([(header, full, [])], seen, resumed=False, whole=True, first_line=1)
    expected = extend_events(stored, full)
    assert expected and _sent(grown.records) == expected and grown.conflicts == []
    # the document rewritten again unchanged: nothing more
    assert fresh_records([(header, full, [])], seen, resumed=False, whole=True,
                         first_line=1).records == []


def _keyed(seq: int, key: str, **data: Any) -> dict[str, Any]:
    return {"seq": seq, "type": "opencode/part", "data": {"sourceKey": key, **data}}


def test_a_document_whose_piece_finished_late_appends_it_renumbered() -> None:
    """A tool result written into the document before a message imported earlier: the new
    pieces go out after what was sent, their references renumbered, as extend_events does."""
    header = {"type": "session", "id": "opencode:s", "createdAt": 1}
    stored = [_keyed(0, "a"), _keyed(1, "b"), _keyed(2, "c")]
    fresh = [_keyed(0, "a"), _keyed(1, "b"), _keyed(2, "x", of=[1]), _keyed(3, "c"),
             {**_keyed(4, "d"), "sourceEventSeqs": [2]}]
    seen: dict[str, Any] = {}
    fresh_records([(header, stored, [])], seen, resumed=False, whole=True, first_line=1)
    grown = fresh_records([(header, fresh, [])], seen, resumed=False, whole=True, first_line=1)
    assert _sent(grown.records) == extend_events(stored, fresh) == [
        _keyed(3, "x", of=[1]), {**_keyed(4, "d"), "sourceEventSeqs": [3]}]
    assert seen["published"] == {"opencode:s": 4}
    assert seen["keys"]["opencode:s"] == {"a": 0, "b": 1, "c": 2, "x": 3, "d": 4}
