"""A ShardSet opened `read_only`: answers as the writable one does, opens no writer, creates
and changes nothing, and refuses writes and an index that is not all there."""

from __future__ import annotations

import pytest

from indexer import IndexConfig, QueryService, ShardSet
from indexer.routing import shard_file_name
from projections.errors import SessionQueryError

from .helpers import texts_session


def _build(root, shards=3):
    with ShardSet(root, IndexConfig(shards=shards)) as writable:
        writable.write_batch(texts_session("alpha", ["hello world", "bye"]), {"src:0": 1})
        writable.write_batch(texts_session("beta", ["hello there"]), {"src:0": 2})


def _answers(shards):
    service = QueryService(shards)
    try:
        return (service.search_sessions({"query": "hello"})["items"],
                service.list_sessions())
    finally:
        service.close()


def test_read_only_answers_as_the_writable_open(tmp_path):
    root = tmp_path / "idx"
    _build(root)
    with ShardSet(root, IndexConfig(shards=3)) as writable:
        expected = _answers(writable)
    before = sorted(p.name for p in root.iterdir())
    with ShardSet(root, IndexConfig(shards=3), read_only=True) as reading:
        got = _answers(reading)
        assert not reading.has_substring() or all(s.substring for s in reading)
    assert {i["header"]["id"] for i in got[0]} == {"alpha", "beta"}
    assert got == expected
    assert sorted(p.name for p in root.iterdir()) == before


def test_read_only_opens_no_writer_and_refuses_writes(tmp_path):
    root = tmp_path / "idx"
    _build(root, shards=2)
    with ShardSet(root, IndexConfig(shards=2), read_only=True) as reading:
        for shard in reading:
            with pytest.raises(SessionQueryError) as err:
                _ = shard.writer
            assert err.value.code == "SESSION_QUERY_INDEX_FAILED"
        with pytest.raises(SessionQueryError) as err:
            reading.write_batch(texts_session("gamma", ["new"]), {"src:0": 3})
        assert err.value.code == "SESSION_QUERY_INDEX_FAILED"
    with ShardSet(root, IndexConfig(shards=2)) as writable:
        assert {row["header"]["id"] for row in _answers(writable)[1]} == {"alpha", "beta"}


def test_read_only_creates_nothing_for_a_missing_index(tmp_path):
    with pytest.raises(SessionQueryError) as err:
        ShardSet(tmp_path / "absent", IndexConfig(shards=2), read_only=True)
    assert err.value.code == "SESSION_QUERY_INDEX_FAILED"
    assert not (tmp_path / "absent").exists()
    root = tmp_path / "idx"
    _build(root, shards=2)
    (root / shard_file_name(1)).unlink()
    with pytest.raises(SessionQueryError):
        ShardSet(root, IndexConfig(shards=2), read_only=True)
    assert not (root / shard_file_name(1)).exists()
