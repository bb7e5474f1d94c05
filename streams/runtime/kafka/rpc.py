"""Transport: request/reply over Kafka topics, correlated by id, with deadlines.

A requester owns one partition of `<p>.replies` (chosen at random; `replyTo` is
"topic:partition") and reads it without a consumer group, from its end, so starting one costs
no group join. Requests carry an absolute deadline; a reply that does not arrive by then is a
RECALL_REQUEST_TIMEOUT error, never a partial answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaTimeoutError

from projections.errors import RecallError
from streams.core.errorlog import as_recall_error
from streams.runtime.kafka import seam
from streams.runtime.kafka.codec import Reply, Request, decode_reply, encode_request, error_reply
from streams.runtime.kafka.connection import (
    FOLLOW_LEADERS,
    IDLE_TURN_MS,
    Connect,
    connect_kwargs,
)
from streams.runtime.kafka.workspaces import Signer

TIMEOUT = "RECALL_REQUEST_TIMEOUT"
#: Fetch wait of an idle reply consumer: it bounds the fetches of an idle requester, and each
#: request wakes the consumer first (streams.runtime.kafka.seam.wake: short waits while replies are
#: due).
FETCH_WAIT_MS = 500
#: How long the first attempt of a retried request waits before it is sent again (each next
#: attempt twice as long).
HOP_S = 4.0
#: How long a requester waits for its reply partition's end at start: reached at once on a
#: healthy cluster; past it, the caller finds out why (streams.runtime.kafka.connection).
START_WAIT_S = 10.0


class RemoteError(RecallError):
    """A worker answered with an error; `code` is the worker's stable code."""


class RequestTimeout(RecallError):
    """No reply within the deadline. Operator action: check that workers run (`recall worker`)
    and own every partition; the request was not answered partially."""

    code = TIMEOUT


def failure_reply(request_id: str, exc: BaseException, data_dir: Path | None) -> Reply:
    """The one mapping of a failed request to its error reply, through the edges' common one
    (streams.core.errorlog.as_recall_error: a coded error keeps its code; SQLite damage, OS errors and
    anything unexpected get theirs, unexpected ones logged with their traceback)."""
    error = as_recall_error(exc, data_dir)
    return error_reply(request_id, error.code, error.to_json()["message"])


def parse_reply_to(reply_to: str) -> tuple[str, int]:
    topic, _, partition = reply_to.rpartition(":")
    return topic, int(partition)


