"""Integration (chaos): a replicated Apache Kafka cluster that loses brokers.

Three KRaft nodes (replication factor 3, min.insync.replicas 2), the runtime's topics made at
RF 3 / min ISR 2 (RECALL_KAFKA_REPLICATION_FACTOR, RECALL_KAFKA_MIN_INSYNC_REPLICAS) and the
events producer idempotent with acks=all (RECALL_KAFKA_IDEMPOTENT). kill -9 of the node leading
the events and the documents partitions during ingest, during a reindex and during a replay,
and a node stalled by SIGSTOP for longer than the consumer-group session timeout: afterwards no
event is lost or folded twice, the dead letters are unchanged, the index digest equals the
embedded runtime's for the same input, and queries were answered throughout. The longest gap
between two answered queries (the unavailability window) is printed and checked against a
bound.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from factories import fleet, write_fleet

from projections.errors import RecallError
from streams.core.settings import Settings
from streams.facade import Recall
from streams.runtime.kafka.topics import Topics, bootstrap_servers
from tests.integration.apache_kafka import KafkaCluster, start_cluster, stop_cluster
from tests.integration.brokers import Broker
from tests.integration.kafkaio import REPO, WorkerProcess, publish, start_worker, worker_env
from tests.integration.test_kafka_chaos import _parked
from tests.integration.test_kafka_contract import cli_env, wait_indexed
from tests.integration.test_kafka_jobs import _lineup, _wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.chaos, pytest.mark.cluster,
              pytest.mark.timeout(600)]

SHARDS = 4
#: The runtime creates every topic itself (partitions = shards, retention, compaction, RF). With
#: the broker's default auto-creation on, a metadata request for a topic not made yet (a worker
#: and a client starting together on three nodes) created the events topic with 1 partition and
#: the broker's defaults, and both failed with STREAM_TOPIC_SETUP.
NO_AUTO_CREATE = {"auto.create.topics.enable": "false"}
#: How soon the controller fences a dead or stalled node and moves its leaderships: by default a
#: broker is fenced 9 s (broker.session.timeout.ms) after its last heartbeat, and until then
#: clients keep asking the dead leader, so no query can be answered for at least that long.
#: docs/kafka.md's failover section recommends these for a production cluster too.
FAST_FAILOVER = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    # a follower that stops fetching leaves the ISR after this (30 s by default)
    "replica.lag.time.max.ms": "10000",
}
#: Longest gap between two answered queries the tests accept. The goal is 10 s; a shared
#: 2-core machine restarting a JVM stretches elections and the client's metadata refresh.
UNAVAILABLE_BOUND_S = 45.0
#: A stall longer than the workers' consumer-group session timeout and the broker's own
#: registration timeout (broker.session.timeout.ms, FAST_FAILOVER's).
STALL_S = 12.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    work = tmp_path_factory.mktemp("cluster")
    try:
        running = start_cluster(work / "apache", 3, replication_factor=3, min_insync_replicas=2,
                                extra={**NO_AUTO_CREATE, **FAST_FAILOVER})
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield running
    finally:
        for index in range(len(running.nodes)):
            if running.nodes[index].running():
                running.resume_node(index)  # a stopped JVM ignores SIGTERM
        stop_cluster(running)


@pytest.fixture
def whole(cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The cluster with every node up at the start and again at the end of a test."""
    _heal(cluster)
    yield cluster
    _heal(cluster)


def _heal(cluster: KafkaCluster) -> None:
    for index, node in enumerate(cluster.nodes):
        if node.running():
            cluster.resume_node(index)
        else:
            cluster.restart_node(index)
    cluster.wait_ready()


