"""Integration: the contract of streams.runtime.kafka.seam, checked against the installed faust and
aiokafka and the real brokers. A library upgrade that moves what the seam relies on fails here
(or in `install()` itself, which looks every patched attribute up when it is imported).

The fold's own use of the seam (read positions, the batch hold, the seek after a rebalance) is
exercised end to end by test_kafka_fold (commits that ran ahead), test_kafka_chaos (kill -9 of
every role, a worker added and removed under load) and test_kafka_jobs."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import faust
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.consumer import group_coordinator
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.structs import OffsetAndMetadata
from faust.tables.manager import TableManager
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka

from streams.core.settings import Settings
from streams.runtime.kafka import seam
from streams.runtime.kafka.app import build_app
from streams.runtime.kafka.connection import IDLE_TURN_MS
from streams.runtime.kafka.topics import Topics, ensure_topics

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def test_install_replaces_exactly_what_the_contract_names() -> None:
    seam.install()
    assert Fetcher._proc_fetch_request is seam._fetch_waiting
    assert group_coordinator.GroupCoordinator._maybe_leave_group is seam._leave_group
    assert AIOKafkaConsumer.seek_to_committed is seam._seek_to_committed_or_beginning
    assert faust_consumer.Consumer.__init__ is seam._init_without_read_offsets
    assert faust_consumer.Consumer.perform_seek is seam._perform_seek_then_place
    assert (faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer
            is seam._worker_consumer)
    assert TableManager.on_start is seam._tables_start_at_once
    assert AIOKafkaClient._metadata_update is seam._metadata_update_letting_go
    assert Fetcher._proc_offset_request is seam._offsets_or_new_leaders
    # 10 repeats aiokafka's metadata round with each broker's wait bounded: an aiokafka whose
    # round does more than this must be looked at again
    update = inspect.getsource(seam._metadata_update)
    for step in ("random.shuffle(nodeids)", "conn = await self._get_conn(node_id)",
                 "metadata = await conn.send(metadata_request)", "if not metadata.brokers:",
                 "cluster_metadata.update_metadata(metadata)", "conn = self._conns.pop(bootstrap_id)",
                 "cluster_metadata.failed_update(None)"):
        assert step in update, step
    # 7 replaces faust's TableManager.on_start with the same steps minus its sleep: a faust
    # whose on_start does anything else must be looked at again
    source = inspect.getsource(seam._faust_tables_on_start)
    body = [line.strip() for line in source.splitlines()[2:] if line.strip()]
    assert body == ["await self.sleep(1.0)", "if not self.should_stop:",
                    "await self._update_channels()", "await self.recovery.start()"], body
    # 8 waits for a record before faust's timed batch wait: take_events must still wait
    # through the stream's own wait_for_stopped, with the batch window as its timeout (the fold
    # delivering batches at all is what every Kafka test checks)
    take = inspect.getsource(faust.Stream.take_events)
    assert "await self.wait_for_stopped(" in take and "timeout=timeout" in take
    assert "self.add_processor(add_to_buffer)" in take
    # 2 rebuilds aiokafka's LeaveGroup without its early return for static members
    leave = inspect.getsource(seam._original_leave_group)
    assert "group_instance_id" in leave and "LeaveGroupRequest" in leave


def test_fausts_worker_consumer_long_polls_briefly_and_reads_everything() -> None:
    async def build() -> tuple[int, Any]:
        app = build_app(Settings(broker="kafka://127.0.0.1:9", shards=4))
        consumer = app.consumer._thread._create_worker_consumer(app.transport)
        try:
            # its fetch routine turns as seldom as our own consumers' when idle
            assert consumer._consumer_timeout == IDLE_TURN_MS / 1000
            return consumer._fetch_max_wait_ms, app.consumer._read_offset
        finally:
            await consumer.stop()

    wait, read_offsets = asyncio.run(build())
    assert wait == seam.FOLD_FETCH_WAIT_MS
    read_offsets[object()] = 5
    assert all(read_offsets[key] is None for key in read_offsets)


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_a_log_written_in_batches_reports_its_whole_length_as_its_end(
        broker: Any, settings: Settings) -> None:
    """500 records sent in large batches: the broker's ListOffsets answer is 500, both as
    aiokafka's `end_offsets` and as the highwater faust's worker consumer thread reports, which is
    the end its table recovery reads a changelog to (a broker answering less would end a
    recovery early and silently drop the last table writes). The log here is a plain topic, not
    a table's changelog: what is checked is the end the broker reports and faust takes."""
    seam.install()
    topic = f"{settings.topic_prefix}.highwater"

    async def ends() -> tuple[int, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=100)
        await producer.start()
        try:
            sent = [await producer.send(topic, b"x", partition=0) for _ in range(500)]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
        app = build_app(settings)
        thread = app.consumer._thread
        thread._consumer = consumer = thread._create_worker_consumer(app.transport)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            reported = (await consumer.end_offsets([tp]))[tp]
            return reported, (await thread._highwaters([tp]))[tp]
        finally:
            await consumer.stop()

    assert run(ends()) == (500, 500)


