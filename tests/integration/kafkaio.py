"""Test support: produce to and read from topics with plain aiokafka, and run worker processes."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from tests.integration.brokers import Broker

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


async def topic_names(bootstrap: str) -> set[str]:
    """The topics the broker lists."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def group_members(bootstrap: str, group: str) -> int:
    """How many members the consumer group `group` has now."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        # raw DescribeGroups responses: groups of (error, group id, state, protocol type,
        # protocol, members, ...)
        return sum(len(described[5]) for response in await admin.describe_consumer_groups([group])
                   for described in response.groups)
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes]]) -> None:
    """Send in order and wait for every ack (the default murmur2 partitioner, as faust uses)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=value, key=key) for key, value in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def read_topic(bootstrap: str, topic: str, *, expect: int, timeout_s: float = 30.0,
                     settle_s: float = 0.0, partitions: int = 4,
                     worker: WorkerProcess | None = None, distinct: bool = True,
                     count: Callable[[list[Record]], int] | None = None) -> list[Record]:
    """Read `topic` from the beginning until `expect` records arrived (or the timeout), then
    keep reading `settle_s` longer so unexpected extra records are seen too. With `distinct`,
    records count once per key: keys are unique per fact on our output topics, and replays
    repeat a key. `count` replaces that rule (how many of what the caller waits for)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                fetch_max_wait_ms=50, auto_offset_reset="earliest")
    await consumer.start()
    out: list[Record] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        settle_until: float | None = None
        while loop.time() < deadline:
            seen = (count(out) if count is not None
                    else len({r.key for r in out}) if distinct else len(out))
            if settle_until is None and seen >= expect:
                settle_until = loop.time() + settle_s
            if settle_until is not None and loop.time() >= settle_until:
                break
            if worker is not None and worker.process.poll() is not None:
                raise AssertionError(f"worker exited with {worker.process.returncode}:\n"
                                     f"{worker.log_tail()}")
            batches = await consumer.getmany(timeout_ms=100)
            for tp, messages in batches.items():
                out.extend(Record(tp.topic, tp.partition, m.offset, m.key, m.value)
                           for m in messages)
    finally:
        await consumer.stop()
    return out


async def read_documents(bootstrap: str, topic: str, *, expect: int, timeout_s: float = 30.0,
                         settle_s: float = 0.0, partitions: int = 4,
                         worker: WorkerProcess | None = None) -> list[Record]:
    """The documents of a documents topic, one Record per document (a topic record carries a
    session's documents as JSON lines): `key` is the document's key (`sessionId:seq`), `value`
    its line, `offset` its record's. Reads until `expect` distinct documents arrived."""
    from streams.runtime.kafka.codec import decode_documents, document_key

    def expand(records: list[Record]) -> list[Record]:
        out = []
        for r in records:
            for _, line, document in decode_documents(r.value):
                if isinstance(document, Exception):
                    raise AssertionError(f"an undecodable document at {r}: {document}")
                out.append(Record(r.topic, r.partition, r.offset, document_key(document), line))
        return out

    records = await read_topic(bootstrap, topic, expect=expect, timeout_s=timeout_s,
                               settle_s=settle_s, partitions=partitions, worker=worker,
                               count=lambda rs: len({r.key for r in expand(rs)}))
    return expand(records)


async def commit_group(bootstrap: str, group: str, topic: str,
                       ends: dict[int, int]) -> dict[Any, int]:
    """Commit `group`'s offsets at `ends` (partition -> offset) of `topic`, as a commit that ran
    ahead of the group's work would leave them, from outside the group (which has no member
    now); returns what the group then has committed."""
    tps = [TopicPartition(topic, p) for p in sorted(ends)]
    offsets = {tp: OffsetAndMetadata(ends[tp.partition], "") for tp in tps}
    outside = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                               enable_auto_commit=False)
    await outside.start()
    try:
        outside.assign(tps)
        await outside.commit(offsets)
        return {tp: await outside.committed(tp) for tp in tps}
    finally:
        await outside.stop()


@dataclass
class WorkerProcess:
    """A `python -m streams.runtime.kafka.worker` subprocess and its log."""

    process: subprocess.Popen[bytes]
    log_path: Path
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def respawn(self) -> None:
        """Start the same worker again (same data dir and worker id) after it died."""
        assert self.process.poll() is not None, "respawn only a dead worker"
        self.process = _spawn(self.command, self.env, self.log_path)
        self.started = time.monotonic()

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return int(self.process.returncode)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def worker_env(broker: Broker, settings_env: dict[str, Any]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env.update({k: str(v) for k, v in settings_env.items()})
    env["PYTHONPATH"] = str(REPO)
    return env


def start_worker(broker: Broker, settings_env: dict[str, Any], log_path: Path,
                 roles: tuple[str, ...] = ()) -> WorkerProcess:
    role_args = [arg for role in roles for arg in ("--role", role)]
    command = [sys.executable, "-m", "streams.runtime.kafka.worker",
               "--loglevel", os.environ.get("RECALL_TEST_WORKER_LOGLEVEL", "warning"), *role_args]
    env = worker_env(broker, settings_env)
    return WorkerProcess(_spawn(command, env, log_path), log_path, command, env)


def _spawn(command: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


async def _send_in_order(producer: Any, records: Iterable[tuple[str, dict[str, Any]]]) -> None:
    from streams.runtime.kafka.codec import encode_event_value

    for sid, line in records:
        await producer.send(sid, encode_event_value(line))
    await producer.flush()


def publish(recall: Any, records: Iterable[tuple[str, dict[str, Any]]]) -> None:
    """Produce (session id, header-or-event line) pairs to the events topic through the Kafka
    client's producer (streams.runtime.kafka.producer.EventProducer: each session's consecutive lines
    packed into segments), in order, as `recall ingest` does."""
    from streams.runtime.kafka.query import run_sync

    backend = recall.backend
    run_sync(backend.loop, _send_in_order(backend._producer_started(), list(records)), 60)


def indexed_shards(data: Path) -> set[int]:
    """The shards of a worker's data dir that hold at least one session."""
    owned = set()
    for path in sorted((data / "kafka-index").glob("shard-*.sqlite")):
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            try:
                if conn.execute("SELECT count(*) FROM sessions").fetchone()[0]:
                    owned.add(int(path.stem.split("-")[1]))
            except sqlite3.OperationalError:
                continue  # the worker is creating this shard right now
    return owned
