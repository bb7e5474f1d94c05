"""Kafka pipeline benchmark (issue: streaming pipeline). `python -m bench pipeline`.

Everything runs against ONE noida-db broker started for the suite on 127.0.0.1 (a free port,
tests/integration/brokers.py), consumer-group session timeout 6 s / heartbeat 1 s, RECALL_SHARDS=8
(the default: 8 partitions per topic, 8 index shards). Workers are real
`python -m streams.kafka.worker` subprocesses (tests/integration/kafkaio.py `start_worker`), each
with its own data dir; broker and workers are stopped in `finally`. Sizes scale with
RECALL_BENCH_SCALE (1 → the sizes below; metric suffixes name the real sizes).

Corpus: bench/corpus.py `session_events` (TextGen seed 23, compaction whenever the surface holds
120 nodes), native JSONL lines: header first, then events in seq order, key = session id,
published with plain aiokafka (linger 5 ms, acks=1) session after session, as `recall ingest`
publishes them.

1. Throughput, topic prefix A: 100 sessions × 250 events = N = 25,000 events (+100 headers) are
   produced to `<A>.events` before any worker exists.
   - `raw_consume_events_per_s`: baseline. One plain AIOKafkaConsumer (no group, all 8 partitions
     assigned, seek to beginning, default fetch sizes) reads all N + 100 records and
     `orjson.loads` each value; N ÷ (wall time from the first `getmany` to the last record).
     Median of 3 reads, on the idle broker, before the worker starts.
   - `pipeline_events_per_s`: ONE worker with roles fold + index
     (`--role fold --role index`). Window start = the CreateTime (producer wall clock, same host)
     of the earliest record on `<A>.documents`, i.e. when the fold emitted its first document
     (so faust/consumer-group startup is excluded; it is reported as `pipeline_startup_s`, worker
     spawn → first document). Window end = the first poll (every 50 ms, read-only sqlite3
     `SELECT count(*) FROM events` over the worker's 8 shard files) that sees all N events rows.
     N ÷ window. Includes: faust consume, fold (validation, digests, surface plan), document
     produce + acks, fold-table writes to the changelog, the index consumer's fetch, decode and
     SQLite/FTS5 shard transactions — all in the one worker process, sharing 2 cores with the
     broker and this script's polling.
   - `pipeline_ratio_vs_raw_consume` = pipeline_events_per_s ÷ raw_consume_events_per_s
     (goal ≥ 0.5).
2. Latency, topic prefix B: a worker with all roles (fold, index, query) over 20 sessions × 100
   events, waited on until every event is indexed, then warmed up with 5 queries. Then 50 times
   (at any scale): publish ONE new `user/message` append (seq = the session's next seq, a text with
   a word that occurs nowhere else) to `<B>.events` for one of the 20 sessions (round robin), and
   call `Recall.connect(...).search_events(session_id, word)` in a loop (2 ms apart) until it
   returns a hit. Latency = time before `send` → return of the first call with a hit (includes
   produce + ack, fold batch wait (`within` 50 ms), document produce, index fetch + transaction,
   and the request/reply round trip of the successful query over requests → shard-requests →
   replies). 100 ms pause between probes. `ingest_to_searchable_p50_ms` / `_p99_ms` are
   nearest-rank percentiles of the 50 (goal ≤ 250 / ≤ 1000 ms); `_max_ms` too.
3. Changelog, same worker and prefix B, after the latency probes: one session of 1,000 events and
   one of 50,000 events (bench/corpus.py defaults: compaction at 300 surface nodes) are
   published; once every event is indexed and the latest meta record of each session in
   `Topics.of(settings).changelog` says `n` = its event count, the whole changelog is read back
   from the beginning with a plain consumer and `len(key) + len(value)` (tombstones: key only)
   is summed over the records whose key starts with `<session id>\\0` (meta, pages, header,
   digests). `changelog_bytes_per_event_<size>` = that sum ÷ the session's events. The worker
   folds in batches (take_events 500), so a session's keys are written once per batch it
   appears in, not once per event. The fold's read-position records (`\\0next\\0<partition>`, one
   per partition per batch, shared by every session of the partition) are not in the sum.

4. Reindex and replay (issue: replay and reindex), prefix A after step 1: ONE worker with all roles
   on the step-1 worker's data dir (generation 1 already indexed). `Recall.reindex()` is timed
   from the call to its reply: the job folds all of `<A>.events` into generation 2 with plain
   aiokafka (documents + changelog + fold-group offsets), waits until the index role has
   indexed generation 2's documents, publishes the swap, waits until the worker has restarted
   into generation 2 and answers from it, then takes the index digest. `reindex_events_per_s` =
   N ÷ that time. Then `Recall.replay()`, timed the same way: generation 3 is made live at
   once, the worker restarts, its faust fold re-reads `<A>.events` from the earliest offsets and
   the index role rebuilds every shard; the job returns when both groups have committed the
   topic ends. `replay_events_per_s` = N ÷ time. The three generations' digests must be equal
   or the suite fails. `*_ratio_vs_pipeline` divide by step 1's `pipeline_events_per_s`.

Caveat, measured here (2026-12-02): noida-db 0.2.3 answers a fetch for partitions without new
data AT ONCE, ignoring `fetch_max_wait_ms` and `fetch_min_bytes` (an idle aiokafka consumer sent
~1.4–2.5k fetch requests/s and used 70–85 % of a core). Every consumer in the worker (faust's,
the indexer's, the query coordinator's) therefore spins while it waits, so all numbers above
include that CPU on a 2-core box; a broker that long-polls (Kafka) would not charge it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.corpus import TextGen, session_events
from bench.search_corpus import fresh_dir, percentile, scale, size_name
from streams.facade import Recall
from streams.settings import Settings
from streams.topics import Topics, ensure_topics
from tests.integration.brokers import Broker, start_broker, stop_broker
from tests.integration.kafkaio import WorkerProcess, produce, start_worker

SHARDS = 8
SESSION_TIMEOUT_S = 6.0
HEARTBEAT_S = 1.0
T0 = 1_700_000_000_000
COMPACT_AT = 120
THROUGHPUT_SESSIONS = 100
THROUGHPUT_EVENTS_PER_SESSION = 250
LATENCY_SESSIONS = 20
LATENCY_EVENTS_PER_SESSION = 100
LATENCY_PROBES = 50
CHANGELOG_SIZES = (1_000, 50_000)
#: Seconds any wait for the pipeline may take before the suite fails (with the worker's log).
WAIT_TIMEOUT_S = 300.0


# --- corpus and Kafka helpers --------------------------------------------------------------------


def header(sid: str, index: int) -> dict[str, Any]:
    return {"type": "session", "version": 0, "id": sid, "createdAt": T0 + index * 1000,
            "cwd": f"/home/dev/project{index % 10}"}


def session_records(sid: str, index: int, events: int, gen: TextGen, *,
                    compact_at: int = COMPACT_AT) -> list[tuple[bytes, bytes]]:
    key = sid.encode()
    out = [(key, orjson.dumps(header(sid, index)))]
    out.extend((key, orjson.dumps(e)) for e in session_events(
        sid, events, gen, t0=T0 + index * 10_000_000, compact_at=compact_at))
    return out


@contextlib.asynccontextmanager
async def from_beginning(bootstrap: str,
                         topic: str) -> AsyncIterator[tuple[AIOKafkaConsumer, list[TopicPartition]]]:
    """A group-less consumer assigned every partition of `topic`, at its beginning."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(SHARDS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        yield consumer, tps
    finally:
        await consumer.stop()


