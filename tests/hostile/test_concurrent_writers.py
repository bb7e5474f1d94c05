"""Concurrent writers on one data dir (real processes): 2 and 8 simultaneous `recall ingest` of
one corpus leave exactly what one clean ingest leaves — the store byte for byte, the dead
letters, and `recall index digest` — and every process exits 0 (the later ones wait for the
writer lock). Reference appends racing an ingest are numbered after whatever it wrote."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from datadirs import REALDATA, recall_cmd, snapshot, spawn_recall, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    root = tmp_path_factory.mktemp("concurrent")
    source = root / "corpus"
    write_corpus(source, 16, 250)
    for real in REALDATA.glob("*.jsonl"):  # foreign formats go through the same lock
        (source / real.name).write_bytes(real.read_bytes())
    clean = root / "clean"
    assert recall_cmd(clean, "ingest", str(source)).returncode == 0
    return source, snapshot(clean)


@pytest.mark.parametrize("writers", [2, 8])
def test_concurrent_ingests_equal_one_clean_ingest(tmp_path: Path, corpus: tuple[Path, dict[
        str, object]], writers: int) -> None:
    source, clean = corpus
    data = tmp_path / "data"
    procs = [spawn_recall(data, "ingest", str(source), "--json") for _ in range(writers)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * writers, [o[1][-1500:] for o in outs]
    reports = [orjson.loads(o[0]) for o in outs]
    assert sum(1 for r in reports if r["eventsAdded"]) == 1  # the others found it all done
    assert all(r["accounting"]["balanced"] for r in reports)
    assert snapshot(data) == clean


def test_reference_appends_racing_ingests_stay_contiguous(tmp_path: Path) -> None:
    source = tmp_path / "corpus"
    write_corpus(source, 8, 300, bad_every=0)
    data = tmp_path / "data"
    assert recall_cmd(data, "ingest", str(source / "s000.jsonl")).returncode == 0
    assert recall_cmd(data, "create", "--id", "own", "--cwd", "/w/0").returncode == 0
    procs = [spawn_recall(data, "ingest", str(source))]
    procs += [spawn_recall(data, "reference", "--target", "own", "--message",
                           f"note {n}", "--source", "corpus-000", "--json") for n in range(3)]
    for p in procs:
        p.communicate(timeout=300)
        assert p.returncode == 0
    # `own` (recall writes it) holds the 3 references, [context, readable] each, contiguous
    from streams.facade import Recall

    with Recall.open(data) as recall:
        events = recall.read_session("own")["events"]
        assert recall.replay()["events"] == 8 * 300 + 6
    assert [e["seq"] for e in events] == [0, 1, 2, 3, 4, 5]
    assert [e["data"]["source"]["kind"] for e in events] == ["session-reference", "user"] * 3


def test_a_long_lived_writer_sees_what_another_process_wrote(tmp_path: Path) -> None:
    """A process that keeps a Recall open (an MCP server, a watcher) must not append from a
    stale cache after another process appended: the writer epoch makes it drop the cache."""
    from streams.facade import Recall

    source = tmp_path / "corpus"
    write_corpus(source, 1, 3, bad_every=0)
    data = tmp_path / "data"
    with Recall.open(data) as mine:
        mine.ingest([source])
        assert mine.read_session("corpus-000")["header"]["id"] == "corpus-000"
        mine.create_session("own", cwd="/w/0")
        other = recall_cmd(data, "append", "own", "--message", "theirs")
        assert other.returncode == 0, other.stderr
        result = mine.prepare_reference("own", "mine")
        assert result["appended"] == [1] and result["delivery"] == "appended"
        assert [e["seq"] for e in mine.read_surface("own")["events"]] == [0, 1]
        # and another process's reindex is followed by this reader
        assert recall_cmd(data, "reindex").returncode == 0
        assert mine.index_generation() == "gen-000002"
        assert mine.search_sessions("theirs")["items"][0]["header"]["id"] == "own"
