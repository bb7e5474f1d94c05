"""A generation's indexer that meets a lost broker while it sets up (its topics, the fleet's
cursor key) asks again instead of failing, which would restart the whole index role. A worker's
indexer ensures only its generation's topics (its role found the fleet's control topic); one on
its own (a fresh cluster) ensures the control topic too."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import NodeNotReadyError, UnknownTopicOrPartitionError

from indexer import IndexConfig, ShardSet
from streams.core.settings import Settings
from streams.runtime.kafka import indexing
from streams.runtime.kafka.topics import Topics


def _indexer(fleet_set_up: bool) -> Any:
    settings = Settings(broker="kafka://127.0.0.1:9", shards=2)
    return SimpleNamespace(bootstrap="127.0.0.1:9", settings=settings,
                           topics=Topics.of(settings, 2), shards=SimpleNamespace(key=None),
                           fleet_set_up=fleet_set_up)


def _set_up_with(monkeypatch: pytest.MonkeyPatch, failures: list[Exception], *,
                 fleet_set_up: bool = True) -> Any:
    """The indexer after its set-up; `indexer.ensured` lists the topics it ensured (`control`
    for the fleet's)."""
    ensured: list[str] = []

    async def ensure_topics(*args: Any, **kwargs: Any) -> list[str]:
        if failures:
            raise failures.pop(0)
        ensured.extend(kwargs["names"])
        return []

    async def fleet_topics(*args: Any, **kwargs: Any) -> None:
        ensured.append("control")

    async def cursor_key(*args: Any) -> bytes:
        return b"key"

    monkeypatch.setattr(indexing, "ensure_fleet_topics", fleet_topics)
    monkeypatch.setattr(indexing, "ensure_topics", ensure_topics)
    monkeypatch.setattr(indexing, "fleet_cursor_key", cursor_key)
    indexer = _indexer(fleet_set_up)
    asyncio.run(indexing.DocumentIndexer._set_up(indexer))
    indexer.ensured = ensured
    return indexer


def test_a_broker_lost_during_set_up_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    failures: list[Exception] = [NodeNotReadyError("node 1"), NodeNotReadyError("node 1")]
    indexer = _set_up_with(monkeypatch, failures)
    assert failures == [] and indexer.shards.key == b"key"


def test_an_error_that_asking_again_would_not_mend_still_fails_the_set_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    not_retriable = UnknownTopicOrPartitionError("gone")
    not_retriable.retriable = False
    with pytest.raises(UnknownTopicOrPartitionError):
        _set_up_with(monkeypatch, [not_retriable])


def test_a_workers_indexer_ensures_only_its_generations_topics(
        monkeypatch: pytest.MonkeyPatch) -> None:
    indexer = _set_up_with(monkeypatch, [], fleet_set_up=True)
    assert indexer.ensured == [indexer.topics.documents, indexer.topics.shard_requests]


def test_an_indexer_on_its_own_ensures_the_fleets_control_topic_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    indexer = _set_up_with(monkeypatch, [], fleet_set_up=False)
    assert indexer.ensured == ["control", indexer.topics.documents,
                               indexer.topics.shard_requests]
    assert indexer.shards.key == b"key"


def test_the_index_roles_indexers_are_known_to_find_the_fleets_topics(
        tmp_path: Path) -> None:
    settings = Settings(broker="kafka://127.0.0.1:9", shards=2, data_dir=tmp_path)

    async def flags() -> tuple[bool, bool]:
        # built on a loop (their clients bind to it), never started
        made = [indexing.DocumentIndexer.for_generation(settings, 2),
                indexing.DocumentIndexer(settings, ShardSet(tmp_path / "alone",
                                                            IndexConfig(shards=2)))]
        for indexer in made:
            await indexer.consumer.stop()
            await indexer.producer.stop()
            indexer.shards.close()
        return made[0].fleet_set_up, made[1].fleet_set_up

    assert asyncio.run(flags()) == (True, False)
