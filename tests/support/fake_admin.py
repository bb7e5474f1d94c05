"""A stand-in for aiokafka's admin client as `streams.runtime.kafka.topics.ensure_topics` uses it
(list, create, describe topics), for unit tests of how a CreateTopics answer is handled."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import admin as aiokafka_admin


class FakeCluster:
    """The topics of a fake cluster. Each CreateTopics request is answered with the next code of
    `create_codes` for every topic it names (0 once they run out); a topic answered 0 exists
    from then on, with `partitions` partitions."""

    def __init__(self, create_codes: list[int], partitions: int) -> None:
        self.create_codes = create_codes
        self.partitions = partitions
        self.topics: set[str] = set()
        self.create_requests = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Every AIOKafkaAdminClient built from now on is a client of this cluster."""
        monkeypatch.setattr(aiokafka_admin, "AIOKafkaAdminClient",
                            lambda **kwargs: _FakeAdmin(self))


class _FakeAdmin:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def list_topics(self) -> list[str]:
        return sorted(self.cluster.topics)

    async def create_topics(self, new_topics: list[Any]) -> Any:
        cluster = self.cluster
        cluster.create_requests += 1
        code = cluster.create_codes.pop(0) if cluster.create_codes else 0
        if code == 0:
            cluster.topics.update(topic.name for topic in new_topics)
        return SimpleNamespace(topic_errors=[(topic.name, code, f"answer {code}" if code else None)
                                             for topic in new_topics])

    async def describe_topics(self, names: list[str]) -> list[dict[str, Any]]:
        return [{"topic": name, "error_code": 0,
                 "partitions": [{"partition": p} for p in range(self.cluster.partitions)]}
                for name in names if name in self.cluster.topics]
