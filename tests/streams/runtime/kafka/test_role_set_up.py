"""A worker role that meets a lost broker while it starts (reading the lineup, ensuring its
generation's topics) asks again instead of exiting, which would have its supervisor restart it
(imports and clients over again); an error asking again cannot mend still stops it. The
supervisor's own start-up (the fleet's topics too) does the same, and stops with the STREAM_*
error a refusal amounts to."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
)

from projections.errors import STREAM_NOT_AUTHORIZED, STREAM_TOPIC_SETUP, RecallError
from streams.core.settings import Settings
from streams.runtime.kafka import connection, worker
from streams.runtime.kafka.fleet import Lineup
from streams.runtime.kafka.topics import TopicSetupError

SETTINGS = Settings(broker="kafka://127.0.0.1:9", shards=2)


def _brokers(monkeypatch: pytest.MonkeyPatch, lineup_failures: list[Exception],
             topic_failures: list[Exception]) -> list[int]:
    """Fake lineup reads and topic set-ups failing with these errors first; returns the
    generations whose topics were set up."""
    ensured: list[int] = []

    async def read_lineup(*args: Any) -> Lineup:
        if lineup_failures:
            raise lineup_failures.pop(0)
        return Lineup(live=3)

    async def ensure_topics(bootstrap: Any, topics: Any, **kwargs: Any) -> list[str]:
        if topic_failures:
            raise topic_failures.pop(0)
        ensured.append(topics.generation)
        return []

    monkeypatch.setattr(worker, "read_lineup", read_lineup)
    monkeypatch.setattr(worker, "ensure_topics", ensure_topics)
    monkeypatch.setattr(connection, "SET_UP_PAUSE_S", 0.01)
    return ensured


def test_a_role_that_meets_a_lost_broker_at_start_asks_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lineup_failures: list[Exception] = [KafkaConnectionError("node 1")]
    topic_failures: list[Exception] = [RequestTimedOutError(), KafkaConnectionError("node 1")]
    ensured = _brokers(monkeypatch, lineup_failures, topic_failures)
    lineup = asyncio.run(worker._live_lineup(SETTINGS, "query"))
    assert lineup.live == 3 and ensured == [3]
    assert lineup_failures == [] and topic_failures == []


def test_a_fold_told_its_generation_sets_up_that_generation_asking_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    topic_failures: list[Exception] = [KafkaConnectionError("node 2")]
    ensured = _brokers(monkeypatch, [], topic_failures)
    asyncio.run(worker._generation_topics(SETTINGS, 5))
    assert ensured == [5] and topic_failures == []


def test_a_role_start_that_asking_again_would_not_mend_still_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ensured = _brokers(monkeypatch, [], [TopicAuthorizationFailedError("events")])
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(worker._live_lineup(SETTINGS, "index"))
    assert ensured == []


def test_asking_again_ends_with_the_last_error_once_its_time_is_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []

    async def lost() -> None:
        calls.append(asyncio.get_running_loop().time())
        raise KafkaConnectionError("node 1")

    monkeypatch.setattr(connection, "SET_UP_PAUSE_S", 0.01)
    with pytest.raises(KafkaConnectionError):
        asyncio.run(connection.asked_again("a start-up", lost, within_s=0.05))
    assert len(calls) >= 2 and calls[-1] - calls[0] >= 0.05


def _supervisor_brokers(monkeypatch: pytest.MonkeyPatch, fleet_failures: list[Exception],
                        lineup_failures: list[Exception],
                        topic_failures: list[Exception]) -> list[int]:
    """`_brokers`, and the fleet's topics failing with `fleet_failures` first; the probe of a
    refused principal finds none."""
    ensured = _brokers(monkeypatch, lineup_failures, topic_failures)

    async def ensure_fleet_topics(*args: Any, **kwargs: Any) -> None:
        if fleet_failures:
            raise fleet_failures.pop(0)

    async def diagnose(*args: Any, **kwargs: Any) -> None:
        return None

    monkeypatch.setattr(worker, "ensure_fleet_topics", ensure_fleet_topics)
    monkeypatch.setattr(worker, "diagnose", diagnose)
    return ensured


def test_the_supervisor_that_meets_a_lost_broker_at_start_asks_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fleet_failures: list[Exception] = [KafkaConnectionError("node 1"), RequestTimedOutError()]
    lineup_failures: list[Exception] = [KafkaConnectionError("node 2")]
    topic_failures: list[Exception] = [RequestTimedOutError()]
    ensured = _supervisor_brokers(monkeypatch, fleet_failures, lineup_failures, topic_failures)
    lineup = worker._set_up(SETTINGS)
    assert lineup.live == 3 and ensured == [3]
    assert fleet_failures == [] and lineup_failures == [] and topic_failures == []


@pytest.mark.parametrize(("failure", "code"), [
    (TopicAuthorizationFailedError("events"), STREAM_NOT_AUTHORIZED),
    (TopicSetupError("topic p.events has 1 partitions; expected 2 (RECALL_SHARDS)"),
     STREAM_TOPIC_SETUP),
])
def test_the_supervisor_start_that_asking_again_would_not_mend_stops_with_its_code(
        monkeypatch: pytest.MonkeyPatch, failure: Exception, code: str) -> None:
    topic_failures = [failure, KafkaConnectionError("never reached")]
    ensured = _supervisor_brokers(monkeypatch, [], [], topic_failures)
    with pytest.raises(RecallError) as raised:
        worker._set_up(SETTINGS)
    assert raised.value.code == code
    assert ensured == [] and len(topic_failures) == 1
