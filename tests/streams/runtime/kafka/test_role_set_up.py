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
    NotControllerError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
)
from fake_admin import FakeCluster

from projections.errors import STREAM_NOT_AUTHORIZED, STREAM_TOPIC_SETUP, RecallError
from streams.core.settings import Settings
from streams.runtime.kafka import connection, worker
from streams.runtime.kafka.fleet import Lineup
from streams.runtime.kafka.topics import Topics, TopicSetupError

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
    lineup = asyncio.run(worker._live_lineup(SETTINGS, "the query role's start-up"))
    assert lineup.live == 3 and ensured == [3]
    assert lineup_failures == [] and topic_failures == []


def _cluster(monkeypatch: pytest.MonkeyPatch, create_codes: list[int]) -> FakeCluster:
    """A cluster whose CreateTopics answers `create_codes` first (`ensure_topics` itself runs);
    the lineup names generation 3 live."""
    async def read_lineup(*args: Any) -> Lineup:
        return Lineup(live=3)

    cluster = FakeCluster(create_codes, partitions=SETTINGS.shards)
    cluster.install(monkeypatch)
    monkeypatch.setattr(worker, "read_lineup", read_lineup)
    monkeypatch.setattr(connection, "SET_UP_PAUSE_S", 0.01)
    return cluster


# Kafka's CreateTopics answers while the controller moves (a broker lost) or a request timed out
NOT_CONTROLLER = 41
REQUEST_TIMED_OUT = 7


def test_a_role_whose_topics_meet_a_moving_controller_at_start_asks_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _cluster(monkeypatch, [NOT_CONTROLLER, REQUEST_TIMED_OUT])
    lineup = asyncio.run(worker._live_lineup(SETTINGS, "the index role's start-up"))
    assert lineup.live == 3 and cluster.create_requests == 3
    assert set(Topics.of(SETTINGS, 3).configs()) <= cluster.topics


@pytest.mark.parametrize("failure", [NotControllerError("p.events"), RequestTimedOutError()])
def test_a_fold_told_its_generation_asks_again_when_the_controller_moves(
        monkeypatch: pytest.MonkeyPatch, failure: Exception) -> None:
    ensured = _brokers(monkeypatch, [], [failure])
    asyncio.run(worker._generation_topics(SETTINGS, 4))
    assert ensured == [4]


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
        asyncio.run(worker._live_lineup(SETTINGS, "the index role's start-up"))
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


def test_the_supervisor_whose_topics_meet_a_moving_controller_at_start_asks_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _cluster(monkeypatch, [REQUEST_TIMED_OUT, NOT_CONTROLLER])
    monkeypatch.setattr(worker, "ensure_fleet_topics", _no_fleet_topics)
    monkeypatch.setattr(worker, "diagnose", _nothing_refused)
    assert worker._set_up(SETTINGS).live == 3
    assert cluster.create_requests == 3


def test_the_supervisor_whose_topics_cannot_be_created_stops_with_topic_setup(
        monkeypatch: pytest.MonkeyPatch) -> None:
    invalid_replication_factor = 38
    cluster = _cluster(monkeypatch, [invalid_replication_factor, 0])
    monkeypatch.setattr(worker, "ensure_fleet_topics", _no_fleet_topics)
    monkeypatch.setattr(worker, "diagnose", _nothing_refused)
    with pytest.raises(RecallError) as raised:
        worker._set_up(SETTINGS)
    assert raised.value.code == STREAM_TOPIC_SETUP and cluster.create_requests == 1


async def _no_fleet_topics(*args: Any, **kwargs: Any) -> None:
    return None


async def _nothing_refused(*args: Any, **kwargs: Any) -> None:
    return None


def test_asking_again_says_what_is_retried_why_and_for_how_long(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    failures: list[Exception] = [NotControllerError("p.events")]

    async def once_lost() -> str:
        if failures:
            raise failures.pop(0)
        return "done"

    monkeypatch.setattr(connection, "SET_UP_PAUSE_S", 0.01)
    with caplog.at_level("WARNING", logger="recall.connection"):
        assert asyncio.run(connection.asked_again("the index role's start-up", once_lost,
                                                  within_s=30)) == "done"
    [message] = [record.getMessage() for record in caplog.records]
    assert message.startswith("the index role's start-up failed with NotControllerError")
    assert "a broker is lost" in message and "every 0.01 s for up to 30 s more" in message
