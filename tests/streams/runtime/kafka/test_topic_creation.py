"""`ensure_topics` and a CreateTopics answer that names an error: one Kafka marks retriable (the
controller moved, the request timed out: what a cluster losing a broker answers) comes back as
aiokafka's retriable error, for a start-up to ask again; any other is a TopicSetupError."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaError, NotControllerError, RequestTimedOutError
from fake_admin import FakeCluster

from projections.errors import STREAM_TOPIC_SETUP
from streams.core.settings import Settings
from streams.runtime.kafka.topics import Topics, TopicSetupError, ensure_topics

TOPICS = Topics.of(Settings(broker="kafka://127.0.0.1:9", shards=2))

# Kafka's CreateTopics error codes
NOT_CONTROLLER = 41
REQUEST_TIMED_OUT = 7
INVALID_REPLICATION_FACTOR = 38


@pytest.mark.parametrize(("code", "error"), [(NOT_CONTROLLER, NotControllerError),
                                             (REQUEST_TIMED_OUT, RequestTimedOutError)])
def test_a_retriable_create_topics_answer_raises_the_retriable_kafka_error(
        monkeypatch: pytest.MonkeyPatch, code: int, error: type[KafkaError]) -> None:
    FakeCluster([code], partitions=2).install(monkeypatch)
    with pytest.raises(error) as raised:
        asyncio.run(ensure_topics("127.0.0.1:9", TOPICS))
    assert raised.value.retriable
    assert TOPICS.events in str(raised.value)


def test_a_create_topics_answer_asking_again_would_not_mend_is_a_topic_setup_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCluster([INVALID_REPLICATION_FACTOR], partitions=2).install(monkeypatch)
    with pytest.raises(TopicSetupError) as raised:
        asyncio.run(ensure_topics("127.0.0.1:9", TOPICS))
    assert raised.value.code == STREAM_TOPIC_SETUP
    assert f"error {INVALID_REPLICATION_FACTOR}" in raised.value.message


def test_topics_created_after_a_retriable_answer_are_all_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = FakeCluster([NOT_CONTROLLER], partitions=2)
    cluster.install(monkeypatch)
    with pytest.raises(NotControllerError):
        asyncio.run(ensure_topics("127.0.0.1:9", TOPICS))
    created = asyncio.run(ensure_topics("127.0.0.1:9", TOPICS))
    assert sorted(created) == sorted(TOPICS.configs()) == sorted(cluster.topics)
