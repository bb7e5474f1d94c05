"""The seam's item 10 (streams.runtime.kafka.seam): a client's metadata request does not wait on
a broker that answers nothing, a broker the cluster's metadata no longer lists (fenced) has this
client's connections closed, failing what waited on them at once, and a client being closed
while an answer arrives still closes (its metadata task ends when cancelled)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import CloseReason
from aiokafka.errors import KafkaConnectionError

from streams.runtime.kafka import seam

#: Kafka's TOPIC_AUTHORIZATION_FAILED: the answer for a topic the principal may not describe.
_NOT_AUTHORIZED = 29


class _Metadata:
    """A MetadataResponse v0 as aiokafka's ClusterMetadata reads it: these brokers, and each
    topic of `denied` answered with TOPIC_AUTHORIZATION_FAILED."""

    API_VERSION = 0

    def __init__(self, *nodes: int, denied: tuple[str, ...] = ()) -> None:
        self.brokers = [(node, "127.0.0.1", 9000 + node) for node in nodes]
        self.topics: list[Any] = [(_NOT_AUTHORIZED, topic, []) for topic in denied]


class _Conn:
    """A broker connection answering every request with `answer`, or never (a stalled one).
    `then` runs in the loop turn that answers (with the answer already set)."""

    def __init__(self, answer: _Metadata | None) -> None:
        self.answer = answer
        self.closed_with: CloseReason | None = None
        self.waiting: list[asyncio.Future[Any]] = []
        self.then: Any = None

    def connected(self) -> bool:
        return self.closed_with is None

    def send(self, request: Any) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if self.answer is None:
            self.waiting.append(future)
            return future
        answer, then = self.answer, self.then

        def arrive() -> None:  # as a broker's answer does: in a later loop turn
            if not future.done():
                future.set_result(answer)
            if then is not None:
                then()

        loop.call_soon(arrive)
        return future

    def close(self, reason: CloseReason | None = None, exc: Exception | None = None) -> None:
        self.closed_with = reason
        for future in self.waiting:  # as aiokafka's connection does
            if not future.done():
                future.set_exception(KafkaConnectionError("closed"))


def _client(*nodes: int) -> AIOKafkaClient:
    client = AIOKafkaClient(bootstrap_servers="127.0.0.1:9")
    client.cluster.update_metadata(_Metadata(*nodes))
    return client


@pytest.mark.parametrize("stalled_first", [True, False])
def test_a_fenced_broker_that_answers_nothing_is_let_go_at_the_next_metadata(
        monkeypatch: pytest.MonkeyPatch, stalled_first: bool) -> None:
    seam.install()
    monkeypatch.setattr(seam, "METADATA_WAIT_S", 0.05)
    monkeypatch.setattr(seam.random, "shuffle",
                        lambda nodes: nodes.sort(reverse=stalled_first))

    async def run() -> tuple[bool, set[int], _Conn, _Conn, asyncio.Future[Any]]:
        client = _client(1, 2)
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
    monkeypatch.setattr(seam, "METADATA_WAIT_S", 0.05)

    async def run() -> tuple[bool, _Conn]:
        client = _client(1, 2)
        other = _Conn(_Metadata(1, 2))
        client._conns = {(1, ConnectionGroup.DEFAULT): _Conn(_Metadata(1, 2)),
                         (2, ConnectionGroup.DEFAULT): other}
        return await client._metadata_update(client.cluster, []), other

    updated, other = asyncio.run(run())
    assert updated and other.closed_with is None


def test_a_topic_the_principal_may_not_describe_closes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # every broker answers, and lists every broker, but refuses the assigned topic: the round
    # ends at the first answer, the topic is known as unauthorized, no connection is closed;
    # an answer without brokers (a topic being created) updates nothing and closes nothing
    seam.install()
    monkeypatch.setattr(seam, "METADATA_WAIT_S", 0.05)

    async def run() -> tuple[bool, bool, AIOKafkaClient, list[_Conn]]:
        client = _client(1, 2)
        conns = [_Conn(_Metadata(1, 2, denied=("documents",))) for _ in range(3)]
        client._conns = {(1, ConnectionGroup.DEFAULT): conns[0],
                         (2, ConnectionGroup.DEFAULT): conns[1],
                         (2, ConnectionGroup.COORDINATION): conns[2]}
        refused = await asyncio.wait_for(
            client._metadata_update(client.cluster, ["documents"]), 2)
        for conn in conns:
            conn.answer = _Metadata()
        empty = await asyncio.wait_for(
            client._metadata_update(client.cluster, ["documents"]), 2)
        return refused, empty, client, conns

    refused, empty, client, conns = asyncio.run(run())
    assert refused and not empty
    assert client.cluster.unauthorized_topics == {"documents"}
    assert {broker.nodeId for broker in client.cluster.brokers()} == {1, 2}
    assert len(client._conns) == 3 and all(conn.closed_with is None for conn in conns)


def test_a_metadata_round_cancelled_as_its_answer_arrives_ends_the_client_task() -> None:
    # A client closing cancels its metadata task once and waits for it to end. A consumer of a
    # topic it may not describe asks for metadata back to back (its partitions never get a
    # leader), so that cancel often lands in the very loop turn an answer arrives: the round
    # must end cancelled there, not return the answer and let the task wait for its next round
    # (minutes: the consumer's stop() never returned).
    seam.install()

    async def run() -> tuple[bool, bool]:
        client = _client(1)
        conn = _Conn(_Metadata(1, denied=("documents",)))
        client._conns = {(1, ConnectionGroup.DEFAULT): conn}
        task = client._sync_task = asyncio.get_running_loop().create_task(
            client._md_synchronizer())
        await asyncio.sleep(0)  # the task waits for a reason to ask
        conn.then = task.cancel  # the close, in the answer's loop turn
        client.force_metadata_update()
        await asyncio.wait({task}, timeout=1)
        return task.done(), task.done() and task.cancelled()

    assert asyncio.run(run()) == (True, True)


def _started(client: AIOKafkaClient) -> AIOKafkaClient:
    """`client` as the process's set holds it once its `bootstrap()` ran (a metadata task)."""
    client._sync_task = asyncio.get_running_loop().create_future()  # (never done: no rounds)
    with seam._clients_lock:
        seam._clients.add(client)
    return client


