"""One writer per data dir: an OS lock admits one writer at a time; a second waits, says so, then
proceeds (or times out with RECALL_LOCK_TIMEOUT). Concurrent ingests of one corpus leave exactly
what one clean ingest leaves, and disjoint ones keep every source."""

from __future__ import annotations

import os
import time
from pathlib import Path

import orjson
from datadirs import (
    dead_letters,
    recall_cmd,
    recall_env,
    snapshot,
    spawn_recall,
    write_corpus,
)

from streams.facade import Recall


def _contiguous(data: Path) -> None:
    for path in sorted((data / "store").glob("*.jsonl")):
        seqs = [orjson.loads(line).get("seq") for line in path.read_bytes().splitlines()[1:]]
        assert seqs == list(range(len(seqs))), path.name


def test_two_concurrent_ingests_of_one_corpus_equal_one_clean_ingest(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_corpus(corpus, 24, 400)
    clean = tmp_path / "clean"
    assert recall_cmd(clean, "ingest", str(corpus), "--json").returncode == 0
    racing = tmp_path / "racing"  # fresh: creating the index races too
    procs = [spawn_recall(racing, "ingest", str(corpus), "--json") for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    reports = [orjson.loads(o[0]) for o in outs]
    assert sum(r["eventsAdded"] for r in reports) == 24 * 400
    _contiguous(racing)
    assert snapshot(racing) == snapshot(clean)
    # the grown-file path and replay work afterwards (they failed on the doubled seqs)
    with Recall.open(racing) as recall:
        assert recall.replay()["events"] == 24 * 400


def test_disjoint_concurrent_ingests_keep_every_source(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_corpus(a, 12, 200)
    for p in write_corpus(b, 12, 200):
        p.write_bytes(p.read_bytes().replace(b"corpus-", b"other-"))
    data = tmp_path / "data"
    procs = [spawn_recall(data, "ingest", str(d), "--json") for d in (a, b)]
    for p in procs:
        p.communicate(timeout=300)
        assert p.returncode == 0
    registry = orjson.loads((data / "sources.json").read_bytes())
    assert len(registry) == 24
    with Recall.open(data) as recall:
        assert len(recall.list_sessions()) == 24


def test_a_second_writer_waits_says_so_then_times_out_with_a_code(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_corpus(corpus, 2, 5)
    data = tmp_path / "data"
    with Recall.open(data) as holder, holder.backend.runtime.writing():
        started = time.monotonic()
        done = recall_cmd(data, "ingest", str(corpus), "--json",
                          env=recall_env(RECALL_LOCK_TIMEOUT_S="1"))
        waited = time.monotonic() - started
        # readers never wait
        reader = recall_cmd(data, "sessions", "--json")
    assert done.returncode == 1 and waited >= 1
    assert orjson.loads(done.stdout)["error"]["code"] == "RECALL_LOCK_TIMEOUT"
    assert b"waiting for the writer lock" in done.stderr and str(os.getpid()).encode() in done.stderr
    assert reader.returncode == 0 and orjson.loads(reader.stdout) == []
    assert dead_letters(data) == []
    # once released, the same command goes through
    assert recall_cmd(data, "ingest", str(corpus), "--json").returncode == 0