async def _counting_fetches(consumer: AIOKafkaConsumer) -> list[float]:
    """Times of the fetch requests `consumer` sends from now on."""
    sent: list[float] = []
    client = consumer._client
    send = client.send
    loop = asyncio.get_running_loop()

    async def counted(node_id: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        if type(request).__name__.startswith("FetchRequest"):
            sent.append(loop.time())
        return await send(node_id, request, *args, **kwargs)

    client.send = counted  # type: ignore[method-assign]
    return sent


def test_a_fetch_cancelled_while_the_broker_holds_it_ends_without_a_pause(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """1: aiokafka's fetch returns False when it is cancelled mid-request (an empty fetch the
    broker holds for its wait, as Apache Kafka does); the idle pause must not follow. It did:
    aiokafka's fetch routine, stopped while awaiting this task, swallowed its own cancel
    (`suppress(CancelledError): await task`) and `consumer.stop()` hung for good."""
    async def held(self: Any, assignment: Any, node_id: Any, request: Any) -> bool:
        try:  # aiokafka's shape: the broker answers after the wait; a cancel is swallowed
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return False
        return False

    monkeypatch.setattr(seam, "_fetch", held)

    class Fetching:
        _fetch_max_wait_ms = 500

    async def cancel_mid_request() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(seam._fetch_waiting(Fetching(), None, 0, None))
        await asyncio.sleep(0.05)
        task.cancel()
        start = loop.time()
        found = await task
        return found, loop.time() - start

    found, took = run(cancel_mid_request())
    assert found is False
    assert took < 0.1, took  # without the check: the rest of the 500 ms wait


def test_an_idle_consumer_fetches_a_few_times_a_second_and_a_woken_one_at_once(
        broker: Any, settings: Settings) -> None:
    seam.install()
    topics = Topics.of(settings)

    async def idle() -> tuple[int, int]:
        await ensure_topics(broker.bootstrap, topics)
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                    fetch_max_wait_ms=200)
        await consumer.start()
        try:
            tps = [TopicPartition(topics.events, p) for p in range(topics.partitions)]
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            await asyncio.sleep(2.5)  # idle long enough to reach its longest wait
            sent = await _counting_fetches(consumer)
            await asyncio.sleep(2.0)
            idle_fetches = len(sent)
            seam.wake(consumer)
            woken = consumer._fetcher._fetch_max_wait_ms
            return idle_fetches, woken
        finally:
            await consumer.stop()

    idle_fetches, woken = run(idle())
    # 2 s at a 200 ms wait: ~10 (noida-db answers at once: thousands without the seam)
    assert 1 <= idle_fetches <= 14, idle_fetches
    assert woken == seam.IDLE_FETCH_FLOOR_MS


def test_with_long_polls_an_idle_consumer_lets_kafka_hold_its_fetch_and_data_comes_at_once(
        broker: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker on Kafka (`long_polls(True)`): an idle consumer's fetch asks the broker to wait
    up to LONG_POLL_MS, beyond its own 200 ms, and a record produced meanwhile still arrives
    at once (the broker answers a long poll when data comes). On noida-db, which answers an
    empty fetch at once, the pause between fetches stays within the consumer's 200 ms."""
    seam.install()
    monkeypatch.setattr(seam, "IDLE_RAMP", 1)  # the longest wait after 2 s idle, not 20 s
    topics = Topics.of(settings)

    async def idle() -> tuple[int, int, float]:
        await ensure_topics(broker.bootstrap, topics)
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                    fetch_max_wait_ms=200)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
        await consumer.start()
        await producer.start()
        try:
            tp = TopicPartition(topics.events, 0)
            consumer.assign([tp])
            await consumer.seek_to_end(tp)
            await consumer.getmany(timeout_ms=2500)  # idle long enough for the longest wait
            sent = await _counting_fetches(consumer)
            await consumer.getmany(timeout_ms=3000)
            idle_fetches, asked = len(sent), consumer._fetcher._fetch_max_wait_ms
            loop = asyncio.get_running_loop()
            start = loop.time()
            await producer.send_and_wait(topics.events, b"{}", partition=0)
            while not (await consumer.getmany(tp, timeout_ms=100)).get(tp):
                assert loop.time() - start < 5
            return idle_fetches, asked, loop.time() - start
        finally:
            await producer.stop()
            await consumer.stop()

    seam.long_polls(True)
    try:
        idle_fetches, asked, arrived_s = run(idle())
    finally:
        seam.long_polls(False)
    assert asked == seam.LONG_POLL_MS
    if broker.name == "apache":
        assert idle_fetches <= 3, idle_fetches  # 3 s at a 2 s wait (200 ms: ~15)
    else:
        assert idle_fetches <= 20, idle_fetches  # paused ~200 ms between (none: thousands)
    assert arrived_s < 0.5, arrived_s


def test_a_static_member_that_stops_hands_its_partitions_over_at_once(
        broker: Any, settings: Settings) -> None:
    """noida-db never expires a member that left without LeaveGroup, and aiokafka skips it for
    static members."""
    seam.install()
    topics = Topics.of(settings)
    group = f"{settings.topic_prefix}.seam"

    def member(name: str) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            topics.events, bootstrap_servers=broker.bootstrap, group_id=group,
            group_instance_id=f"seam-{name}",
            session_timeout_ms=int(broker.session_timeout_s * 1000),
            heartbeat_interval_ms=int(broker.heartbeat_s * 1000),
            partition_assignment_strategy=(RangePartitionAssignor,), enable_auto_commit=False)

    async def until(consumer: AIOKafkaConsumer, check: Callable[[set[Any]], bool],
                    timeout_s: float) -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        while not check(consumer.assignment()):
            assert loop.time() - start < timeout_s, consumer.assignment()
            await consumer.getmany(timeout_ms=100)
        return loop.time() - start

    async def handover() -> float:
        await ensure_topics(broker.bootstrap, topics)
        first, second = member("a"), member("b")
        await first.start()
        await second.start()
        try:
            await asyncio.gather(until(first, bool, 60), until(second, bool, 60))
            await first.stop()
            return await until(second, lambda a: len(a) == topics.partitions, 30)
        finally:
            await second.stop()

    # well before a session timeout would have expired the member (and never, on noida-db)
    assert run(handover()) < 3 * broker.session_timeout_s


