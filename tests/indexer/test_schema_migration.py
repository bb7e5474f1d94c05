"""A data dir whose index an older schema version wrote is rebuilt from the store on open
(progress on stderr), never refused; Kafka workers' shards start over instead."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from contract import answers, contract_corpus

from indexer import IndexConfig, ShardSet
from indexer.errors import IndexOutdated
from indexer.routing import shard_file_name
from streams.facade import Recall

from .helpers import texts_session


def _age(root: Path, shards: int) -> None:
    """Make every shard file under `root` claim schema version 1."""
    for i in range(shards):
        conn = sqlite3.connect(root / shard_file_name(i))
        conn.execute("PRAGMA user_version = 1")
        conn.close()


def test_an_outdated_index_is_rebuilt_from_the_store(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    files = contract_corpus(tmp_path / "corpus")
    with Recall.open(tmp_path / "data", shards=3) as recall:
        recall.ingest(files)
        before = answers(recall)
        digest = recall.index_digest()
        live = recall.backend.runtime.generations.current()
    _age(live, 3)
    capsys.readouterr()
    with Recall.open(tmp_path / "data", shards=3) as recall:
        err = capsys.readouterr().err
        assert "schema version 1" in err and "rebuilding the index from the store" in err
        assert "index rebuilt" in err
        assert recall.backend.runtime.generations.current() != live
        assert recall.index_digest() == digest
        assert answers(recall) == before


def test_outdated_shards_raise_or_start_over(tmp_path: Path) -> None:
    with ShardSet(tmp_path / "i", IndexConfig(shards=2)) as shards:
        shards.write_batch(texts_session("s", ["kept until reset"]), {"docs:0": 1})
    _age(tmp_path / "i", 2)
    with pytest.raises(IndexOutdated) as err:
        ShardSet(tmp_path / "i", IndexConfig(shards=2))
    assert err.value.code == "SESSION_QUERY_INDEX_FAILED"
    with ShardSet(tmp_path / "i", IndexConfig(shards=2), reset_outdated=True) as shards:
        assert shards.tracking_position("docs:0") is None  # a consumer re-reads from the start
        assert all(s.meta().generation == 0 for s in shards)
