"""A large session's transcript is built once per log: every page the web page serves from the
kept transcript is byte for byte the page a fresh build serves, on the UI corpus and on a
generated session with compactions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from bench.corpus import TextGen, session_events
from bench.search_corpus import header
from indexer import foldcache
from streams.facade import Recall
from streams.faces.ui import pages
from streams.faces.ui.app import create_app
from tests.ui import corpus

LOCAL = "http://127.0.0.1"


@pytest.fixture
def recall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recall]:
    monkeypatch.setattr(foldcache, "MIN_EVENTS", 0)  # keep every log, however small
    data = corpus.build(tmp_path / "corpus")
    source = tmp_path / "generated"
    source.mkdir()
    lines = [orjson.dumps(header("generated", 1)),
             *(orjson.dumps(e) for e in session_events("generated", 1_000, TextGen(5),
                                                       compact_at=60))]
    (source / "generated.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    with Recall.open(data) as opened:
        opened.ingest([source])
        yield opened


def _page(client: TestClient, session_id: str, query: str = "") -> bytes:
    response = client.get("/session", params={"id": session_id, **dict(
        p.split("=") for p in query.split("&") if p)})
    assert response.status_code == 200, response.text
    return response.content


def test_kept_transcript_pages_are_the_fresh_ones(recall: Recall) -> None:
    sessions = [str(r["header"]["id"]) for r in recall.list_sessions()]
    assert "generated" in sessions and len(sessions) > 3
    kept = TestClient(create_app(recall), base_url=LOCAL)
    for session_id in sessions:
        views = ["", "page=2", "page=3", "at=700", "view=surface"]
        first = [_page(kept, session_id, q) for q in views]  # the first builds, the rest keep
        again = [_page(kept, session_id, q) for q in reversed(views)][::-1]
        fresh = [_page(TestClient(create_app(recall), base_url=LOCAL), session_id, q)
                 for q in views]
        assert first == again == fresh, session_id


def test_only_the_same_event_objects_reuse_a_transcript(recall: Recall) -> None:
    events = recall.read_session("generated")["events"]
    memo = pages.Transcripts()
    built, counts = memo.of(events)
    assert built == pages.transcript(events) and counts == pages.surface_counts(built)
    assert counts["shadowed"] > 0 and len(built) > pages.TRANSCRIPT_PAGE
    assert memo.of(recall.read_session("generated")["events"])[0] is built  # kept per revision
    copies = [dict(e) for e in events]
    assert memo.of(copies)[0] is not built and memo.of(copies)[0] == built
    shorter = memo.of(events[:-1])[0]
    assert shorter == pages.transcript(events[:-1])
