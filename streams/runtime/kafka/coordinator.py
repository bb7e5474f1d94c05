"""Request handling over Kafka: the query role. Takes requests from `<p>.requests` (any worker
of the `<p>.query` group), answers them by scattering to shard owners, replies to `replyTo`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from indexer.routing import shard_of
from projections.errors import RecallError
from streams.core.settings import Settings
from streams.runtime.kafka.codec import (
    Request,
    decode_request,
    encode_event_value,
    encode_reply,
    encode_segment,
    error_reply,
    ok_reply,
)
from streams.runtime.kafka.connection import (
    FOLLOW_LEADERS,
    IDLE_TURN_MS,
    client_options,
    connect_kwargs,
)
from streams.runtime.kafka.fleet import fleet_cursor_key
from streams.runtime.kafka.membership import instance_id
from streams.runtime.kafka.query import CoordinatorBackend, RemoteQuery, run_sync
from streams.runtime.kafka.rpc import TIMEOUT, FirstSight, Requester, failure_reply, parse_reply_to
from streams.runtime.kafka.topics import Topics
from streams.runtime.kafka.workspaces import (
    Grant,
    Headers,
    KeyRing,
    Unauthenticated,
    WorkspaceQuery,
)
from streams.service.operations import dispatch
from streams.service.reference import number_events

log = logging.getLogger("recall.query")
#: Requests handled at once per worker; each holds a thread while it waits for shard owners.
CONCURRENCY = 8


class QueryCoordinator:
    """The query role of `recall worker`."""

    def __init__(self, settings: Settings, generation: int = 1) -> None:
        self.settings = settings
        # Requests scatter to the shard owners of the live generation only.
        self.topics = Topics.of(settings, generation)
        self.bootstrap = client_options(settings)
        self.shard_topic = self.topics.shard_requests
        #: Reference appends to the events topic (acks=all: a record of fact).
        self.producer: AIOKafkaProducer | None = None
        #: Shard requests and replies: acks from the leader alone. With acks=all a send waits
        #: for every in-sync follower, and a stalled one stays in sync until the controller
        #: fences it (or replica.lag.time.max.ms drops it): every reply waited that long. A lost
        #: request or reply is asked again (the requester's hops, the client's next call), so
        #: waiting for the followers buys nothing here.
        self.messages: AIOKafkaProducer | None = None
        self.requester: Requester | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.remote: RemoteQuery | None = None
        self._slots = asyncio.Semaphore(CONCURRENCY)
        self._taken = FirstSight()
        self._local = threading.local()  # each request's deadline, per handling thread
        #: Set (RECALL_KAFKA_REQUEST_KEYS): only signed requests are answered, each within its
        #: key's workspaces (streams.runtime.kafka.workspaces).
        self.keyring = (KeyRing.load(settings.kafka_request_keys)
                        if settings.kafka_request_keys is not None else None)

    def switch(self, generation: int) -> None:
        """Scatter to `generation`'s shard owners from the next request on (a request in
        flight finishes with the generation it started with)."""
        self.topics = Topics.of(self.settings, generation)
        self.shard_topic = self.topics.shard_requests

    async def run(self, stop: asyncio.Event) -> None:
        self.loop = asyncio.get_running_loop()
        key = await fleet_cursor_key(self.bootstrap, self.settings.topic_prefix)
        self.producer = AIOKafkaProducer(**connect_kwargs(self.bootstrap), acks="all", linger_ms=0)
        await self.producer.start()
        self.messages = AIOKafkaProducer(**connect_kwargs(self.bootstrap), acks=1, linger_ms=0)
        await self.messages.start()
        self.requester = Requester(self.bootstrap, self.topics.replies, self.settings.shards,
                                   producer=self.messages)
        await self.requester.start()
        self.remote = RemoteQuery(self.settings, key, self._call_shard, self._scatter)
        consumer = AIOKafkaConsumer(
            self.topics.requests, **connect_kwargs(self.bootstrap),
            group_id=f"{self.settings.topic_prefix}.query", auto_offset_reset="latest",
            group_instance_id=instance_id(self.settings, "query"),
            # No commits: a request is worth answering only now, and a commit failing during a
            # rebalance makes aiokafka rejoin under a new member id (static membership fences
            # the old one). Callers re-send on timeout.
            enable_auto_commit=False, fetch_max_wait_ms=200, consumer_timeout_ms=IDLE_TURN_MS,
            # It follows the leaders itself too: it waits for requests on the partitions a
            # killed broker led, and a fence seen by the requester's consumer alone left
            # queries unanswered longer after two brokers were killed in a row.
            **FOLLOW_LEADERS, session_timeout_ms=int(self.settings.session_timeout_s * 1000),
            heartbeat_interval_ms=int(self.settings.heartbeat_s * 1000))
        await consumer.start()
        tasks: set[asyncio.Task[None]] = set()
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=IDLE_TURN_MS)
                for records in batches.values():
                    for record in records:
                        await self._slots.acquire()
                        task = asyncio.create_task(
                            self._serve(record.value or b"", list(record.headers or ())))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
        finally:
            for task in list(tasks):
                task.cancel()
            await consumer.stop()
            await self.requester.stop()
            await self.messages.stop()
            await self.producer.stop()

    async def _serve(self, value: bytes, headers: Headers = ()) -> None:
        try:
            try:
                request = decode_request(value)
            except RecallError as exc:
                log.warning("unreadable request parked: %s", exc)
                return
            if not self._taken.first(request.id):
                return  # a requester's next attempt of a request this worker took
            try:
                grant = None if self.keyring is None else self.keyring.verify(value, headers)
            except Unauthenticated as exc:
                log.warning("request %s refused: %s", request.id, exc.message)
                reply = failure_reply(request.id, exc, self.settings.data_dir)
            else:
                reply = await self._answer(request, grant)
            topic, partition = parse_reply_to(request.reply_to)
            assert self.messages is not None
            await self.messages.send_and_wait(topic, encode_reply(reply), partition=partition)
        except Exception:
            log.exception("request failed")
        finally:
            self._slots.release()

    async def _answer(self, request: Request, grant: Grant | None = None) -> Any:
        deadline = request.deadline_ms / 1000
        if time.time() >= deadline:
            return error_reply(request.id, TIMEOUT, "the request's deadline passed before a "
                               "worker took it")
        try:
            result = await asyncio.wait_for(
                asyncio.to_thread(self._handle, request.op, request.args, deadline, grant),
                max(0.0, deadline - time.time()))
            return ok_reply(request.id, result)
        except TimeoutError:
            return error_reply(request.id, TIMEOUT, f"{request.op}: not answered within the "
                               "deadline (no partial result)")
        except Exception as exc:
            return failure_reply(request.id, exc, self.settings.data_dir)

    # --- runs in a worker thread --------------------------------------------------------------

    def _handle(self, op: str, args: Mapping[str, Any], deadline: float,
                grant: Grant | None = None) -> Any:
        self._local.deadline = deadline
        assert self.remote is not None
        remote: RemoteQuery | WorkspaceQuery = self.remote
        if grant is not None and grant.workspaces is not None:
            remote = WorkspaceQuery(self.remote, grant.workspaces)
        return dispatch(CoordinatorBackend(remote, self._append,
                                           f"gen-{self.topics.generation:06d}"), op, args)

    def _remaining(self) -> float:
        deadline = getattr(self._local, "deadline", time.time() + self.settings.request_timeout_s)
        return max(0.001, deadline - time.time())

    def _call_shard(self, shard: int, op: str, args: dict[str, Any]) -> Any:
        assert self.requester is not None and self.loop is not None
        return run_sync(self.loop, self.requester.request_retrying(
            self.shard_topic, op, {**args, "shard": shard}, deadline=time.time() +
            self._remaining(), partition=shard), self._remaining() + 1)

    def _scatter(self, op: str, args: dict[str, Any]) -> list[Any]:
        assert self.requester is not None and self.loop is not None
        requester = self.requester
        deadline = time.time() + self._remaining()

        async def gather() -> list[Any]:
            return list(await asyncio.gather(*(
                requester.request_retrying(self.shard_topic, op, {**args, "shard": k},
                                           deadline=deadline, partition=k)
                for k in range(self.settings.shards))))

        return list(run_sync(self.loop, gather(), self._remaining() + 1))

    def _append(self, session_id: str, events: Sequence[Mapping[str, Any]]) -> list[int]:
        """Reference appends: numbered after the indexed log and produced to the session's
        events partition; the fold's seq check makes a retried append harmless."""
        assert self.remote is not None and self.producer is not None and self.loop is not None
        last = self.remote.read_surface(session_id)["capturedThroughSeq"]
        numbered = number_events(0 if last is None else last + 1, events)
        producer = self.producer
        partition = shard_of(session_id, self.settings.shards)

        async def send() -> None:
            # one segment: the appends land together or not at all
            await producer.send_and_wait(
                self.topics.events, encode_segment([encode_event_value(e) for e in numbered]),
                key=session_id.encode("utf-8"), partition=partition)

        run_sync(self.loop, send(), self._remaining() + 1)
        return [int(e["seq"]) for e in numbered]
