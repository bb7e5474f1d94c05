"""Integration: a retried request (streams.runtime.kafka.rpc) is one request sent again — the first reply
answers it and a worker that took it skips the copies, so a slow operation is neither cut off at
a hop nor computed once per attempt."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streams.core.settings import Settings
from streams.runtime.kafka.codec import decode_request, encode_reply, ok_reply
from streams.runtime.kafka.rpc import FirstSight, Requester, parse_reply_to
from streams.runtime.kafka.topics import Topics, bootstrap_servers, ensure_topics

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def test_a_slow_retried_request_is_answered_once_by_its_first_reply(settings: Settings) -> None:
    asyncio.run(_slow_request(settings))


async def _slow_request(settings: Settings) -> None:
    bootstrap = bootstrap_servers(str(settings.broker))
    topics = Topics.of(settings)
    await ensure_topics(bootstrap, topics, names=[topics.requests, topics.replies])
    received: Counter[str] = Counter()
    computed: Counter[str] = Counter()
    ready = asyncio.Event()

    async def slow_worker() -> None:
        # answers each request 1.5 s after taking it; copies it has taken are skipped
        taken = FirstSight()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    fetch_max_wait_ms=20)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await consumer.start()
        await producer.start()
        try:
            tps = [TopicPartition(topics.requests, p) for p in range(topics.partitions)]
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            for tp in tps:
                await consumer.position(tp)
            ready.set()
            while True:
                for records in (await consumer.getmany(timeout_ms=100)).values():
                    for record in records:
                        request = decode_request(record.value or b"")
                        received[request.id] += 1
                        if not taken.first(request.id):
                            continue
                        computed[request.id] += 1
                        await asyncio.sleep(1.5)
                        topic, partition = parse_reply_to(request.reply_to)
                        await producer.send_and_wait(
                            topic, encode_reply(ok_reply(request.id, {"n": 42})),
                            partition=partition)
        finally:
            await consumer.stop()
            await producer.stop()

    worker = asyncio.create_task(slow_worker())
    requester = Requester(bootstrap, topics.replies, topics.partitions)
    await requester.start()
    try:
        await asyncio.wait_for(ready.wait(), 30)
        started = time.monotonic()
        result = await requester.request_retrying(topics.requests, "slow", {},
                                                  deadline=time.time() + 20, hop_s=0.4,
                                                  partition=0)
        elapsed = time.monotonic() - started
        await asyncio.sleep(1.0)  # copies still in flight reach the worker
    finally:
        await requester.stop()
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker
    assert result == {"n": 42}
    assert elapsed < 10  # answered by the first attempt's reply, not a later copy's deadline
    [(request_id, copies)] = received.items()  # every attempt was the same request
    assert copies >= 2  # hops of 0.4 s then 0.8 s passed before the 1.5 s reply
    assert computed == {request_id: 1}