@pytest.fixture
def env(whole: KafkaCluster, tmp_path: Path) -> dict[str, Any]:
    return {
        "RECALL_BROKER": f"kafka://{whole.bootstrap}",
        "RECALL_TOPIC_PREFIX": f"f{uuid.uuid4().hex[:10]}",
        "RECALL_SHARDS": SHARDS,
        "RECALL_SESSION_TIMEOUT_S": Broker.session_timeout_s,
        "RECALL_HEARTBEAT_S": Broker.heartbeat_s,
        "RECALL_MAX_EVENT_BYTES": 4096,
        "RECALL_DATA_DIR": tmp_path / "data",
        "RECALL_KAFKA_REPLICATION_FACTOR": 3,
        "RECALL_KAFKA_MIN_INSYNC_REPLICAS": 2,
        "RECALL_KAFKA_IDEMPOTENT": "true",
    }


@pytest.fixture
def settings(env: dict[str, Any]) -> Settings:
    return Settings(
        broker=env["RECALL_BROKER"], topic_prefix=env["RECALL_TOPIC_PREFIX"], shards=SHARDS,
        session_timeout_s=Broker.session_timeout_s, heartbeat_s=Broker.heartbeat_s,
        max_event_bytes=4096,
        data_dir=env["RECALL_DATA_DIR"], kafka_replication_factor=3,
        kafka_min_insync_replicas=2, kafka_idempotent=True)


@pytest.fixture
def worker(whole: KafkaCluster, env: dict[str, Any], tmp_path: Path) -> Iterator[WorkerProcess]:
    """One worker of every role (fold, index, query)."""
    broker = Broker("apache", whole.bootstrap, whole.process, whole.log_path, whole)
    running = start_worker(broker, {**env, "RECALL_DATA_DIR": tmp_path / "data-0"},
                           tmp_path / "worker.log")
    yield running
    running.stop()


class _Asker(threading.Thread):
    """Asks one question in a loop from its own client (a short request deadline, so a lost
    request is retried soon); records every attempt: (start, end, error code or None)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True)
        self.settings = settings.model_copy(update={"request_timeout_s": 3.0})
        self.done = threading.Event()
        self.attempts: list[tuple[float, float, str | None]] = []

    def run(self) -> None:
        with Recall.connect(str(self.settings.broker), settings=self.settings) as recall:
            while not self.done.is_set():
                start = time.monotonic()
                try:
                    recall.search_sessions("needle3", limit=2)
                except RecallError as exc:
                    self.attempts.append((start, time.monotonic(), exc.code))
                    time.sleep(0.1)
                    continue
                except Exception as exc:  # not a coded error: named, and the asking goes on
                    self.attempts.append((start, time.monotonic(), f"uncoded {exc!r}"[:200]))
                    time.sleep(0.1)
                    continue
                self.attempts.append((start, time.monotonic(), None))
                time.sleep(0.05)

    def stop(self) -> tuple[float, float]:
        """The longest time without an answer (and when it began), from the first answer on."""
        self.done.set()
        self.join(60)
        marks = [end for _, end, error in self.attempts if error is None] + [time.monotonic()]
        return max(((b - a, a) for a, b in itertools.pairwise(marks)), default=(0.0, 0.0))

    def uncoded(self) -> list[str]:
        """Failures that were not a RecallError with a stable code."""
        return [error for *_, error in self.attempts if error and error.startswith("uncoded")]

    def summary(self, since: float) -> str:
        answered = sum(1 for *_, error in self.attempts if error is None)
        slow = [f"{start - since:+.1f}s took {end - start:.1f}s ({error or 'answered'})"
                for start, end, error in self.attempts if end - start > 2.0 or (
                    error or "").startswith("uncoded")]
        return (f"{answered} answers, {len(self.attempts) - answered} failed attempts; "
                f"slow attempts: {slow[:8]}")


def _report(what: str, asker: _Asker, kills: list[tuple[float, str]],
            capsys: pytest.CaptureFixture[str]) -> float:
    gap, began = asker.stop()
    since = kills[0][0] if kills else 0.0
    # the wall clock of the first fault, to read the workers' and brokers' logs against
    wall = time.strftime("%H:%M:%S", time.localtime(time.time() - (time.monotonic() - since)))
    line = (f"failover_unavailable_s[{what}] = {gap:.2f} (from {began - since:+.1f} s after the "
            f"first fault at {wall}; {asker.summary(since)}; faults: "
            f"{[f'{at - since:+.1f}s {fault}' for at, fault in kills]})")
    with capsys.disabled():  # the measured window belongs in `make chaos`'s output
        print(f"\n{line}")
    out = os.environ.get("RECALL_CHAOS_RESULTS")
    if out:  # `make chaos` collects the windows of every scenario here
        with open(out, "a") as results:
            results.write(orjson.dumps({"scenario": what, "unavailable_s": round(gap, 2),
                                        "detail": line}).decode() + "\n")
    return gap


def _leader(settings: Settings, topic: str, partition: int = 0) -> int:
    """Index (into cluster.nodes) of the node leading `topic`'s partition."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def ask() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers(str(settings.broker)),
                                    request_timeout_ms=5000)
        await admin.start()
        try:
            for _ in range(100):
                for info in await admin.describe_topics([topic]):
                    for p in info.get("partitions") or []:
                        if p["partition"] == partition and p["leader"] >= 0:
                            return int(p["leader"])
                await asyncio.sleep(0.2)
            raise AssertionError(f"{topic}[{partition}] has no leader")
        finally:
            await admin.close()

    return asyncio.run(ask()) - 1  # node ids are 1..N