async def raw_consume(bootstrap: str, topic: str, expect: int) -> float:
    """Seconds to consume `expect` lines of `topic` from the beginning + orjson.loads each (a
    record may be a segment of lines)."""
    async with from_beginning(bootstrap, topic) as (consumer, _):
        seen = 0
        loads = orjson.loads
        start = time.perf_counter()
        while seen < expect:
            batches = await consumer.getmany(timeout_ms=1000)
            if not batches and time.perf_counter() - start > 60:
                raise RuntimeError(f"raw consume saw {seen}/{expect} lines")
            for messages in batches.values():
                for msg in messages:
                    for line in msg.value.split(b"\n"):
                        loads(line)
                        seen += 1
        return time.perf_counter() - start


async def read_all(bootstrap: str, topic: str) -> list[Any]:
    """Every record of `topic` (all partitions) up to the end offsets at call time."""
    async with from_beginning(bootstrap, topic) as (consumer, tps):
        ends = await consumer.end_offsets(tps)
        out: list[Any] = []
        pending = {tp for tp in tps if ends[tp] > 0}
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for tp, messages in batches.items():
                out.extend(messages)
                if messages[-1].offset + 1 >= ends[tp]:
                    pending.discard(tp)
        if pending:
            raise RuntimeError(f"could not read {topic} to its end: {pending}")
        return out


