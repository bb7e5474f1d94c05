"""A generation's indexer that meets a lost broker while it sets up (its topics, the fleet's
cursor key) asks again instead of failing, which would restart the whole index role."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import NodeNotReadyError, UnknownTopicOrPartitionError

from streams.core.settings import Settings
from streams.runtime.kafka import indexing
from streams.runtime.kafka.topics import Topics


def _indexer() -> Any:
    settings = Settings(broker="kafka://127.0.0.1:9", shards=2)
    return SimpleNamespace(bootstrap="127.0.0.1:9", settings=settings,
                           topics=Topics.of(settings, 2), shards=SimpleNamespace(key=None))


def _set_up_with(monkeypatch: pytest.MonkeyPatch, failures: list[Exception]) -> Any:
    async def ensure_topics(*args: Any, **kwargs: Any) -> list[str]:
        if failures:
            raise failures.pop(0)
        return []

    async def fleet_topics(*args: Any, **kwargs: Any) -> None:
        return None

    async def cursor_key(*args: Any) -> bytes:
        return b"key"

    monkeypatch.setattr(indexing, "ensure_fleet_topics", fleet_topics)
    monkeypatch.setattr(indexing, "ensure_topics", ensure_topics)
    monkeypatch.setattr(indexing, "fleet_cursor_key", cursor_key)
    indexer = _indexer()
    asyncio.run(indexing.DocumentIndexer._set_up(indexer))
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
