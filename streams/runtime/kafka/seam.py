"""Transport: the one seam onto faust's and aiokafka's internals (patches, private attributes).

Everything else in `streams` uses faust and aiokafka through their public API and this module's
small interface: `install()`, `wake()`, `quiet_worker()`, `topic_access()`, `FoldTable` and
`FaustFold`. Each reliance on
something private is listed here with why, and tests/integration/test_kafka_seam.py checks each
one against the installed libraries and the real brokers (`install()` itself fails loudly
when an attribute it patches is gone).

Contract, once `install()` ran in the process (the worker's roles, `build_app`, the client):
1. Idle consumers wait, busy ones do not. Each consumer's fetch wait follows how long it has
   been idle: `IDLE_FETCH_FLOOR_MS` right after a fetch that brought records, then a tenth
   (`IDLE_RAMP`) of the time since, up to the consumer's `fetch_max_wait_ms`. A broker that
   long-polls (Kafka) does the waiting; one that answers an empty fetch at once (noida-db,
   which would otherwise take a core in empty fetches) is followed by a client-side pause for
   the rest of the wait. So a long-idle consumer fetches `1000 / fetch_max_wait_ms` times a
   second, and one in the middle of an exchange (a request/reply burst) within
   a tenth of the gap since its last data. In a process that called `long_polls(True)` (the
   worker's) the fetch *request* of an idle consumer may ask the broker to wait up to
   `LONG_POLL_MS`, longer than `fetch_max_wait_ms`: a broker that long-polls answers it when
   data arrives, and the client-side pause stays within `fetch_max_wait_ms`.
   `wake(consumer)` ends the pause of a consumer whose data is about to come (a requester's
   reply consumer, when it sends).
   [aiokafka private: `Fetcher._proc_fetch_request`, `Fetcher._fetch_max_wait_ms`,
   `AIOKafkaConsumer._fetcher`]
2. A static group member leaves on a clean stop (aiokafka skips LeaveGroup for static
   members, expecting to come back; a scale-in must hand partitions over at once, and
   noida-db never expires a member that left without it).
   [aiokafka private: `GroupCoordinator._maybe_leave_group`, `_send_req`, `reset_generation`]
3. `seek_to_committed` seeks a partition without a commit to its beginning (aiokafka leaves
   it at its fetch position, which after a rebalance could be past records faust dropped).
4. faust's consumer delivers every fetched record: its per-partition "read offset" (a record
   below it dropped as seen, a jump above it counted as acked) is kept empty. Measured: a
   record fetched before a rebalance's seek and delivered after it moved that mark, so the
   re-fetched records were dropped *and* committed (a lost event).
   [faust private: `Consumer._read_offset`]
5. After faust's post-rebalance seek to the committed offsets, the app's `FaustFold` seeks the
   fold's input partitions to the positions recorded in the fold table (`FaustFold.place`),
   and faust's commit bookkeeping starts from there.
   [faust: `Consumer.perform_seek` (patched), private `Consumer._committed_offset`]
6. faust's worker consumer waits `FOLD_FETCH_WAIT_MS`, not its hard-coded 1500 ms: on Kafka
   the worker's idle fetches ask for `LONG_POLL_MS` anyway (item 1), so this bounds only the
   pause after an empty fetch noida-db answered at once (a record appended meanwhile waits
   for it); and its fetch routine turns every `IDLE_TURN_MS` when idle, not every 200 ms.
   [faust: `AIOKafkaConsumerThread._create_worker_consumer`; aiokafka private
   `AIOKafkaConsumer._fetch_max_wait_ms`, `AIOKafkaConsumer._consumer_timeout`]
7. faust's table manager starts without its hard-coded one-second sleep "to give agents a
   chance to start" (the conductor waits for the agents anyway, and our table is added when
   the app is built): a fold role starts a second sooner, which a generation switch pays.
   [faust: `TableManager.on_start` (replaced: the same steps without the sleep),
   `TableManager._update_channels`, `TableManager.recovery`]

8. An idle fold does not wake every `BATCH_WITHIN_S`: its stream's `take_events` waits for
   the first record of a batch without a timeout, then for the rest: `within` when records
   came during the last batch (a backlog), else while records keep coming (a gap of
   `BATCH_QUIET_S` ends the batch; `within` bounds it).
   [faust: `Stream.add_processor`, `Service.wait_for_stopped` as `take_events` calls it
   (replaced on the fold's stream instance)]
9. `topic_access(admin, topics)` asks the brokers what they answer for each topic without
   creating any (aiokafka's `describe_topics` lets a broker auto-create a missing topic with its
   default partition count): how a refused principal learns which topic it may not use.
   [aiokafka private: `AIOKafkaAdminClient._send_request`]
10. A broker the cluster no longer lists is let go at once. Every client's metadata request
   waits `METADATA_WAIT_S` per broker before asking the next one (then, if none answered that
   soon, as long as its request timeout allows, as aiokafka does), and a metadata answer that
   no longer lists a broker (the controller fenced it: dead, or stalled and still holding its
   connections open) closes this client's connections to it, and every other client of the
   process holding one asks for its metadata at once (on its own event loop: faust's consumer
   thread has one), its answer then closing its own: what waited there (a produce, a fetch, a
   group heartbeat) fails now and is retried on the partitions' new leaders and the group's
   new coordinator, instead of hanging for the whole request timeout (40 s). A SIGSTOPped
   broker answers nothing and closes nothing, so without this the clients held on to it for
   as long as it hung. How soon a process sees the fence is the shortest `metadata_max_age_ms`
   of its clients (`streams.runtime.kafka.connection.FOLLOW_LEADERS`: the request path's
   consumers), so the others keep aiokafka's default and its idle cost. Only the brokers an
   answer lists decide what is closed (an answer without brokers closes nothing; a topic's
   error, e.g. one the principal may not describe, none), and a cancelled round ends cancelled
   (a client's `close()` cancels its metadata task once and waits for it to end).
   [aiokafka private: `AIOKafkaClient._metadata_update` (replaced: the same steps, each
   broker's wait bounded), `AIOKafkaClient.bootstrap` (wrapped: the client joins the
   process's set), `AIOKafkaClient._conns`, `_loop`, `_sync_task`, `AIOKafkaConnection.close`]
11. A consumer whose position is reset (no commit: to a log's end or beginning) and whose
   ListOffsets meets a moved leader asks for metadata. aiokafka retries that reset every
   `retry_backoff_ms` on the leader it knows without asking, so a consumer with the default
   metadata age kept asking the old leader for minutes after a leadership moved (the query
   role did, after a stalled broker was fenced). A failed ListOffsets whose error says the
   metadata is stale (not the leader, unknown partition, a closed connection) now asks for
   it, then fails as before, and the next retry goes to the new leader.
   [aiokafka private: `Fetcher._proc_offset_request` (wrapped), `Fetcher._client`]

`FoldTable` (faust `Table` subclass) writes a partition's records in one go, pinned to the
changelog partition of their source, and tells the memory store which partition each key it
writes belongs to (so a revoked partition's keys go with it, as recovered keys do).
`FaustFold` runs a `PartitionProcessor` as the body of a faust agent: batches from
`take_events`, each batch held (not committable) until the processor's effects are written,
records past a hole released without being committable.
[faust: `Message.incref` / `ack_lock` / `Message.acked`, private `Consumer._unacked_messages`,
memory store private `_key_partition`]
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import threading
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.cluster import ClusterMetadata
from aiokafka.conn import CloseReason
from aiokafka.consumer import group_coordinator
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.errors import KafkaError
from aiokafka.protocol.group import LeaveGroupRequest
from aiokafka.protocol.metadata import MetadataRequest
from faust.tables.manager import TableManager
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types.tuples import ack_lock

from streams.runtime.kafka.partitions import CHUNK_LINES, PartitionProcessor, ReadPositions

log = logging.getLogger("recall.seam")

#: The wait after a fetch that brought records, and how it grows: idle time ÷ IDLE_RAMP, up to
#: the consumer's fetch_max_wait_ms. Without any wait an idle consumer on noida-db spins on empty
#: fetches, taking CPU from the busy roles beside it (docs/ENGINE-NOTES.md, pipeline profile).
IDLE_FETCH_FLOOR_MS = 5
IDLE_RAMP = 10
#: How long an idle consumer asks a broker that long-polls to hold its fetch (`long_polls`):
#: it answers the moment data arrives, so a longer wait only means fewer empty fetches (each
#: a few event-loop turns; at 200 ms waits, most of an idle worker's CPU). Reached
#: after IDLE_RAMP × as long idle.
LONG_POLL_MS = 2000
_long_poll_ms = 0
#: How often an idle long-lived consumer's loops turn: aiokafka's background fetch routine
#: (`consumer_timeout_ms`, 200 ms by default) and a role's getmany loop. Both wake at once on
#: data, an assignment change or a seek; a turn with nothing to do only looks whether to stop,
#: and at 200 ms the turns of a worker's consumers were most of its idle CPU.
IDLE_TURN_MS = 1000
#: faust's worker consumer fetch wait: the longest pause of an idle fold after an empty fetch
#: answered at once (noida-db); on Kafka its idle fetches ask for LONG_POLL_MS instead.
FOLD_FETCH_WAIT_MS = 200
#: A fold batch is folded once no record came for this long (or it is full, or `within` passed):
#: records of a backlog arrive microseconds apart, a lone append would otherwise wait `within`.
BATCH_QUIET_S = 0.003
#: Least time between two seek-backs of one fold partition: faust's stream buffer keeps
#: delivering records fetched before a seek, which land past the position too.
RESEEK_S = 1.0
#: Exit code of a fold role whose batch failed mid-way (the supervisor restarts it; the batch
#: was not committed, so it is read again).
BATCH_FAILED = 70
#: How long a metadata request waits for one broker before the next is asked (10): a healthy
#: broker answers in milliseconds, a stalled one never.
METADATA_WAIT_S = 1.0

_installed = False
_fetch = Fetcher._proc_fetch_request
_offset_request = Fetcher._proc_offset_request
_original_leave_group = group_coordinator.GroupCoordinator._maybe_leave_group
_seek_to_committed = AIOKafkaConsumer.seek_to_committed
_faust_consumer_init = faust_consumer.Consumer.__init__
_faust_perform_seek = faust_consumer.Consumer.perform_seek
_faust_worker_consumer = faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer
_faust_tables_on_start = TableManager.on_start
_metadata_update = AIOKafkaClient._metadata_update
_bootstrap = AIOKafkaClient.bootstrap
_BOOTSTRAP = ("bootstrap", ConnectionGroup.DEFAULT)
#: Every client of the process that started since `install()` (10): a fence one of them sees
#: is acted on by all of them, so only the request path's consumers follow the leaders closely.
_clients: weakref.WeakSet[Any] = weakref.WeakSet()
#: (faust's consumer runs on a thread and an event loop of its own)
_clients_lock = threading.Lock()


# --- 1. idle consumers wait, busy ones do not ----------------------------------------------

async def _fetch_waiting(self: Any, assignment: Any, node_id: Any, request: Any) -> bool:
    # returns True when it buffered records; the fetch routine sends no new request to this
    # node while the task runs, so the sleep is the long poll the broker did not do. The
    # request was built with `_fetch_max_wait_ms`, which is set here for the next one.
    cap = getattr(self, "_recall_wait_cap", None)
    if cap is None:
        cap = self._recall_wait_cap = self._fetch_max_wait_ms
        self._recall_woken = asyncio.Event()
        self._recall_data_at = time.monotonic()
    # the request may ask the broker to hold it longer than `cap` (a broker that long-polls
    # answers as soon as data arrives); a pause of ours never exceeds `cap`
    wait = min(self._fetch_max_wait_ms, cap)
    started = time.monotonic()
    found: bool = await _fetch(self, assignment, node_id, request)
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        # cancelled during the request (the original returns False instead of raising): no
        # pause after it. Measured on Apache Kafka, which holds an empty fetch for its whole
        # wait: the pause kept this task alive after its cancel, aiokafka's fetch routine
        # swallowed its own cancel while awaiting it (`suppress(CancelledError): await task`)
        # and the consumer's stop() hung for good.
        return False
    now = time.monotonic()
    if found:
        self._recall_data_at = now
        self._fetch_max_wait_ms = min(IDLE_FETCH_FLOOR_MS, cap)
        return True
    idle_ms = 1000 * (now - self._recall_data_at)
    self._fetch_max_wait_ms = int(min(max(cap, _long_poll_ms),
                                      max(IDLE_FETCH_FLOOR_MS, idle_ms / IDLE_RAMP)))
    left = wait / 1000 - (now - started)
    woken = self._recall_woken
    if left > 0 and not woken.is_set():
        try:
            await asyncio.wait_for(woken.wait(), left)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            return False  # as the original: a cancelled fetch's result is of no interest
    woken.clear()
    return False


def long_polls(enabled: bool) -> None:
    """`enabled`: from now on an idle consumer of this process asks the brokers to hold its
    fetch up to `LONG_POLL_MS`, whatever its own `fetch_max_wait_ms` (Apache Kafka answers a
    held fetch as soon as data arrives). Its pause after an empty fetch that came back early (a
    broker that does not long-poll: noida-db) stays within `fetch_max_wait_ms`."""
    global _long_poll_ms
    _long_poll_ms = LONG_POLL_MS if enabled else 0


def wake(consumer: AIOKafkaConsumer) -> None:
    """Data is about to arrive for `consumer` (a requester just sent a request): end its idle
    pause now and fetch with the shortest wait (from the consumer's event loop)."""
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None or getattr(fetcher, "_recall_wait_cap", None) is None:
        return
    fetcher._fetch_max_wait_ms = min(IDLE_FETCH_FLOOR_MS, fetcher._recall_wait_cap)
    fetcher._recall_data_at = time.monotonic()
    fetcher._recall_woken.set()


# --- 2. a static group member leaves on a clean stop ---------------------------------------

async def _leave_group(self: Any) -> None:
    # aiokafka's own, without `and self._group_instance_id is None`
    if self.generation > 0:
        try:
            await self._send_req(LeaveGroupRequest(self.group_id, self.member_id))
        except KafkaError as exc:
            log.info("LeaveGroup failed (the group rebalances once the member is fenced): %s",
                     exc)
    self.reset_generation()


# --- 3. seek_to_committed: a partition without a commit from its beginning -----------------

async def _seek_to_committed_or_beginning(self: Any, *partitions: Any) -> Any:
    committed = await _seek_to_committed(self, *partitions)
    uncommitted = [tp for tp, offset in committed.items() if not offset]
    if uncommitted:
        await self.seek_to_beginning(*uncommitted)
    return committed


# --- 4. faust's consumer delivers every fetched record; 5. the fold places its partitions --

class _NothingRead(dict[Any, Any]):
    """faust's per-partition read offsets, always unknown."""

    def __getitem__(self, key: Any) -> None:
        return None


def _init_without_read_offsets(self: Any, *args: Any, **kwargs: Any) -> None:
    _faust_consumer_init(self, *args, **kwargs)
    self._read_offset = _NothingRead()


async def _perform_seek_then_place(self: Any) -> None:
    await _faust_perform_seek(self)
    fold = getattr(self.app, "recall_fold", None)
    if fold is not None:
        await fold.place(self)


# --- 6. faust's worker consumer: its fetch wait and its idle turn --------------------------

def _worker_consumer(self: Any, transport: Any) -> Any:
    consumer = _faust_worker_consumer(self, transport)
    consumer._fetch_max_wait_ms = FOLD_FETCH_WAIT_MS
    # aiokafka's `consumer_timeout_ms`, which faust does not pass (its fetch routine's turn)
    consumer._consumer_timeout = IDLE_TURN_MS / 1000
    return consumer


# --- 7. faust's table manager starts without its one-second sleep --------------------------

async def _tables_start_at_once(self: Any) -> None:
    if not self.should_stop:
        await self._update_channels()
        await self.recovery.start()


# --- 8. an idle fold does not wake every BATCH_WITHIN_S ------------------------------------

def _no_idle_timer(stream: Any) -> None:
    """faust's `take_events` waits for a full batch `within` seconds at a time, also with
    nothing buffered, so an idle fold keeps waking up (much of an idle fold role's CPU). Here
    the stream waits for its next record without a timeout, then for the rest of the batch:
    - records came while the last batch was folded (a backlog): as faust does, until the batch
      is full or `within` passed (the fold awaits its outputs' acks once per batch: smaller
      batches would leave it idle more often);
    - the stream was idle (a live append): until the batch is full, `within` passed, or no
      record came for `BATCH_QUIET_S`: a lone record is folded at once instead of `within`
      later (the latency floor of a quiet topic)."""
    arrived = asyncio.Event()
    last = [0.0]  # when the latest record came (monotonic)

    async def note(value: Any) -> Any:
        # per record only a stamp: the wait below wakes at most once per BATCH_QUIET_S
        last[0] = time.monotonic()
        arrived.set()
        return value

    stream.add_processor(note)
    wait_for_stopped = stream.wait_for_stopped

    async def wait_for_record_first(*events: Any, timeout: Any = None) -> Any:
        if timeout is None:
            return await wait_for_stopped(*events)  # not take_events' batch wait
        if arrived.is_set():
            arrived.clear()
            stopped = await wait_for_stopped(*events, timeout=timeout)
            arrived.clear()  # set again only by a record that comes while this batch is folded
            return stopped
        if await wait_for_stopped(arrived):
            return True  # the stream stops
        # take_events passes its one `buffer_full` event (set by its processor, which runs
        # after `note`, once the buffer is full)
        (full,) = events
        deadline = time.monotonic() + timeout
        while not full.is_set():
            now = time.monotonic()
            until = min(deadline, last[0] + BATCH_QUIET_S)
            if now >= until:
                break  # the window passed, or no record came for BATCH_QUIET_S
            if await wait_for_stopped(full, timeout=until - now):
                return True
        arrived.clear()
        return False

    stream.wait_for_stopped = wait_for_record_first


# --- 9. which topics a principal may use (topic_access) ------------------------------------

async def topic_access(admin: Any, topics: Sequence[str]) -> dict[str, int]:
    """Topic → the error code a metadata request answers for it (0: usable, 3: missing, 29: not
    authorized), never auto-creating one."""
    response = await admin._send_request(MetadataRequest(list(topics),
                                                         allow_auto_topic_creation=False))
    return {str(info["topic"]): int(info["error_code"])
            for info in response.to_object()["topics"]}


# --- 10. a broker the cluster no longer lists is let go ------------------------------------

async def _metadata_update_letting_go(self: Any, cluster_metadata: ClusterMetadata,
                                      topics: Any) -> bool:
    # aiokafka's own steps (a shuffled round of the known brokers and the bootstrap
    # connection), each broker's answer awaited METADATA_WAIT_S; a round where none answered
    # that soon is aiokafka's own, with the full request timeout
    request = MetadataRequest(list(topics) if topics else None)
    nodes: list[Any] = [broker.nodeId for broker in self.cluster.brokers()]
    if _BOOTSTRAP in self._conns:
        nodes.append("bootstrap")
    random.shuffle(nodes)
    for node_id in nodes:
        conn = await self._get_conn(node_id)
        if conn is None:
            continue
        try:
            # not asyncio.wait_for: on Python 3.11 it returns an answer that arrived in the
            # loop turn of a cancel and drops the cancel (bpo-42130), and the client's close(),
            # which cancels this task once and awaits it, never returned
            async with asyncio.timeout(METADATA_WAIT_S):
                metadata = await conn.send(request)
        except TimeoutError:
            log.info("no metadata from broker %s within %.1f s: asking the next", node_id,
                     METADATA_WAIT_S)
            continue
        except KafkaError as exc:
            log.warning("Unable to request metadata from node with id %s: %r", node_id, exc)
            continue
        if not metadata.brokers:
            return False
        cluster_metadata.update_metadata(metadata)
        if _BOOTSTRAP in self._conns and len(self.cluster.brokers()):
            self._conns.pop(_BOOTSTRAP).close()
        if cluster_metadata is self.cluster:
            _let_go_everywhere(self)
        return True
    updated = bool(await _metadata_update(self, cluster_metadata, topics))
    if updated and cluster_metadata is self.cluster:
        _let_go_everywhere(self)
    return updated


async def _bootstrap_registered(self: Any) -> None:
    await _bootstrap(self)
    with _clients_lock:
        _clients.add(self)


def _let_go_everywhere(client: Any) -> None:
    """Close `client`'s connections to the brokers its fresh metadata no longer lists, and have
    every other client of the process that holds one ask for its metadata now (on its own event
    loop): its own answer, the partitions' new leaders in hand, then lets go of them. (Closing
    them first would send a retried request back to the fenced broker, still its leader.)"""
    listed = frozenset(broker.nodeId for broker in client.cluster.brokers())
    _let_go_of_unlisted(client, listed)
    with _clients_lock:
        others = [other for other in _clients if other is not client]
    for other in others:
        loop = other._loop
        if loop.is_closed():
            continue
        if loop is client._loop:
            _follow_fence(other, listed)
        else:
            with contextlib.suppress(RuntimeError):  # (that loop closed meanwhile)
                loop.call_soon_threadsafe(_follow_fence, other, listed)


def _follow_fence(client: Any, listed: frozenset[int]) -> None:
    """Ask `client` for its metadata at once if it is running and holds a connection to a
    broker not in `listed` (a round already asked for is not asked twice)."""
    if client._sync_task is not None and any(
            isinstance(node_id, int) and node_id not in listed for node_id, _ in client._conns):
        client.force_metadata_update()


def _let_go_of_unlisted(client: Any, listed: frozenset[int]) -> None:
    """Close `client`'s connections to brokers not in `listed`."""
    for conn_id, conn in list(client._conns.items()):
        node_id = conn_id[0]
        if isinstance(node_id, int) and node_id not in listed:
            log.warning("broker %s is no longer in the cluster's metadata (fenced): its "
                        "connection is closed, its requests go to the new leaders", node_id)
            del client._conns[conn_id]
            # not CONNECTION_BROKEN: that would ask for another metadata update at once
            conn.close(reason=CloseReason.SHUTDOWN)


# --- 11. a position reset that meets a moved leader asks for metadata ------------------------

async def _offsets_or_new_leaders(self: Any, node_id: Any, topic_data: Any) -> Any:
    try:
        return await _offset_request(self, node_id, topic_data)
    except KafkaError as exc:
        if exc.invalid_metadata:
            self._client.force_metadata_update()
        raise


def install() -> None:
    """Apply the process-wide behaviours of the contract (idempotent)."""
    global _installed
    if _installed:
        return
    Fetcher._proc_fetch_request = _fetch_waiting
    Fetcher._proc_offset_request = _offsets_or_new_leaders
    group_coordinator.GroupCoordinator._maybe_leave_group = _leave_group
    AIOKafkaConsumer.seek_to_committed = _seek_to_committed_or_beginning
    faust_consumer.Consumer.__init__ = _init_without_read_offsets  # type: ignore[method-assign]
    faust_consumer.Consumer.perform_seek = _perform_seek_then_place  # type: ignore[method-assign]
    faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer = _worker_consumer  # type: ignore[method-assign]
    TableManager.on_start = _tables_start_at_once  # type: ignore[method-assign]
    AIOKafkaClient._metadata_update = _metadata_update_letting_go
    AIOKafkaClient.bootstrap = _bootstrap_registered
    _installed = True


def quiet_worker(worker: faust.Worker) -> faust.Worker:
    """faust's terminal spinner turns the root logger to DEBUG, so every aiokafka debug call
    builds a record that is then dropped: a noticeable share of a worker's CPU."""
    worker.spinner = None
    return worker


# --- the fold table ------------------------------------------------------------------------

class FoldTable(faust.Table[str, bytes]):
    """The fold table. Writes bypass faust's per-key path for two reasons:
    - faust picks the changelog partition from `current_event()`, which inside `take_events()`
      is some other event of the batch (faust-streaming#497), and `use_partitioner=True` would
      hash our compound keys away from the source partition; `write` names the partition, so
      recovering changelog partition k rebuilds exactly the sessions of events partition k;
    - every `table[k] = v` goes through faust's ProducerBuffer one message at a time, which
      became the bottleneck ("producer buffer full"); `write` hands records straight to the
      producer. faust's commit still flushes the producer before committing source offsets.
    Only the memory store is supported (persisted changelog offsets are not tracked)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # str keys travel as their UTF-8 bytes (faust would JSON-quote a str key type); this
        # must be set before the store and changelog topic, which faust creates lazily.
        self.key_serializer = "raw"

    def view(self) -> _StoreView:
        """Read access straight to the store: faust's __getitem__ sensors cost more than the
        fold (the store itself is created lazily, so it is looked up per read)."""
        return _StoreView(self)

    async def write(self, partition: int,
                    records: Iterable[tuple[str, bytes | None]]) -> list[Awaitable[Any]]:
        """Apply `records` locally and send them to changelog partition `partition`, in order;
        return the send futures (faust's commit flushes them before committing offsets)."""
        producer = self.app.producer
        topic = self.changelog_topic.get_topic_name()
        store = self.data
        # The memory store forgets keys of revoked partitions by this map after a recovery.
        key_partition = getattr(store, "_key_partition", None)
        futures: list[Awaitable[Any]] = []
        for key, value in records:
            futures.append(await producer.send(topic, key.encode(), value, partition,
                                               None, None))
            if value is None:
                if key in store:
                    del store[key]
            else:
                store[key] = value
            if key_partition is not None:
                key_partition[key] = partition
        return futures


class _StoreView:
    def __init__(self, table: FoldTable) -> None:
        self._table = table

    def get(self, key: str, default: None = None) -> bytes | None:
        value: bytes | None = self._table.data.get(key)
        return value


# --- the fold under faust ------------------------------------------------------------------

class FaustFold:
    """Runs a PartitionProcessor (streams.runtime.kafka.partitions) as a faust agent's body.

    1. A rebalance begins (faust's `on_partitions_revoked`): nothing is read until the fold
       table is recovered; a write made meanwhile would be overwritten in memory by the
       recovery yet stay last in the changelog (a seek can run mid-recovery, before the moved
       partitions' positions are back).
    2. The table is recovered (`on_recover`), then faust seeks to the committed offsets and
       `place` seeks each assigned input partition to the processor's recorded position (or
       its earliest offset), which is where reading continues.
    3. Each `take_events` batch: one extra reference per message, so faust's own ack (when the
       generator resumes *or is closed*) cannot make it committable; the records admitted by
       the read positions are processed; then the batch is acked, records left unread are
       released without being offered for commit, and holes are sought back.
    An interrupted batch (a stop, a rebalance cancelling the agent) keeps its hold: it is not
    committed and comes again to the next owner. A failing batch exits the process
    (`BATCH_FAILED`): releasing would commit offsets whose effects failed, holding would stall
    every rebalance (faust waits for in-flight messages)."""

    def __init__(self, app: faust.App, table: faust.Table[Any, Any],
                 processor: PartitionProcessor) -> None:
        self.app = app
        self.processor = processor
        self.positions = ReadPositions(reseek_s=RESEEK_S)
        self.ready = False
        self.stats: Counter[str] = Counter()
        app.recall_fold = self  # type: ignore[attr-defined]  # read by the perform_seek patch
        app.on_partitions_revoked.connect(self._revoked)  # type: ignore[arg-type]
        table.on_recover(self._recovered)

    async def _revoked(self, sender: Any, revoked: Any, **kwargs: Any) -> None:
        self.ready = False
        self.positions.forget()

    async def _recovered(self) -> None:
        self.ready = True

    async def place(self, consumer: Any) -> None:
        """After faust's seek to the committed offsets (skipped until the table is back)."""
        if not self.ready:
            return
        topic = self.processor.topic
        tps = [tp for tp in consumer.assignment() if tp.topic == topic]
        recorded = {tp: self.processor.recorded(tp.partition) for tp in tps}
        targets = {tp: offset for tp, offset in recorded.items() if offset is not None}
        fresh = [tp for tp, offset in recorded.items() if offset is None]
        if fresh:
            targets.update(await consumer.earliest_offsets(*fresh))
        if not targets:
            return
        # Placed before the seek: the seek waits on faust's consumer thread, and a batch read
        # meanwhile (from the new positions) would find its partitions unplaced, be released
        # unread, and never be fetched again; folded, its acks count from these positions too.
        for tp, offset in targets.items():
            self.positions.place(tp.partition, offset)
        # faust's gap check counts from here: it ignores acks below, never commits a hole above
        consumer._committed_offset.update({tp: offset or None for tp, offset in targets.items()})
        await consumer.seek_wait(targets)

    async def run(self, stream: Any, batch_max: int, within_s: float) -> None:
        """The agent body: every batch of `stream`, held until processed."""
        _no_idle_timer(stream)
        # StreamT does not declare take_events; every concrete faust Stream has it.
        async for batch in stream.take_events(batch_max, within=within_s):
            await self.held(stream, batch)

    async def held(self, stream: Any, batch: Sequence[Any]) -> None:
        for event in batch:
            event.message.incref()
        try:
            unread = await self._process([event.message for event in batch])
        except asyncio.CancelledError:
            raise  # the hold stays: uncommitted, redelivered to the next owner
        except Exception:
            log.critical("fold batch failed; exiting so the batch is read again", exc_info=True)
            os._exit(BATCH_FAILED)
        consumer = self.app.consumer
        for event in batch:
            if id(event.message) in unread:
                _release_unread(consumer, event.message)
            else:
                await stream.ack(event)

    async def _process(self, messages: list[Any]) -> set[int]:
        if not self.ready:
            self.stats["unread"] += len(messages)
            return {id(m) for m in messages}
        admitted = self.positions.admit(messages)
        self.stats["reread"] += admitted.reread
        self.stats["unread"] += len(admitted.unread)
        if admitted.resume:
            await self._seek_back(admitted.resume)
        for records, upto in admitted.chunks(CHUNK_LINES):
            await self.processor.process(records, upto)
            self.positions.advance(upto)
        return {id(m) for m in admitted.unread}

    async def _seek_back(self, resume: dict[int, int]) -> None:
        consumer = self.app.consumer
        assigned = {tp.partition: tp for tp in consumer.assignment()
                    if tp.topic == self.processor.topic}
        seeks = {assigned[p]: offset for p, offset in resume.items() if p in assigned}
        if seeks:
            log.info("fold: records past the read position; seeking back %s", seeks)
            self.stats["resought"] += len(seeks)
            try:
                await consumer.seek_wait(seeks)
            except Exception:  # revoked meanwhile: the next owner places it from the table
                log.info("fold: seek back failed", exc_info=True)


# --- the fold under faust: a record let go without a commit --------------------------------

def _release_unread(consumer: Any, message: Any) -> None:
    """Let go of a record without offering its offset for commit (it is read again)."""
    with ack_lock:
        message.acked = True  # every later ack of it is a no-op
    consumer._unacked_messages.discard(message)