async def first_timestamp_ms(bootstrap: str, topic: str) -> int:
    """The smallest timestamp among the first record of each non-empty partition."""
    async with from_beginning(bootstrap, topic) as (consumer, tps):
        ends = await consumer.end_offsets(tps)
        pending = {tp for tp in tps if ends[tp] > 0}
        first: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=SHARDS * 50)
            for tp, messages in batches.items():
                if tp in pending and messages:
                    first[tp] = messages[0].timestamp
                    pending.discard(tp)
                    consumer.pause(tp)
        return min(first.values())


class ShardCounter:
    """Read-only count of the events rows in a worker's shard files (never writes them)."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "kafka-index"
        self.conns: list[sqlite3.Connection] = []

    def _open(self) -> bool:
        if len(self.conns) == SHARDS:
            return True
        paths = sorted(self.root.glob("shard-*.sqlite")) if self.root.exists() else []
        if len(paths) < SHARDS:
            return False
        try:
            for path in paths:
                conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
                conn.execute("PRAGMA query_only = 1")
                conn.execute("SELECT count(*) FROM events").fetchone()
                self.conns.append(conn)
        except sqlite3.Error:
            self.close()
            return False
        return True

    def count(self, session_id: str | None = None) -> int:
        if not self._open():
            return 0
        total = 0
        for conn in self.conns:
            try:
                if session_id is None:
                    row = conn.execute("SELECT count(*) FROM events").fetchone()
                else:
                    row = conn.execute("SELECT count(*) FROM events WHERE session_id = ?",
                                       (session_id,)).fetchone()
            except sqlite3.OperationalError:
                return 0  # schema not created yet
            total += int(row[0])
        return total

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        self.conns = []


def wait_until(predicate: Any, worker: WorkerProcess, what: str, *, poll_s: float = 0.05,
               timeout_s: float = WAIT_TIMEOUT_S) -> float:
    """Poll until `predicate()` is true; return time.time() of the successful poll."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return time.time()
        if worker.process.poll() is not None:
            raise RuntimeError(f"worker exited ({worker.process.returncode}) waiting for {what}:"
                               f"\n{worker.log_tail()}")
        time.sleep(poll_s)
    raise RuntimeError(f"timed out waiting for {what}\n{worker.log_tail()}")


# --- the suite -----------------------------------------------------------------------------------


