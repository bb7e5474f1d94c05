"""Shard routing equals Kafka's default partitioner, so partition k's sessions live in shard k."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner, murmur2
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.routing import murmur2 as our_murmur2
from indexer.routing import shard_of


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=0, max_size=40), st.integers(1, 64))
def test_shard_of_is_kafkas_default_partition(session_id: str, partitions: int) -> None:
    key = session_id.encode("utf-8")
    assert our_murmur2(key) == murmur2(key)
    expected = DefaultPartitioner()(key, list(range(partitions)), list(range(partitions)))
    assert shard_of(session_id, partitions) == expected