def test_a_fence_one_client_sees_has_every_client_of_the_process_let_go_of_the_broker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Only one client per process refreshes its metadata every second: its fresh answer has
    # every other client holding a connection to the fenced broker ask for its own metadata at
    # once, whose answer (the new leaders in hand) closes those connections; a client not
    # started, or holding none, is left alone.
    seam.install()
    monkeypatch.setattr(seam, "METADATA_WAIT_S", 0.05)

    async def run() -> tuple[bool, bool, bool, list[_Conn], list[asyncio.Future[Any]], bool,
                             _Conn]:
        watcher = _started(_client(1, 2))
        watcher._conns = {(1, ConnectionGroup.DEFAULT): _Conn(_Metadata(1))}
        producer = _started(_client(1, 2))
        stalled = [_Conn(None), _Conn(None)]
        producer._conns = {(1, ConnectionGroup.DEFAULT): _Conn(_Metadata(1)),
                           (2, ConnectionGroup.DEFAULT): stalled[0],
                           (2, ConnectionGroup.COORDINATION): stalled[1]}
        waiting = [conn.send(object()) for conn in stalled]  # a produce, a heartbeat
        elsewhere = _started(_client(1, 2))  # connected to the listed broker only
        elsewhere._conns = {(1, ConnectionGroup.DEFAULT): _Conn(_Metadata(1))}
        idle = _client(1, 2)  # never started
        untouched = _Conn(None)
        idle._conns = {(2, ConnectionGroup.DEFAULT): untouched}
        assert await asyncio.wait_for(watcher._metadata_update(watcher.cluster, []), 2)
        asked = producer._md_update_fut is not None
        not_asked = elsewhere._md_update_fut is None and idle._md_update_fut is None
        open_until_answered = all(conn.closed_with is None for conn in stalled)
        # the producer's own round (its synchronizer's, woken by the ask)
        producer_updated = await asyncio.wait_for(
            producer._metadata_update(producer.cluster, []), 2)
        return (asked and not_asked, open_until_answered, producer_updated, stalled, waiting,
                1 in {b.nodeId for b in producer.cluster.brokers()}, untouched)

    asked, open_until_answered, updated, stalled, waiting, listed, untouched = asyncio.run(run())
    assert asked and open_until_answered and updated and listed
    assert [conn.closed_with for conn in stalled] == [CloseReason.SHUTDOWN] * 2
    assert all(isinstance(w.exception(), KafkaConnectionError) for w in waiting)
    assert untouched.closed_with is None


def test_a_fence_reaches_a_client_on_another_event_loop_on_its_own_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # faust's consumer (and each `Recall.connect` client) runs on a thread with an event loop
    # of its own: its metadata is asked for on that loop, never from the loop that saw the fence.
    seam.install()
    monkeypatch.setattr(seam, "METADATA_WAIT_S", 0.05)
    other_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=other_loop.run_forever)
    thread.start()
    asked_on: list[threading.Thread] = []

    async def make() -> AIOKafkaClient:
        far = _started(_client(1, 2))
        far._conns = {(2, ConnectionGroup.DEFAULT): _Conn(None)}
        real = far.force_metadata_update

        def asked() -> Any:
            asked_on.append(threading.current_thread())
            return real()

        far.force_metadata_update = asked  # type: ignore[method-assign]
        return far

    try:
        far = asyncio.run_coroutine_threadsafe(make(), other_loop).result(2)

        async def run() -> bool:
            watcher = _started(_client(1, 2))
            watcher._conns = {(1, ConnectionGroup.DEFAULT): _Conn(_Metadata(1))}
            return await asyncio.wait_for(watcher._metadata_update(watcher.cluster, []), 2)

        assert asyncio.run(run())
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), other_loop).result(2)  # a turn after
        assert asked_on == [thread] and far._md_update_fut is not None
    finally:
        other_loop.call_soon_threadsafe(other_loop.stop)
        thread.join(2)
        other_loop.close()