def _kill_leader(cluster: KafkaCluster, settings: Settings, topic: str,
                 kills: list[tuple[float, str]]) -> int:
    index = _leader(settings, topic)
    cluster.kill_node(index)
    kills.append((time.monotonic(), f"kill -9 node {index + 1} (leader of {topic}[0])"))
    return index


def _expected(tmp_path: Path, logs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    with Recall.open(tmp_path / "clean", shards=SHARDS) as clean:
        clean.ingest(write_fleet(tmp_path / "logs", logs))
        return clean.index_digest()


def _waves(logs: dict[str, list[dict[str, Any]]], count: int) -> list[list[tuple[str, Any]]]:
    """Every session grows in every wave, interleaved across sessions as a fleet writes."""
    per = (len(next(iter(logs.values()))) - 1) // count
    waves: list[list[tuple[str, Any]]] = []
    for w in range(count):
        wave = [(sid, lines[0]) for sid, lines in logs.items()] if w == 0 else []
        for i in range(w * per, (w + 1) * per):
            wave += [(sid, lines[1 + i]) for sid, lines in logs.items()]
        waves.append(wave)
    return waves


def _settle(settings: Settings, logs: dict[str, list[dict[str, Any]]], worker: WorkerProcess,
            timeout_s: float = 240) -> dict[str, Any]:
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        wait_indexed(recall, {sid: len(lines) - 1 for sid, lines in logs.items()}, worker,
                     timeout_s)
        return recall.index_digest()


def _alive(worker: WorkerProcess) -> None:
    assert worker.process.poll() is None, f"the worker died:\n{worker.log_tail()}"


def test_killing_the_leaders_of_events_and_documents_during_ingest_loses_nothing(
        whole: KafkaCluster, settings: Settings, worker: WorkerProcess, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    logs = fleet(30, 40, prefix="ingest")
    expected = _expected(tmp_path, logs)
    topics = Topics.of(settings)
    kills: list[tuple[float, str]] = []
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        waves = _waves(logs, 20)
        publish(recall, waves[0])
        # the first wave is in (its headers and first events) before anything is killed
        _settle(settings, {sid: lines[:1 + 40 // 20] for sid, lines in logs.items()}, worker)
        asker = _Asker(settings)
        asker.start()
        first = second = -1
        for w, wave in enumerate(waves[1:], start=1):
            if w == 4:
                first = _kill_leader(whole, settings, topics.events, kills)
            if w == 9:
                whole.restart_node(first)
            if w == 12:
                whole.wait_ready()
                second = _kill_leader(whole, settings, topics.documents, kills)
            if w == 17:
                whole.restart_node(second)
            publish(recall, wave)
            time.sleep(0.3)
        whole.wait_ready()
        digest = _settle(settings, logs, worker)
    gap = _report("ingest", asker, kills, capsys)
    _alive(worker)
    assert digest == expected, worker.log_tail()
    assert digest["events"] == 30 * 40
    assert _parked(settings) == []
    assert asker.uncoded() == []
    assert gap <= UNAVAILABLE_BOUND_S, (gap, kills)


def _job(settings: Settings, env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "streams", "--broker", str(settings.broker),
                             name, "--json"], cwd=REPO, env={**env, **cli_env(settings)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_killing_leaders_during_a_reindex_and_a_replay_keeps_the_index_exact(
        whole: KafkaCluster, settings: Settings, env: dict[str, Any], worker: WorkerProcess,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = fleet(150, 40, prefix="jobs")
    expected = _expected(tmp_path, logs)
    broker = Broker("apache", whole.bootstrap, whole.process, whole.log_path, whole)
    job_env = worker_env(broker, env)
    kills: list[tuple[float, str]] = []
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        publish(recall, [(sid, line) for sid, lines in logs.items() for line in lines])
        assert _settle(settings, logs, worker) == expected
        letters = _parked(settings)
        asker = _Asker(settings)
        asker.start()
        for name, generation in (("reindex", 2), ("replay", 3)):
            job = _job(settings, job_env, name)
            _wait_for(lambda g=generation: _lineup(settings).newest() >= g, job)
            # the job folds the events topic into the new generation's documents
            first = _kill_leader(whole, settings, Topics.of(settings).events, kills)
            kills[-1] = (kills[-1][0], f"{kills[-1][1]} during {name}")
            assert job.poll() is None, job.communicate()
            time.sleep(2.0)
            whole.restart_node(first)
            whole.wait_ready()
            if job.poll() is None:
                _kill_leader(whole, settings, Topics.of(settings, generation).documents, kills)
                kills[-1] = (kills[-1][0], f"{kills[-1][1]} during {name}")
                time.sleep(2.0)
                _heal(whole)
            out, err = job.communicate(timeout=300)
            assert job.returncode == 0, (out + err).decode()[-4000:]
            result = orjson.loads(out)
            assert result["generation"] == f"gen-{generation:06d}", result
            assert result["digest"] == expected["digest"], result
            assert recall.index_digest() == expected
    gap = _report("reindex+replay", asker, kills, capsys)
    _alive(worker)
    assert _parked(settings) == letters
    assert asker.uncoded() == []
    assert gap <= UNAVAILABLE_BOUND_S, (gap, kills)


def test_a_broker_stalled_past_the_session_timeout_then_resumed_loses_nothing(
        whole: KafkaCluster, settings: Settings, worker: WorkerProcess, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    logs = fleet(30, 40, prefix="stall")
    expected = _expected(tmp_path, logs)
    kills: list[tuple[float, str]] = []
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        waves = _waves(logs, 20)
        publish(recall, waves[0])
        # the first wave is in (its headers and first events) before anything is killed
        _settle(settings, {sid: lines[:1 + 40 // 20] for sid, lines in logs.items()}, worker)
        asker = _Asker(settings)
        asker.start()
        resumed = threading.Event()

        def resume(index: int) -> None:
            whole.resume_node(index)
            kills.append((time.monotonic(), f"SIGCONT node {index + 1}"))
            resumed.set()

        for w, wave in enumerate(waves[1:], start=1):
            if w == 5:
                stalled = _leader(settings, Topics.of(settings).events)
                whole.pause_node(stalled)
                kills.append((time.monotonic(), f"SIGSTOP node {stalled + 1} (leader of "
                              "events[0])"))
                # on a timer: a publish may wait on the stalled leader meanwhile
                threading.Timer(STALL_S, resume, (stalled,)).start()
            publish(recall, wave)
            time.sleep(0.3)
        assert resumed.wait(STALL_S + 5)
        whole.wait_ready()
        digest = _settle(settings, logs, worker)
    gap = _report("stall", asker, kills, capsys)
    _alive(worker)
    assert digest == expected, worker.log_tail()
    assert _parked(settings) == []
    assert asker.uncoded() == []
    assert gap <= UNAVAILABLE_BOUND_S, (gap, kills)
