"""The seam's item 11 (streams.runtime.kafka.seam): a client's metadata request does not wait on
a broker that answers nothing, and a broker the cluster's metadata no longer lists (fenced) has
this client's connections closed, failing what waited on them at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import CloseReason
from aiokafka.errors import KafkaConnectionError

from streams.runtime.kafka import seam


class _Metadata:
    """A MetadataResponse v0 as aiokafka's ClusterMetadata reads it: these brokers, no topic."""

    API_VERSION = 0

    def __init__(self, *nodes: int) -> None:
        self.brokers = [(node, "127.0.0.1", 9000 + node) for node in nodes]
        self.topics: list[Any] = []


class _Conn:
    """A broker connection answering every request with `answer`, or never (a stalled one)."""

    def __init__(self, answer: _Metadata | None) -> None:
        self.answer = answer
        self.closed_with: CloseReason | None = None
        self.waiting: list[asyncio.Future[Any]] = []

    def connected(self) -> bool:
        return self.closed_with is None

    def send(self, request: Any) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        if self.answer is not None:
            future.set_result(self.answer)
        else:
            self.waiting.append(future)
        return future

    def close(self, reason: CloseReason | None = None, exc: Exception | None = None) -> None:
        self.closed_with = reason
        for future in self.waiting:  # as aiokafka's connection does
            if not future.done():
                future.set_exception(KafkaConnectionError("closed"))


@pytest.mark.parametrize("stalled_first", [True, False])
def test_a_fenced_broker_that_answers_nothing_is_let_go_at_the_next_metadata(
        monkeypatch: pytest.MonkeyPatch, stalled_first: bool) -> None:
    seam.install()
    monkeypatch.setattr(AIOKafkaClient, "_metadata_update", seam._metadata_update_letting_go)
    monkeypatch.setattr(seam, "METADATA_WAIT_S", 0.05)
    monkeypatch.setattr(seam.random, "shuffle",
                        lambda nodes: nodes.sort(reverse=stalled_first))

    async def run() -> tuple[bool, set[int], _Conn, _Conn, asyncio.Future[Any]]:
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:9")
        client.cluster.update_metadata(_Metadata(1, 2))
        healthy, stalled, coordination = _Conn(_Metadata(1)), _Conn(None), _Conn(None)
        client._conns = {(1, ConnectionGroup.DEFAULT): healthy,
                         (2, ConnectionGroup.DEFAULT): stalled,
                         (2, ConnectionGroup.COORDINATION): coordination}
        heartbeat = coordination.send(object())  # hangs on the stalled broker
        updated = await asyncio.wait_for(client._metadata_update(client.cluster, []), 2)
        listed = {broker.nodeId for broker in client.cluster.brokers()}
        assert set(client._conns) == {(1, ConnectionGroup.DEFAULT)}
        return updated, listed, stalled, coordination, heartbeat

    updated, listed, stalled, coordination, heartbeat = asyncio.run(run())
    assert updated and listed == {1}
    assert stalled.closed_with == coordination.closed_with == CloseReason.SHUTDOWN
    assert isinstance(heartbeat.exception(), KafkaConnectionError)


def test_a_broker_still_listed_keeps_its_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    seam.install()
    monkeypatch.setattr(AIOKafkaClient, "_metadata_update", seam._metadata_update_letting_go)
    monkeypatch.setattr(seam, "METADATA_WAIT_S", 0.05)

    async def run() -> tuple[bool, _Conn]:
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:9")
        client.cluster.update_metadata(_Metadata(1, 2))
        other = _Conn(_Metadata(1, 2))
        client._conns = {(1, ConnectionGroup.DEFAULT): _Conn(_Metadata(1, 2)),
                         (2, ConnectionGroup.DEFAULT): other}
        return await client._metadata_update(client.cluster, []), other

    updated, other = asyncio.run(run())
    assert updated and other.closed_with is None