class Requester:
    """Sends requests and awaits their replies on its own reply partition."""

    def __init__(self, bootstrap: Connect, replies_topic: str, partitions: int,
                 producer: AIOKafkaProducer | None = None, signer: Signer | None = None) -> None:
        self.bootstrap = bootstrap
        #: Signs each request (RECALL_KAFKA_REQUEST_KEY_*: streams.runtime.kafka.workspaces).
        self.signer = signer
        self.replies_topic = replies_topic
        self.partition = random.randrange(partitions)
        self.producer = producer
        self._own_producer = producer is None
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.producer is None:
            # acks from the leader alone (aiokafka's default): a lost request is asked again
            self.producer = AIOKafkaProducer(**connect_kwargs(self.bootstrap), linger_ms=0,
                                             acks=1)
            await self.producer.start()
        self._consumer = AIOKafkaConsumer(**connect_kwargs(self.bootstrap), group_id=None,
                                          enable_auto_commit=False, auto_offset_reset="latest",
                                          fetch_max_wait_ms=FETCH_WAIT_MS,
                                          consumer_timeout_ms=IDLE_TURN_MS, **FOLLOW_LEADERS)
        await self._consumer.start()
        tp = TopicPartition(self.replies_topic, self.partition)
        self._consumer.assign([tp])
        try:
            await asyncio.wait_for(self._resolve_end(tp), START_WAIT_S)
        except TimeoutError:
            # aiokafka retries a topic the principal may not read for ever (and only logs it)
            raise KafkaTimeoutError(f"the reply partition {tp.topic}:{tp.partition} did not "
                                    f"resolve within {START_WAIT_S:.0f} s") from None
        self._task = asyncio.create_task(self._listen())

    async def _resolve_end(self, tp: TopicPartition) -> None:
        assert self._consumer is not None
        await self._consumer.seek_to_end(tp)
        await self._consumer.position(tp)  # resolve "end" now, before any request is sent

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()
        if self._own_producer and self.producer is not None:
            await self.producer.stop()
        for future in self._pending.values():
            if not future.done():
                future.cancel()

    async def _listen(self) -> None:
        assert self._consumer is not None
        async for record in self._consumer:
            try:
                reply = decode_reply(record.value or b"")
            except Exception:
                continue
            future = self._pending.pop(reply.id, None)
            if future is None or future.done():
                continue
            if reply.ok:
                future.set_result(reply.result)
            else:
                assert reply.error is not None
                future.set_exception(RemoteError(reply.error.message, code=reply.error.code))

    async def request(self, topic: str, op: str, args: dict[str, Any], *, deadline: float,
                      partition: int | None = None, key: bytes | None = None) -> Any:
        """Send one request and await its result; raises RemoteError or RequestTimeout."""
        return await self._attempts(topic, op, args, deadline=deadline, hop_s=None,
                                    partition=partition, key=key)

    async def request_retrying(self, topic: str, op: str, args: dict[str, Any], *,
                               deadline: float, hop_s: float = HOP_S,
                               partition: int | None = None, key: bytes | None = None) -> Any:
        """`request`, sent again when a hop gets no reply: a consumer that was being rebalanced
        skips what arrived meanwhile. Only for idempotent operations. Every attempt is the same
        request (its id and the call's deadline): the first reply answers, a worker that already
        took it skips the copy (`FirstSight`), so a slow operation (a digest of a large index)
        is neither cut off at a hop nor computed again; hops double."""
        return await self._attempts(topic, op, args, deadline=deadline, hop_s=hop_s,
                                    partition=partition, key=key)

    async def _attempts(self, topic: str, op: str, args: dict[str, Any], *, deadline: float,
                        hop_s: float | None, partition: int | None, key: bytes | None) -> Any:
        assert self.producer is not None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        request_id = uuid.uuid4().hex
        self._pending[request_id] = future
        request = encode_request(Request(id=request_id, op=op, args=args,
                                         replyTo=f"{self.replies_topic}:{self.partition}",
                                         deadlineMs=int(deadline * 1000)))
        headers = None if self.signer is None else self.signer.headers(request)
        try:
            while True:
                if self._consumer is not None:
                    seam.wake(self._consumer)
                # bounded by the deadline: while a partition's leader is lost (a broker killed
                # or stalled) the producer waits for a new one far longer than a request lives
                try:
                    await asyncio.wait_for(
                        self.producer.send_and_wait(topic, request, key=key,
                                                    partition=partition, headers=headers),
                        max(0.0, deadline - time.time()))
                except TimeoutError:
                    raise RequestTimeout(f"{op}: the deadline passed before the request was "
                                         "sent", hint="check that the brokers are up") from None
                remaining = deadline - time.time()
                if remaining <= 0:
                    raise RequestTimeout(f"{op}: the deadline passed before the request was "
                                         "sent")
                hop = remaining if hop_s is None else min(remaining, hop_s)
                try:
                    return await asyncio.wait_for(asyncio.shield(future), hop)
                except TimeoutError:
                    if hop_s is None or time.time() >= deadline - 0.05:
                        raise RequestTimeout(
                            f"{op}: no reply within the deadline",
                            hint="check that `recall worker` runs and owns every partition"
                        ) from None
                    hop_s *= 2
        finally:
            self._pending.pop(request_id, None)
            if not future.done():
                future.cancel()


class FirstSight:
    """Request ids a worker has taken (the latest `KEEP`): a copy of one (a requester's next
    attempt) is skipped, its answer is on its way or sent."""

    KEEP = 10_000

    def __init__(self) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()

    def first(self, request_id: str) -> bool:
        """True the first time `request_id` is seen."""
        if request_id in self._seen:
            return False
        self._seen[request_id] = None
        if len(self._seen) > self.KEEP:
            self._seen.popitem(last=False)
        return True