def test_uncommitted_partitions_are_sought_to_their_beginning(
        broker: Any, settings: Settings) -> None:
    seam.install()
    topics = Topics.of(settings)

    async def positions() -> dict[int, int]:
        await ensure_topics(broker.bootstrap, topics)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            for p in range(topics.partitions):
                for _ in range(3):
                    await producer.send_and_wait(topics.events, b"{}", partition=p)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap,
                                    group_id=f"{settings.topic_prefix}.seek",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(topics.events, p) for p in range(topics.partitions)]
            consumer.assign(tps)
            await consumer.commit({tps[0]: OffsetAndMetadata(2, "")})
            for tp in tps:
                consumer.seek(tp, 3)  # a fetch position past what was processed
            await consumer.seek_to_committed()
            return {tp.partition: await consumer.position(tp) for tp in tps}
        finally:
            await consumer.stop()

    assert run(positions()) == {0: 2, **{p: 0 for p in range(1, settings.shards)}}


def test_topic_access_answers_for_a_missing_topic_without_creating_it(
        settings: Settings) -> None:
    """Item 10: the probe a refused principal is diagnosed with never auto-creates a topic (a
    broker's default partition count would break RECALL_SHARDS' co-partitioning)."""
    topics = Topics.of(settings)

    async def run() -> tuple[dict[str, int], set[str]]:
        await ensure_topics(str(settings.broker).removeprefix("kafka://"), topics,
                            names=[topics.events])
        admin = AIOKafkaAdminClient(
            bootstrap_servers=str(settings.broker).removeprefix("kafka://"))
        await admin.start()
        try:
            access = await seam.topic_access(admin, [topics.events, topics.requests])
            return access, set(await admin.list_topics())
        finally:
            await admin.close()

    access, listed = asyncio.run(run())
    assert access[topics.events] == 0 and access[topics.requests] != 0, access
    assert topics.requests not in listed
