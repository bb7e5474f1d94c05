"""`recall ingest` over Kafka of files that grew since an earlier `recall ingest` publishes only
what is new, as the embedded ingest stores it — an Aider history whose last block grew (resumed,
not re-imported), rewritten whole documents (Gemini CLI JSON, OpenCode), an unchanged file
(nothing) — and the index ends up identical to the embedded one."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.core.settings import Settings
from streams.facade import Recall
from tests.integration.kafkaio import WorkerProcess
from tests.integration.test_kafka_contract import wait_indexed

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

AGENTS = Path(__file__).resolve().parents[1] / "data" / "agents"
AIDER = AGENTS / "aider-0.85" / ".aider.chat.history.md"
GEMINI = AGENTS / "gemini-cli-0.34" / "session-2026-03-18T01-46-50316244.json"
OPENCODE = AGENTS / "opencode" / "ses_20be19bd6ffeHn5B6DdBVxU8TR.json"


def _early(path: Path) -> bytes:
    """The document as its agent wrote it earlier: three messages, a tool call unfinished
    (Gemini) or the placeholder title (OpenCode)."""
    doc = orjson.loads(path.read_bytes())
    early = copy.deepcopy(doc)
    early["messages"] = doc["messages"][:3]
    if path == GEMINI:
        early["messages"][-1].pop("toolCalls", None)
        early.pop("summary", None)
    else:
        early["info"]["title"] = "New session - 2026-05-04T17:52:05.673Z"
    return orjson.dumps(early, option=orjson.OPT_INDENT_2)


def _write(root: Path, step: int) -> list[Path]:
    """Step 1, then step 2 of three agents' files (the same paths in both runtimes)."""
    history = root / "afi-core" / ".aider.chat.history.md"
    gemini = root / "chats" / GEMINI.name
    opencode = root / "opencode" / OPENCODE.name
    for path in (history, gemini, opencode):
        path.parent.mkdir(parents=True, exist_ok=True)
    aider = AIDER.read_bytes() + b"\n#### tell me about quokkas  \n\nQuokkas are small marsupials\n"
    if step == 1:
        history.write_bytes(aider)
        gemini.write_bytes(_early(GEMINI))
        opencode.write_bytes(_early(OPENCODE))
    else:  # the last block grows by a line, then a new prompt and its reply
        history.write_bytes(aider + b"that live on Rottnest island\n\n#### and wombats?  \n\n"
                                    b"Wombats dig long burrows\n")
        gemini.write_bytes(orjson.dumps(orjson.loads(GEMINI.read_bytes()),
                                        option=orjson.OPT_INDENT_2))
        opencode.write_bytes(orjson.dumps(orjson.loads(OPENCODE.read_bytes()),
                                          option=orjson.OPT_INDENT_2))
    return [history, gemini, opencode]


def _hits(recall: Recall, text: str) -> list[tuple[str, int]]:
    """Every (session, seq) of an event holding `text`, from each session's events."""
    out = []
    for item in recall.search_sessions(f'"{text}"', limit=50)["items"]:
        sid = item["header"]["id"] if "header" in item else item["bestMatch"]["sessionId"]
        out.extend((sid, int(e["seq"])) for e in recall.read_session(sid)["events"]
                   if text in orjson.dumps(e.get("data")).decode())
    return out


def test_kafka_ingest_of_grown_files_equals_the_embedded_ingest(
        settings: Settings, worker_factory: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    files_root = tmp_path / "agents"
    # A Gemini tool result maps to an event over the suite's 4 KiB cap (parked by both runtimes:
    # the next test); here nothing is parked.
    cap = 1 << 20
    settings = settings.model_copy(update={"max_event_bytes": cap})
    local = settings.model_copy(update={"broker": None, "data_dir": tmp_path / "embedded"})
    worker = worker_factory(RECALL_MAX_EVENT_BYTES=cap)
    with Recall.open(settings=local) as embedded, \
            Recall.connect(str(settings.broker), settings=settings) as kafka:
        reports: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for step in (1, 2):
            files = _write(files_root, step)
            ours = kafka.ingest(files).to_json()
            theirs = embedded.ingest(files).to_json()
            reports.append((ours, theirs))
            assert ours["rewritten"] == theirs["rewritten"] == [], (ours, theirs)
            assert ours["rejected"] == theirs["rejected"] == 0, (ours, theirs)
            assert ours["eventsAdded"] == theirs["eventsAdded"] > 0, (step, ours, theirs)
            assert ours["accounting"] == theirs["accounting"], (step, ours, theirs)
            # an unchanged file is not read again: nothing published, as embedded
            again = kafka.ingest(files).to_json()
            assert again["unchanged"] == 3 and again["eventsAdded"] == 0, again
        counts = {s["header"]["id"]: len(embedded.read_session(s["header"]["id"])["events"])
                  for s in embedded.list_sessions()}
        wait_indexed(kafka, counts, worker)
        # the grown block's new line and the new block are searchable, each once
        for text in ("Rottnest island", "Wombats dig", "Quokkas are small"):
            found = _hits(kafka, text)
            assert len(found) == 1, (text, found)
            assert found == _hits(embedded, text), text
        # nothing was parked: no conflicting revision of what step 1 published
        assert [d["code"] for d in kafka.dead_letters()] == []
        assert kafka.index_digest() == embedded.index_digest()


def test_an_imported_event_over_the_cap_is_parked_by_both_runtimes(
        settings: Settings, worker_factory: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    """The cap on a log line holds for imported events: the fold parks the line, the embedded
    store the event, and both keep the same events (one Gemini tool result maps to ~6 KiB)."""
    cap = 4096
    settings = settings.model_copy(update={"max_event_bytes": cap})
    local = settings.model_copy(update={"broker": None, "data_dir": tmp_path / "embedded"})
    worker = worker_factory(RECALL_MAX_EVENT_BYTES=cap)
    source = tmp_path / "chats" / GEMINI.name
    source.parent.mkdir(parents=True)
    source.write_bytes(GEMINI.read_bytes())
    with Recall.open(settings=local) as embedded, \
            Recall.connect(str(settings.broker), settings=settings) as kafka:
        kafka.ingest([source])
        embedded.ingest([source])
        counts = {s["header"]["id"]: len(embedded.read_session(s["header"]["id"])["events"])
                  for s in embedded.list_sessions()}
        wait_indexed(kafka, counts, worker)
        deadline = time.time() + 60
        while not kafka.dead_letters() and time.time() < deadline:
            time.sleep(0.5)
        for recall in (embedded, kafka):
            assert [d["code"] for d in recall.dead_letters()] == ["INGEST_OVERSIZED_EVENT"]
        assert kafka.index_digest() == embedded.index_digest()