class Suite:
    def __init__(self, broker: Broker, work: Path) -> None:
        self.broker = broker
        self.work = work
        self.workers: list[WorkerProcess] = []
        self.last_throughput: tuple[str, int] = ("", 0)

    def env(self, prefix: str, data_dir: Path) -> dict[str, Any]:
        return {"RECALL_BROKER": self.broker.url, "RECALL_TOPIC_PREFIX": prefix,
                "RECALL_SHARDS": SHARDS, "RECALL_SESSION_TIMEOUT_S": SESSION_TIMEOUT_S,
                "RECALL_HEARTBEAT_S": HEARTBEAT_S, "RECALL_DATA_DIR": data_dir}

    def settings(self, prefix: str, data_dir: Path) -> Settings:
        return Settings(broker=self.broker.url, topic_prefix=prefix, shards=SHARDS,
                        session_timeout_s=SESSION_TIMEOUT_S, heartbeat_s=HEARTBEAT_S,
                        data_dir=data_dir)

    def worker(self, prefix: str, data_dir: Path, roles: Sequence[str]) -> WorkerProcess:
        w = start_worker(self.broker, self.env(prefix, data_dir),
                         self.work / f"worker-{prefix}.log", tuple(roles))
        self.workers.append(w)
        return w

    def stop_workers(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []

    # 1. throughput ---------------------------------------------------------------------------

    def throughput(self, sessions: int, per_session: int) -> dict[str, Any]:
        prefix = f"bpa{uuid.uuid4().hex[:8]}"
        topics = Topics(prefix, SHARDS)
        bootstrap = self.broker.bootstrap
        gen = TextGen(23)
        records: list[tuple[bytes, bytes]] = []
        for i in range(sessions):
            records.extend(session_records(f"tp-{i:05d}", i, per_session, gen))
        n_events = sessions * per_session
        asyncio.run(ensure_topics(bootstrap, topics))
        start = time.perf_counter()
        asyncio.run(produce(bootstrap, topics.events, records))
        produce_s = time.perf_counter() - start
        del records
        raw = [asyncio.run(raw_consume(bootstrap, topics.events, n_events + sessions))
               for _ in range(3)]
        raw_rate = n_events / statistics.median(raw)

        data_dir = self.work / f"data-{prefix}"
        counter = ShardCounter(data_dir)
        spawned = time.time()
        worker = self.worker(prefix, data_dir, ("fold", "index"))
        try:
            done = wait_until(lambda: counter.count() >= n_events, worker,
                              f"{n_events} events indexed")
        finally:
            counter.close()
        first_doc = asyncio.run(first_timestamp_ms(bootstrap, topics.documents)) / 1000
        self.stop_workers()
        rate = n_events / (done - first_doc)
        self.last_throughput = (prefix, n_events)
        return {
            "pipeline_ratio_vs_raw_consume": round(rate / raw_rate, 4),
            "pipeline_events_per_s": round(rate),
            "raw_consume_events_per_s": round(raw_rate),
            "pipeline_events": n_events,
            "pipeline_sessions": sessions,
            "pipeline_startup_s": round(first_doc - spawned, 2),
            "pipeline_produce_events_per_s": round(n_events / produce_s),
        }

    # 4. reindex and replay ------------------------------------------------------------------

    def jobs(self) -> dict[str, Any]:
        """Reindex, then replay, the throughput corpus (prefix A, generation 1 already built)."""
        prefix, n_events = self.last_throughput
        data_dir = self.work / f"data-{prefix}"  # the throughput worker's: same id, same shards
        worker = self.worker(prefix, data_dir, ("fold", "index", "query"))
        settings = self.settings(prefix, self.work / f"client-{prefix}")
        try:
            with Recall.connect(self.broker.url, settings=settings) as recall:
                wait_until(lambda: _answers(recall), worker, "the query role")
                before = recall.index_digest()
                start = time.perf_counter()
                reindexed = recall.reindex()
                reindex_s = time.perf_counter() - start
                start = time.perf_counter()
                replayed = recall.replay()
                replay_s = time.perf_counter() - start
            if not before["digest"] == reindexed["digest"] == replayed["digest"]:
                raise RuntimeError(f"digests differ: {before} {reindexed} {replayed}")
        finally:
            self.stop_workers()
        return {
            "reindex_events_per_s": round(n_events / reindex_s),
            "replay_events_per_s": round(n_events / replay_s),
            "reindex_s": round(reindex_s, 2),
            "replay_s": round(replay_s, 2),
        }

    # 2. latency and 3. changelog -------------------------------------------------------------

    def latency_and_changelog(self, sessions: int, per_session: int, probes: int,
                              changelog_sizes: Sequence[int]) -> dict[str, Any]:
        prefix = f"bpb{uuid.uuid4().hex[:8]}"
        topics = Topics(prefix, SHARDS)
        bootstrap = self.broker.bootstrap
        gen = TextGen(29)
        sids = [f"lat-{i:03d}" for i in range(sessions)]
        records: list[tuple[bytes, bytes]] = []
        for i, sid in enumerate(sids):
            records.extend(session_records(sid, i, per_session, gen))
        asyncio.run(ensure_topics(bootstrap, topics))
        asyncio.run(produce(bootstrap, topics.events, records))
        data_dir = self.work / f"data-{prefix}"
        counter = ShardCounter(data_dir)
        worker = self.worker(prefix, data_dir, ("fold", "index", "query"))
        results: dict[str, Any] = {}
        try:
            wait_until(lambda: counter.count() >= sessions * per_session, worker, "seed indexed")
            settings = self.settings(prefix, data_dir / "client")
            with Recall.connect(self.broker.url, settings=settings) as recall:
                for sid in sids[:5]:  # warm-up: coordinator, shard owners, reply partition
                    recall.search_events(sid, "zzzwarmup")
                results.update(self._probe(recall, topics, sids, per_session, probes, worker))
            results.update(self._changelog(topics, counter, worker, changelog_sizes))
        finally:
            counter.close()
            self.stop_workers()
        return results

    def _probe(self, recall: Recall, topics: Topics, sids: Sequence[str], per_session: int,
               probes: int, worker: WorkerProcess) -> dict[str, Any]:
        next_seq = dict.fromkeys(sids, per_session)
        latencies: list[float] = []
        polls = 0

        async def open_producer() -> AIOKafkaProducer:
            producer = AIOKafkaProducer(bootstrap_servers=self.broker.bootstrap, linger_ms=0)
            await producer.start()
            return producer

        loop = asyncio.new_event_loop()
        producer = loop.run_until_complete(open_producer())
        try:
            for i in range(probes):
                sid = sids[i % len(sids)]
                seq = next_seq[sid]
                next_seq[sid] += 1
                word = f"probe{i:03d}x{uuid.uuid4().hex[:6]}"
                event = {"type": "user/message", "seq": seq, "time": T0 + 10**9 + i * 1000,
                         "data": {"id": f"probe-{i}", "role": "user", "source": {"kind": "user"},
                                  "content": [{"type": "text", "text": f"latency {word} check"}]},
                         "surfaceOp": "append"}
                value = orjson.dumps(event)
                start = time.perf_counter()
                loop.run_until_complete(producer.send_and_wait(topics.events, value,
                                                               key=sid.encode()))
                deadline = start + 30
                while True:
                    polls += 1
                    page = recall.search_events(sid, word)
                    if page.get("items"):
                        latencies.append(time.perf_counter() - start)
                        break
                    if time.perf_counter() > deadline:
                        raise RuntimeError(f"probe {i} not searchable after 30 s\n"
                                           f"{worker.log_tail()}")
                    time.sleep(0.002)
                time.sleep(0.1)
        finally:
            loop.run_until_complete(producer.stop())
            loop.close()
        return {
            "ingest_to_searchable_p50_ms": round(percentile(latencies, 50) * 1000, 1),
            "ingest_to_searchable_p99_ms": round(percentile(latencies, 99) * 1000, 1),
            "ingest_to_searchable_max_ms": round(max(latencies) * 1000, 1),
            "ingest_to_searchable_probes": len(latencies),
            "ingest_to_searchable_polls_per_probe": round(polls / len(latencies), 1),
        }

    def _changelog(self, topics: Topics, counter: ShardCounter, worker: WorkerProcess,
                   sizes: Sequence[int]) -> dict[str, Any]:
        bootstrap = self.broker.bootstrap
        gen = TextGen(31)
        sids = {f"changelog-{size}": size for size in sizes}
        records: list[tuple[bytes, bytes]] = []
        for i, (sid, size) in enumerate(sids.items()):
            records.extend(session_records(sid, 1000 + i, size, gen, compact_at=300))
        asyncio.run(produce(bootstrap, topics.events, records))
        del records
        for sid, size in sids.items():
            wait_until(lambda s=sid, n=size: counter.count(s) >= n, worker,
                       f"{sid} indexed", poll_s=0.2)
        # The fold writes the table after the batch's document acks: wait for the final metas.
        deadline = time.monotonic() + 60
        while True:
            records_out = asyncio.run(read_all(bootstrap, topics.changelog))
            meta_n: dict[str, int] = {}
            sums = dict.fromkeys(sids, 0)
            counts = dict.fromkeys(sids, 0)
            for msg in records_out:
                key = bytes(msg.key or b"")
                sid, _, suffix = key.decode("utf-8", "replace").partition("\x00")
                if sid not in sums:
                    continue
                sums[sid] += len(key) + len(msg.value or b"")
                counts[sid] += 1
                if suffix == "m" and msg.value:
                    meta_n[sid] = int(orjson.loads(msg.value)["n"])
            if all(meta_n.get(sid) == size for sid, size in sids.items()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"changelog metas {meta_n} never reached {sids}")
            time.sleep(0.5)
        out: dict[str, Any] = {}
        for sid, size in sids.items():
            name = size_name(size)
            out[f"changelog_bytes_per_event_{name}"] = round(sums[sid] / size, 1)
            out[f"changelog_records_per_event_{name}"] = round(counts[sid] / size, 3)
        return out


def _answers(recall: Recall) -> bool:
    try:
        recall.index_generation()
        return True
    except Exception:
        return False


def run() -> dict[str, Any]:
    s = scale()
    work = fresh_dir(f"pipeline-{os.getpid()}")
    broker = start_broker("noida", work)
    suite = Suite(broker, work)
    results: dict[str, Any] = {}
    try:
        per = THROUGHPUT_EVENTS_PER_SESSION
        results.update(suite.throughput(max(4, round(THROUGHPUT_SESSIONS * s)), per))
        results.update(suite.jobs())
        results["reindex_ratio_vs_pipeline"] = round(
            results["reindex_events_per_s"] / results["pipeline_events_per_s"], 2)
        results["replay_ratio_vs_pipeline"] = round(
            results["replay_events_per_s"] / results["pipeline_events_per_s"], 2)
        results.update(suite.latency_and_changelog(
            LATENCY_SESSIONS, LATENCY_EVENTS_PER_SESSION, LATENCY_PROBES,
            [max(1000, round(n * min(1.0, s))) if n > 1000 else n for n in CHANGELOG_SIZES]))
    finally:
        suite.stop_workers()
        stop_broker(broker)
        shutil.rmtree(work, ignore_errors=True)  # broker log + data, worker data (~300 MB)
    return results
