"""The writer thread (indexer/pipeline.py): same index as synchronous writes, submission order
kept, errors reach the caller with everything before them committed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import indexer.pipeline
from indexer import IndexConfig, ShardSet
from indexer.digest import index_digest
from indexer.errors import SourceConflict
from indexer.pipeline import WriterThread, merge

from .helpers import texts_session


def _batches() -> list[Any]:
    out = []
    for s in range(12):
        recs = texts_session(f"s{s:02d}", [f"needle {s} {i}" for i in range(7)])
        out += [(recs[:3], {f"store:s{s:02d}": 2}), (recs[3:], {f"store:s{s:02d}": 7})]
    return out


@pytest.mark.parametrize("group", [1, 3, 10_000])
def test_pipelined_writes_build_the_synchronous_index(tmp_path: Path, group: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexer.pipeline, "GROUP_RECORDS", group)
    with ShardSet(tmp_path / "sync", IndexConfig(shards=3)) as sync, \
            ShardSet(tmp_path / "piped", IndexConfig(shards=3)) as piped:
        for records, positions in _batches():
            sync.write_batch(records, positions)
        with piped.pipeline():
            for records, positions in _batches():
                piped.submit(records, positions)
        assert index_digest(piped) == index_digest(sync)
        assert piped.tracking_position("store:s05") == 7


def test_an_error_surfaces_after_the_batches_before_it_commit(tmp_path: Path) -> None:
    batches = _batches()
    conflict = texts_session("s00", ["different text"])[1:]
    with ShardSet(tmp_path / "i", IndexConfig(shards=2)) as shards:
        with pytest.raises(SourceConflict), shards.pipeline():
            for records, positions in batches[:4]:
                shards.submit(records, positions)
            shards.submit(conflict, {"p": 1})
            for records, positions in batches[4:]:
                shards.submit(records, positions)
        assert shards.tracking_position("store:s01") == 7  # before the conflict: written
        assert shards.tracking_position("p") is None


def test_write_batch_inside_a_pipeline_keeps_submission_order(tmp_path: Path) -> None:
    with ShardSet(tmp_path / "i", IndexConfig(shards=2)) as shards, shards.pipeline():
        records = texts_session("s", ["one", "two"])
        shards.submit(records[:2], {"store:s": 1})
        # the second half depends on the first (seq 1 follows seq 0): applied after it
        assert shards.write_batch(records[2:], {"store:s": 2}) is True
        assert shards.tracking_position("store:s") == 2


def test_the_writer_really_runs_on_another_thread() -> None:
    seen: list[str] = []
    done = threading.Event()

    def write(records: Any, positions: Any) -> None:
        seen.append(threading.current_thread().name)
        done.set()

    writer = WriterThread(write)
    writer.submit([], {})
    assert done.wait(5)
    writer.close()
    assert seen == ["recall-index-writer"]


def test_merged_batches_keep_order_and_the_furthest_positions() -> None:
    a, b = texts_session("a", ["x"]), texts_session("b", ["y"])
    records, positions = merge([(a, {"p": 3, "q": 1}), (b, {"p": 2, "r": 5})])
    assert records == [*a, *b]
    assert positions == {"p": 3, "q": 1, "r": 5}
