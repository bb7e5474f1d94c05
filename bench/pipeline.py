"""Kafka pipeline benchmark (issue 17: the pipeline at the speed of the embedded runtime).
`python -m bench pipeline`; RECALL_BENCH_BROKERS picks the brokers: `apache` (the default:
Apache Kafka, one KRaft node from the cache `make kafka` fills), `noida` (noida-db, pip-only),
or both (`apache,noida`).

One run per broker, each on a fresh broker process (tests/integration/brokers.py, 127.0.0.1, a
free port), consumer-group session timeout 6 s / heartbeat 1 s, RECALL_SHARDS=8. Workers are real `python -m streams.runtime.kafka.worker`
subprocesses (a supervisor and one process per role), each with its own data dir; everything is
stopped in `finally`. Metric names are the Apache Kafka run's; noida-db's carry `_noida`.
Sizes scale with RECALL_BENCH_SCALE (1 → the sizes below).

Corpus (the same for every measurement of a run): bench/corpus.py `session_events` (TextGen
seed 23, compaction whenever the surface holds 120 nodes): 800 sessions × 250 events =
N = 200,000 events (+800 headers), native JSONL, ~60 MB.

1. `embedded_ingest_events_per_s`: `Recall.open(fresh dir, shards=8).ingest(files)` over one
   JSONL file per session (written before the clock starts): N ÷ wall time, including the
   merge of the shards' FTS segments that ends the ingest (a Kafka index worker merges its own
   later, after 2 s without documents: outside the pipeline's window). Median of
   EMBEDDED_RUNS (3) fresh ingests (`_min`/`_max`: their spread; one run alone varied 29.5k–38k
   between two bench runs minutes apart; `embedded_ingest_cpu_s`: its CPU, median). The baseline of
   the `*_ratio_vs_embedded` metrics; measured in the same run just before the broker's
   measurements, so both share the machine's state. Its index digest is the expected answer;
   `embedded_index_digest_s` is that digest's time (a large index: shards re-folded by the
   digest helpers, indexer/digester.py, on both cores; the first digest starts them).
2. The corpus is produced to `<A>.events` as `recall ingest` produces it: each session's lines
   packed into segments (streams.runtime.kafka.producer.pack_segments: ≤ 64 KiB, so ~1 record per
   session here), 1 MiB zstd batches, acks awaited at the end (`pipeline_produce_events_per_s`).
3. `raw_consume_events_per_s`: one plain AIOKafkaConsumer (no group, all 8 partitions, from the
   beginning) reads every record and `orjson.loads` every line; N ÷ time from the first
   `getmany` to the last line. Median of 3, before any worker runs.
4. `pipeline_events_per_s`: ONE `recall worker` (all roles: fold, index, query processes).
   Window start = the CreateTime of the earliest record on `<A>.documents` (the fold's first
   output: startup is excluded and reported as `pipeline_startup_s`); window end = the first
   poll (every 50 ms, read-only sqlite3 over the worker's 8 shard files) that counts all N
   event rows. Includes everything: faust consume, fold, documents + changelog produce, the
   index role's consume and SQLite/FTS5 transactions, on 2 cores shared with the broker.
5. `idle_worker_cpu_percent`: the same worker, caught up, its digest read, then left alone
   for 20 s (settled: the last commits and stats lines, the consumers' idle ramp); then CPU
   seconds (utime+stime from /proc) of the supervisor and its role processes (the warm standby
   fold included) over 10 s, ÷ 10 s, in % of one core: the median of 3 consecutive windows
   (`idle_worker_cpu_percent_max`: the highest).
6. (after 8 and 9, on generation 5) `ingest_to_searchable_p50_ms` / `_p99_ms` / `_max_ms`: 50 times, ONE new `user/message`
   append (a word that occurs nowhere else) is produced for one of the sessions (round robin),
   then `Recall.connect(...).search_events(session, word)` is called in a loop (2 ms apart)
   until it returns a hit; latency = time before `send` → the first call with a hit
   (nearest-rank percentiles). 100 ms pause between probes.
7. (after 8 and 9, generation 5's changelog) `changelog_bytes_per_event_1k` / `_50k`: one session of 1,000 and one of 50,000 events
   (compaction at 300 nodes) are produced as segments; once indexed and each session's latest
   meta record says `n` = its event count, the changelog is read back and
   `len(key) + len(value)` summed over the session's records ÷ its events (`_records_per_event_`
   counts records). The partitions' read-position records are shared and not counted.
8. `reindex_events_per_s` = N ÷ `reindex_build_s`: from the `Recall.reindex()` call to the
   lineup naming the new generation live (the CreateTime of that `<p>.control` record; the
   job's fold of all of `<A>.events` — the corpus and the switch probes of earlier runs: steps
   6 and 7 come after the jobs — into the new generation's documents and changelog, and the
   index role's build of its shards beside the live generation's, overlapped). Median of
   REINDEX_RUNS (3) reindexes in a row (generations 2, 3, 4; `reindex_build_s_min`/`_max`:
   their spread, ±0.5 s between consecutive runs). The worker runs with
   RECALL_SNAPSHOT_RETENTION_S=1 (the least it takes) and each run waits until the generation it retired is deleted
   (its documents topic gone, ~15 s: once no index role reads it, streams.runtime.kafka.lineup
   TOPICS_KEPT_S), so every build starts from the same broker state: the
   events and the live generation (noida-db rewrites all it stores every ~2 s, so retired
   generations kept for the default 300 s made each later build slower). Where a build's CPU
   goes (medians over the runs; sampled every 0.25 s, from the call to the sample nearest the
   swap): `reindex_cpu_s_job` (this process: the job's fold), `reindex_cpu_s_worker` (the
   worker's processes: mostly the index role building the new shards), `reindex_cpu_s_broker`;
   `reindex_cpu_cores` = their sum ÷ the build time (near 2: the build is CPU-bound on this
   machine's two cores) and `reindex_broker_cpu_share` the broker's part of it. Compare with
   `embedded_ingest_cpu_s` (1: the embedded ingest's own CPU, both its threads). The fixed
   costs after it are reported on their own, as issue 17 asks: `generation_switch_s` (a
   watcher tails `<p>.control`; when it sees the lineup name the new generation live it produces
   one new session — header + one event with a unique word — and polls until the query role
   answers from the new generation AND finds that event, timed from the lineup record's
   CreateTime (a watcher's fetch may see it a fetch wait late): the fold role's switch, the index
   role and the query role's switch are all in it), and the digest every job's reply carries
   (`recall index digest`: it re-folds every session from the stored events — verification,
   not indexing; `index_digest_s` is the same digest asked once just before the reindexes).
   `reindex_s` is the whole call (build, switch, digest); both are medians over the runs
   (`generation_switch_s_max`: the slowest switch).
9. `replay_events_per_s` = N ÷ `replay_work_s`: `Recall.replay()` makes generation 5 live at
   once; the fold role restarts from the earliest offsets and the index role rebuilds every
   shard. `replay_startup_s`: from the call to the CreateTime of generation 5's first documents
   record (the fold role's restart: a fixed cost, like the pipeline's startup in 4);
   `replay_work_s`: from that record to the first poll (every 50 ms, read-only sqlite3 over the
   worker's generation-5 shard files) that counts all N event rows — the pipeline's window of 4,
   so the two rates compare like with like; `replay_work_until_committed_s` ends instead when the
   job's progress callback reports the index group's commits at the topic ends (the job looks
   every 50 ms, after its fold-group wait — faust commits on its own interval — and a read of
   the log ends: 0.7–1.2 s more here). `replay_s` is the whole call
   (startup, work, the query role's switch, the digest). Generation 1's digest must equal the
   embedded build's, each reindex's the index's before or after its switch probe, and the
   replay's the index's after the last probe, or the suite fails.
10. `pipeline_events_per_s_single_records`: the same corpus produced one line per record (as an
   external producer may write: plain aiokafka, uncompressed) to `<C>.events`, a fresh worker
   (all roles), measured as in 4. `raw_consume_events_per_s_single_records`: raw consume of
   that topic as in 3 (one event per record: the baseline the issue's 0.1 goal was set
   against, ~200k/s); `pipeline_ratio_vs_raw_consume_single_records` = 4 ÷ that.
11. (after 6 and 7, the worker idle, the broker holding the events and generation 5)
   `broker_quiet_cpu_cores`: the broker's CPU over UPKEEP_S with nothing written;
   `broker_trickle_cpu_cores`: the same while one 1-byte record is produced every 100 ms to a
   topic of its own. The broker's upkeep while anything changes: noida-db rewrites its whole
   data file (record batches as JSON arrays of byte values) every ~2 s while it is dirty.
   During a reindex that upkeep competes with the job and
   the index role for the same two cores.
Ratios: `pipeline_ratio_vs_embedded` (4 ÷ 1), `replay_ratio_vs_embedded`,
`reindex_ratio_vs_embedded`, `pipeline_ratio_vs_raw_consume` (4 ÷ 3: with segments raw
consume itself reads ~3× fewer records, so this baseline moved up; see 10 for the old one).
`reindex_cpu_ratio_vs_embedded`: the build's CPU in this process and the worker (job + index
role, the broker's left out) ÷ `embedded_ingest_cpu_s`: what the same work costs as a pipeline.
`reindex_ratio_vs_embedded_at_full_cores`: N ÷ (the build's CPU, broker included, ÷ the
machine's cores) ÷ the embedded rate: the ratio a build would reach with every core busy all
the time, the bound where broker and pipeline share this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import shutil
import sqlite3
import statistics
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.corpus import TextGen, session_events
from bench.search_corpus import fresh_dir, percentile, scale, size_name
from streams.core.settings import Settings
from streams.facade import Recall
from streams.runtime.kafka.fleet import LINEUP_KEY, Lineup, control_topic
from streams.runtime.kafka.producer import batching_producer, pack_segments
from streams.runtime.kafka.topics import Topics, ensure_topics
from tests.integration.brokers import Broker, start_broker, stop_broker
from tests.integration.kafkaio import WorkerProcess, produce, start_worker, topic_names

SHARDS = 8
#: Fresh embedded ingests measured for the baseline (its median).
EMBEDDED_RUNS = 3
#: Reindexes measured (generations 2, 3, 4; their median): one build varied 5.4–6.4 s between
#: consecutive runs on the same worker.
REINDEX_RUNS = 3
#: The generation the replay after them makes live.
REPLAY_GENERATION = 2 + REINDEX_RUNS
#: Retired generations are deleted as soon as no index role reads them any more (~15 s after
#: their switch), and each reindex waits for that: every build then starts from the
#: same broker state (the events, the live generation). noida-db rewrites its whole data file
#: every ~2 s while anything changes, so each retired documents topic kept (the default
#: window is 300 s) made each later build slower: 5.9, 6.4, 6.6 s in one run.
RETENTION_S = 1
T0 = 1_700_000_000_000
COMPACT_AT = 120
SESSIONS = 800
EVENTS_PER_SESSION = 250
LATENCY_PROBES = 50
CHANGELOG_SIZES = (1_000, 50_000)
IDLE_S = 10.0
IDLE_SETTLE_S = 20.0
IDLE_WINDOWS = 3
#: Step 11: one tiny record every UPKEEP_EVERY_S for UPKEEP_S (after UPKEEP_S quiet).
UPKEEP_S = 10.0
UPKEEP_EVERY_S = 0.1
UPKEEP_SETTLE_S = 5.0
#: The client's request timeout: a digest of the whole corpus (~1 s per 50k events on a quiet
#: machine before the digest helpers, several times that with the other sessions' load) outgrew
#: the default 30 s.
REQUEST_TIMEOUT_S = 180.0
#: Seconds any wait for the pipeline may take before the suite fails (with the worker's log).
WAIT_TIMEOUT_S = 600.0


# --- corpus and Kafka helpers --------------------------------------------------------------------


def header(sid: str, index: int) -> dict[str, Any]:
    return {"type": "session", "version": 0, "id": sid, "createdAt": T0 + index * 1000,
            "cwd": f"/home/dev/project{index % 10}"}


def session_lines(sid: str, index: int, events: int, gen: TextGen, *,
                  compact_at: int = COMPACT_AT) -> list[bytes]:
    out = [orjson.dumps(header(sid, index))]
    out.extend(orjson.dumps(e) for e in session_events(
        sid, events, gen, t0=T0 + index * 10_000_000, compact_at=compact_at))
    return out


def as_segments(corpus: dict[str, list[bytes]]) -> list[tuple[bytes, bytes]]:
    """What `recall ingest` sends: each session's lines packed into segments."""
    return [(sid.encode(), segment) for sid, lines in corpus.items()
            for segment in pack_segments(lines)]


async def produce_as_ingest(bootstrap: str, topic: str,
                            records: list[tuple[bytes, bytes]]) -> None:
    """Send with the producer settings of `recall ingest` (streams.runtime.kafka.producer: 1 MiB
    zstd-compressed batches, acks=all), awaiting every ack at the end."""
    producer = batching_producer(bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def as_single_records(corpus: dict[str, list[bytes]]) -> list[tuple[bytes, bytes]]:
    """What a producer writing one event per record sends."""
    return [(sid.encode(), line) for sid, lines in corpus.items() for line in lines]


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
    """Every record of `topic` (all partitions) up to its end as of the call."""
    async with from_beginning(bootstrap, topic) as (consumer, tps):
        ends = await consumer.end_offsets(tps)
        out: list[Any] = []
        pending = {tp for tp in tps if ends[tp] > 0}
        deadline = time.monotonic() + 120
        idle = 0
        while pending and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            idle = 0 if batches else idle + 1
            for tp, messages in batches.items():
                out.extend(messages)
                if messages[-1].offset + 1 >= ends[tp]:
                    pending.discard(tp)
            if idle > 4:  # nothing more comes: what arrived is the answer
                break
        return out


async def wait_deleted(bootstrap: str, topic: str, timeout_s: float = 60.0) -> None:
    """Wait until the broker no longer lists `topic` (a retired generation's, deleted by the
    worker's query role)."""
    deadline = time.monotonic() + timeout_s
    while topic in await topic_names(bootstrap):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic} was never deleted")
        await asyncio.sleep(0.5)


async def first_timestamp_ms(bootstrap: str, topic: str) -> int:
    """The smallest timestamp among the first record of each non-empty partition."""
    async with from_beginning(bootstrap, topic) as (consumer, tps):
        first: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + 30
        while len(first) < len(tps) and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=SHARDS * 50)
            if not batches and first:
                break
            for tp, messages in batches.items():
                if tp not in first and messages:
                    first[tp] = messages[0].timestamp
                    consumer.pause(tp)
        return min(first.values())


class ShardCounter:
    """Read-only count of the events rows in a worker's shard files (never writes them)."""

    def __init__(self, data_dir: Path, generation: int = 1) -> None:
        self.root = data_dir / ("kafka-index" if generation == 1 else
                                f"kafka-index-g{generation}")
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
                    row = conn.execute("SELECT coalesce(sum(event_count), 0) FROM sessions"
                                       " WHERE id = ?", (session_id,)).fetchone()
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


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by `pid` and its live descendants."""
    return trees_cpu_s([pid])[0]


def trees_cpu_s(pids: list[int]) -> list[float]:
    """`tree_cpu_s` of each of `pids`, from one scan of /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry.name))
                cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / ticks
    totals = []
    for pid in pids:
        total, todo = 0.0, [pid]
        while todo:
            current = todo.pop()
            total += cpu.get(current, 0.0)
            todo.extend(children.get(current, []))
        totals.append(total)
    return totals


# --- the suite -----------------------------------------------------------------------------------


class Suite:
    """Every measurement of one broker run."""

    def __init__(self, broker: Broker, work: Path, corpus: dict[str, list[bytes]],
                 files: list[Path]) -> None:
        self.broker = broker
        self.work = work
        self.corpus = corpus
        self.files = files
        self.events = sum(len(lines) - 1 for lines in corpus.values())
        self.workers: list[WorkerProcess] = []
        self.expected: dict[str, Any] = {}

    def env(self, prefix: str, data_dir: Path) -> dict[str, Any]:
        return {"RECALL_BROKER": self.broker.url, "RECALL_TOPIC_PREFIX": prefix,
                "RECALL_SHARDS": SHARDS, "RECALL_SESSION_TIMEOUT_S": self.broker.session_timeout_s,
                "RECALL_HEARTBEAT_S": self.broker.heartbeat_s, "RECALL_DATA_DIR": data_dir,
                "RECALL_SNAPSHOT_RETENTION_S": RETENTION_S}

    def settings(self, prefix: str, data_dir: Path) -> Settings:
        return Settings(broker=self.broker.url, topic_prefix=prefix, shards=SHARDS,
                        session_timeout_s=self.broker.session_timeout_s,
                        heartbeat_s=self.broker.heartbeat_s, data_dir=data_dir,
                        request_timeout_s=REQUEST_TIMEOUT_S, snapshot_retention_s=RETENTION_S)

    def worker(self, prefix: str, data_dir: Path) -> WorkerProcess:
        w = start_worker(self.broker, self.env(prefix, data_dir),
                         self.work / f"worker-{prefix}.log", ())
        self.workers.append(w)
        return w

    def stop_workers(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []

    # 1. the embedded baseline ----------------------------------------------------------------

    def embedded(self) -> dict[str, Any]:
        rates: list[float] = []
        cpu: list[float] = []
        digest_s = 0.0
        for run in range(EMBEDDED_RUNS):
            target = self.work / "embedded"
            shutil.rmtree(target, ignore_errors=True)
            gc.collect()
            start, cpu_start = time.perf_counter(), time.process_time()
            with Recall.open(target, shards=SHARDS) as recall:
                recall.ingest(self.files)
                rates.append(self.events / (time.perf_counter() - start))
                cpu.append(time.process_time() - cpu_start)
                if run == 0:
                    start = time.perf_counter()
                    self.expected = recall.index_digest()
                    digest_s = time.perf_counter() - start
            shutil.rmtree(target, ignore_errors=True)
        return {"embedded_ingest_events_per_s": round(statistics.median(rates)),
                "embedded_ingest_events_per_s_min": round(min(rates)),
                "embedded_ingest_events_per_s_max": round(max(rates)),
                "embedded_ingest_cpu_s": round(statistics.median(cpu), 2),
                "embedded_index_digest_s": round(digest_s, 2)}

    # 2.–9. one worker on the segment corpus --------------------------------------------------

    def pipeline(self) -> dict[str, Any]:
        prefix = f"bpa{uuid.uuid4().hex[:8]}"
        topics = Topics(prefix, SHARDS)
        bootstrap = self.broker.bootstrap
        records = as_segments(self.corpus)
        asyncio.run(ensure_topics(bootstrap, topics))
        start = time.perf_counter()
        asyncio.run(produce_as_ingest(bootstrap, topics.events, records))
        produce_s = time.perf_counter() - start
        lines = self.events + len(self.corpus)
        raw = [asyncio.run(raw_consume(bootstrap, topics.events, lines)) for _ in range(3)]
        raw_rate = self.events / statistics.median(raw)
        out: dict[str, Any] = {
            "pipeline_events": self.events, "pipeline_sessions": len(self.corpus),
            "pipeline_records": len(records),
            "pipeline_produce_events_per_s": round(self.events / produce_s),
            "raw_consume_events_per_s": round(raw_rate)}
        data_dir = self.work / f"data-{prefix}"
        rate, startup, worker = self._run_pipeline(prefix, data_dir)
        out.update({"pipeline_events_per_s": round(rate), "pipeline_startup_s": startup,
                    "pipeline_ratio_vs_raw_consume": round(rate / raw_rate, 4)})
        settings = self.settings(prefix, self.work / f"client-{prefix}")
        try:
            with Recall.connect(self.broker.url, settings=settings) as recall:
                wait_until(lambda: _answers(recall), worker, "the query role")
                digest = recall.index_digest()
                if digest != self.expected:
                    raise RuntimeError(f"pipeline digest {digest} != embedded {self.expected}")
                out.update(self._idle_cpu(worker))
                out.update(self._jobs(recall, settings, worker, data_dir))
                # the replay's generation is live now
                live = Topics(prefix, SHARDS, REPLAY_GENERATION)
                out.update(self._probe(recall, live, worker))
                out.update(self._changelog(live, ShardCounter(data_dir, REPLAY_GENERATION),
                                           worker))
                out.update(self._broker_upkeep(prefix))
        finally:
            self.stop_workers()
        return out

    def _run_pipeline(self, prefix: str, data_dir: Path) -> tuple[float, float, WorkerProcess]:
        counter = ShardCounter(data_dir)
        spawned = time.time()
        worker = self.worker(prefix, data_dir)
        try:
            done = wait_until(lambda: counter.count() >= self.events, worker,
                              f"{self.events} events indexed")
        finally:
            counter.close()
        first_doc = asyncio.run(first_timestamp_ms(self.broker.bootstrap,
                                                   Topics(prefix, SHARDS).documents)) / 1000
        return self.events / (done - first_doc), round(first_doc - spawned, 2), worker

    def _idle_cpu(self, worker: WorkerProcess) -> dict[str, Any]:
        # settled: the last batch's commits, stats lines and the consumers' idle ramp
        # (streams.runtime.kafka.seam: the fetch wait reaches its cap 2 s after the last record) are over
        time.sleep(IDLE_SETTLE_S)
        windows = []
        for _ in range(IDLE_WINDOWS):
            before = tree_cpu_s(worker.process.pid)
            time.sleep(IDLE_S)
            windows.append(100 * (tree_cpu_s(worker.process.pid) - before) / IDLE_S)
        return {"idle_worker_cpu_percent": round(statistics.median(windows), 2),
                "idle_worker_cpu_percent_max": round(max(windows), 2)}

    def _probe(self, recall: Recall, topics: Topics, worker: WorkerProcess) -> dict[str, Any]:
        sids = list(self.corpus)[:20]
        next_seq = dict.fromkeys(sids, EVENTS_PER_SESSION)
        for sid in sids[:5]:  # warm-up: coordinator, shard owners, reply partition
            recall.search_events(sid, "zzzwarmup")
        latencies: list[float] = []
        loop = asyncio.new_event_loop()
        producer = loop.run_until_complete(_producer(self.broker.bootstrap))
        try:
            for i in range(LATENCY_PROBES):
                sid = sids[i % len(sids)]
                seq = next_seq[sid]
                next_seq[sid] += 1
                word = f"probe{i:03d}x{uuid.uuid4().hex[:6]}"
                start = time.perf_counter()
                loop.run_until_complete(producer.send_and_wait(
                    topics.events, orjson.dumps(_user_event(seq, T0 + 10**9 + i * 1000, word)),
                    key=sid.encode()))
                deadline = start + 30
                while not recall.search_events(sid, word).get("items"):
                    if time.perf_counter() > deadline:
                        raise RuntimeError(f"probe {i} not searchable after 30 s\n"
                                           f"{worker.log_tail()}")
                    time.sleep(0.002)
                latencies.append(time.perf_counter() - start)
                time.sleep(0.1)
        finally:
            loop.run_until_complete(producer.stop())
            loop.close()
        return {
            "ingest_to_searchable_p50_ms": round(percentile(latencies, 50) * 1000, 1),
            "ingest_to_searchable_p99_ms": round(percentile(latencies, 99) * 1000, 1),
            "ingest_to_searchable_max_ms": round(max(latencies) * 1000, 1),
        }

    def _changelog(self, topics: Topics, counter: ShardCounter,
                   worker: WorkerProcess) -> dict[str, Any]:
        bootstrap = self.broker.bootstrap
        gen = TextGen(31)
        sids = {f"changelog-{size}": size for size in CHANGELOG_SIZES}
        corpus = {sid: session_lines(sid, 5000 + i, size, gen, compact_at=300)
                  for i, (sid, size) in enumerate(sids.items())}
        asyncio.run(produce_as_ingest(bootstrap, topics.events, as_segments(corpus)))
        try:
            for sid, size in sids.items():
                wait_until(lambda s=sid, n=size: counter.count(s) >= n, worker,
                           f"{sid} indexed", poll_s=0.2)
        finally:
            counter.close()
        # The fold writes the table after the batch's document acks: wait for the final metas.
        deadline = time.monotonic() + 60
        while True:
            meta_n: dict[str, int] = {}
            sums = dict.fromkeys(sids, 0)
            counts = dict.fromkeys(sids, 0)
            for msg in asyncio.run(read_all(bootstrap, topics.changelog)):
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

    def _jobs(self, recall: Recall, settings: Settings, worker: WorkerProcess,
              data_dir: Path) -> dict[str, Any]:
        start = time.perf_counter()
        before = recall.index_digest()
        digest_s = time.perf_counter() - start
        builds, switches, calls = [], [], []
        cpu: list[tuple[float, float, float]] = []  # (job, worker, broker) CPU-s per build
        settled = before  # the index after the last job and its switch probe
        for run in range(REINDEX_RUNS):
            switch = _SwitchWatch(self.broker.bootstrap, settings, target=2 + run)
            sampler = _CpuSampler(worker, self.broker)
            sampler.start()
            switch.start()
            start = time.perf_counter()
            reindexed = recall.reindex()
            calls.append(time.perf_counter() - start)
            switch.join(120)
            sampler.stop()
            if switch.error is not None:
                raise RuntimeError(f"generation switch probe failed: {switch.error}\n"
                                   f"{worker.log_tail()}")
            builds.append(switch.swapped - switch.started)
            switches.append(switch.elapsed)
            cpu.append(sampler.at(switch.swapped))
            # the switch probe's session is produced at the swap: the reindex's digest (read
            # once the query role serves the new generation) may or may not have it yet
            after = recall.index_digest()
            if reindexed["digest"] not in (settled["digest"], after["digest"]) or (
                    after["sessions"], after["events"]) != (settled["sessions"] + 1,
                                                           settled["events"] + 1):
                raise RuntimeError(f"reindex {run + 1}: digests differ: {settled} "
                                   f"{reindexed} {after}")
            settled = after
            asyncio.run(wait_deleted(self.broker.bootstrap,
                                     Topics(settings.topic_prefix, SHARDS, 1 + run).documents))
        caught_up = _CaughtUp()
        rows = _RowWatch(data_dir, REPLAY_GENERATION, self.events, worker)
        rows.start()
        called = time.time()
        start = time.perf_counter()
        replayed = recall.replay(caught_up)
        replay_s = time.perf_counter() - start
        rows.join(60)
        if not rows.at:
            raise RuntimeError(f"generation {REPLAY_GENERATION}'s shards never held "
                               f"{self.events} events after the replay: {rows.error}")
        first_doc = asyncio.run(first_timestamp_ms(
            self.broker.bootstrap,
            Topics(settings.topic_prefix, SHARDS, REPLAY_GENERATION).documents)) / 1000
        replay_work_s = rows.at - first_doc
        if replayed["digest"] != settled["digest"]:
            raise RuntimeError(f"the replay's digest differs: {settled} {replayed}")
        events = self.events
        build_s = statistics.median(builds)
        job_cpu, worker_cpu, broker_cpu = (statistics.median(part) for part in zip(*cpu, strict=True))
        total_cpu = job_cpu + worker_cpu + broker_cpu
        return {
            "reindex_cpu_s_job": round(job_cpu, 2),
            "reindex_cpu_s_worker": round(worker_cpu, 2),
            "reindex_cpu_s_broker": round(broker_cpu, 2),
            "reindex_cpu_cores": round(total_cpu / build_s, 2),
            "reindex_broker_cpu_share": round(broker_cpu / total_cpu, 3),
            "reindex_events_per_s": round(events / build_s),
            "reindex_s": round(statistics.median(calls), 2),
            "reindex_build_s": round(build_s, 2),
            "reindex_build_s_min": round(min(builds), 2),
            "reindex_build_s_max": round(max(builds), 2),
            "reindex_runs": REINDEX_RUNS,
            "generation_switch_s": round(statistics.median(switches), 2),
            "generation_switch_s_max": round(max(switches), 2),
            "replay_events_per_s": round(events / replay_work_s),
            "replay_s": round(replay_s, 2),
            "replay_work_s": round(replay_work_s, 2),
            "replay_work_until_committed_s": round(caught_up.at - first_doc, 2),
            "replay_startup_s": round(first_doc - called, 2),
            "index_digest_s": round(digest_s, 2),
        }

    # 11. the broker's own upkeep ------------------------------------------------------------

    def _broker_upkeep(self, prefix: str) -> dict[str, Any]:
        topic = f"{prefix}.bench-upkeep"
        pid = self.broker.process.pid

        async def trickle() -> tuple[float, float]:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.broker.bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(topic, 1, 1)])
            finally:
                await admin.close()
            producer = await _producer(self.broker.bootstrap)
            try:
                await producer.send_and_wait(topic, b"warm-up")
                await asyncio.sleep(UPKEEP_SETTLE_S)  # a rewrite the warm-up started is over
                quiet = tree_cpu_s(pid)
                await asyncio.sleep(UPKEEP_S)
                start = tree_cpu_s(pid)
                quiet_cores = (start - quiet) / UPKEEP_S
                began = time.monotonic()
                while time.monotonic() - began < UPKEEP_S:
                    await producer.send_and_wait(topic, b"x")
                    await asyncio.sleep(UPKEEP_EVERY_S)
                return quiet_cores, (tree_cpu_s(pid) - start) / UPKEEP_S
            finally:
                await producer.stop()

        quiet_cores, busy_cores = asyncio.run(trickle())
        return {"broker_quiet_cpu_cores": round(quiet_cores, 3),
                "broker_trickle_cpu_cores": round(busy_cores, 3)}

    # 10. one event per record ----------------------------------------------------------------

    def single_records(self) -> dict[str, Any]:
        prefix = f"bpc{uuid.uuid4().hex[:8]}"
        topics = Topics(prefix, SHARDS)
        asyncio.run(ensure_topics(self.broker.bootstrap, topics))
        asyncio.run(produce(self.broker.bootstrap, topics.events,
                            as_single_records(self.corpus)))
        lines = self.events + len(self.corpus)
        raw = [asyncio.run(raw_consume(self.broker.bootstrap, topics.events, lines))
               for _ in range(3)]
        raw_rate = self.events / statistics.median(raw)
        try:
            rate, _, _ = self._run_pipeline(prefix, self.work / f"data-{prefix}")
        finally:
            self.stop_workers()
        return {"pipeline_events_per_s_single_records": round(rate),
                "raw_consume_events_per_s_single_records": round(raw_rate)}


class _SwitchWatch(threading.Thread):
    """Measures the generation switch: from the lineup naming `target` live to an event
    produced at that moment being found through the query role serving `target`."""

    def __init__(self, bootstrap: str, settings: Settings, target: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.settings, self.target = bootstrap, settings, target
        # Wall-clock (epoch s): the swap is the CreateTime of the lineup record naming `target`
        # live, not when this thread's fetch saw it (up to a fetch wait later on noida-db).
        self.started = time.time()
        self.swapped = 0.0
        self.elapsed = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.swapped = asyncio.run(self._wait_for_swap())
            sid, word = f"switch-{uuid.uuid4().hex[:8]}", f"switch{uuid.uuid4().hex[:10]}"
            asyncio.run(produce(self.bootstrap, Topics.of(self.settings).events, [
                (sid.encode(), orjson.dumps(header(sid, 9999))),
                (sid.encode(), orjson.dumps(_user_event(0, T0 + 2 * 10**9, word)))]))
            with Recall.connect(str(self.settings.broker), settings=self.settings) as recall:
                deadline = time.perf_counter() + 120
                while time.perf_counter() < deadline:
                    with contextlib.suppress(Exception):
                        if (recall.index_generation() == f"gen-{self.target:06d}"
                                and recall.search_events(sid, word).get("items")):
                            self.elapsed = time.time() - self.swapped
                            return
                    time.sleep(0.01)
            raise RuntimeError("the switch probe was never found in the new generation")
        except BaseException as exc:
            self.error = exc

    async def _wait_for_swap(self) -> float:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(control_topic(self.settings.topic_prefix), 0)
            consumer.assign([tp])
            await consumer.seek_to_end(tp)
            while True:
                for record in (await consumer.getmany(tp, timeout_ms=200)).get(tp, []):
                    if record.key == LINEUP_KEY and record.value and \
                            Lineup.from_json(bytes(record.value)).live == self.target:
                        return float(record.timestamp) / 1000
        finally:
            await consumer.stop()


class _RowWatch(threading.Thread):
    """`wait_until` (every 50 ms, read-only) in a thread, until generation `generation`'s shard
    files count `events` rows: the end of the pipeline's window (measurement 4), applied to a
    job. `at`: the wall-clock time (epoch s) of that poll; `error`: why it never came."""

    def __init__(self, data_dir: Path, generation: int, events: int,
                 worker: WorkerProcess) -> None:
        super().__init__(daemon=True)
        self.data_dir, self.generation, self.events, self.worker = (data_dir, generation,
                                                                     events, worker)
        self.at = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        counter = ShardCounter(self.data_dir, self.generation)
        try:
            self.at = wait_until(lambda: counter.count() >= self.events, self.worker,
                                 f"{self.events} events in generation {self.generation}")
        except BaseException as exc:
            self.error = exc
        finally:
            counter.close()


class _CpuSampler(threading.Thread):
    """Samples CPU seconds every SAMPLE_S while it runs: this process (the job's fold runs in
    it), the worker's process tree, the broker. `at(t)`: the sample nearest epoch time `t`,
    minus the first one."""

    SAMPLE_S = 0.25  # one scan of /proc a sample: ~3 ms here

    def __init__(self, worker: WorkerProcess, broker: Broker) -> None:
        super().__init__(daemon=True)
        self.worker, self.broker = worker, broker
        self.samples: list[tuple[float, float, float, float]] = []
        self.done = threading.Event()

    def sample(self) -> None:
        worker, broker = trees_cpu_s([self.worker.process.pid, self.broker.process.pid])
        self.samples.append((time.time(), time.process_time(), worker, broker))

    def run(self) -> None:
        while not self.done.wait(self.SAMPLE_S):
            self.sample()

    def start(self) -> None:
        self.sample()
        super().start()

    def stop(self) -> None:
        self.done.set()
        self.join()

    def at(self, when: float) -> tuple[float, float, float]:
        first = self.samples[0]
        nearest = min(self.samples, key=lambda sample: abs(sample[0] - when))
        return (nearest[1] - first[1], nearest[2] - first[2], nearest[3] - first[3])


class _CaughtUp:
    """A job's progress callback: the wall-clock time (epoch s) it last reported everything
    done (a replay reports its fold group's end, then its index group's: the later is the
    index caught up)."""

    def __init__(self) -> None:
        self.at = 0.0

    def __call__(self, done: int, total: int) -> None:
        if total and done >= total:
            self.at = time.time()


def _user_event(seq: int, at: int, word: str) -> dict[str, Any]:
    return {"type": "user/message", "seq": seq, "time": at,
            "data": {"id": f"probe-{seq}-{word}", "role": "user", "source": {"kind": "user"},
                     "content": [{"type": "text", "text": f"latency {word} check"}]},
            "surfaceOp": "append"}


async def _producer(bootstrap: str) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    return producer


def _answers(recall: Recall) -> bool:
    try:
        recall.index_generation()
        return True
    except Exception:
        return False


def _corpus(sessions: int) -> dict[str, list[bytes]]:
    gen = TextGen(23)
    return {f"tp-{i:05d}": session_lines(f"tp-{i:05d}", i, EVENTS_PER_SESSION, gen)
            for i in range(sessions)}


def _write_files(corpus: dict[str, list[bytes]], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for sid, lines in corpus.items():
        path = directory / f"{sid}.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        paths.append(path)
    return paths


def brokers() -> list[str]:
    chosen = os.environ.get("RECALL_BENCH_BROKERS", "apache")
    return [b.strip() for b in chosen.split(",") if b.strip()]


def run_broker(name: str, sessions: int) -> dict[str, Any]:
    work = fresh_dir(f"pipeline-{name}-{os.getpid()}")
    corpus = _corpus(sessions)
    files = _write_files(corpus, work / "logs")
    broker = start_broker(name, work)
    suite = Suite(broker, work, corpus, files)
    # the figures depend on what else the machine runs: its load is recorded beside them
    results: dict[str, Any] = {"pipeline_load_average_start": round(os.getloadavg()[0], 2)}
    try:
        results.update(suite.embedded())
        results.update(suite.pipeline())
        results.update(suite.single_records())
        results["pipeline_load_average_end"] = round(os.getloadavg()[0], 2)
    finally:
        suite.stop_workers()
        stop_broker(broker)
        shutil.rmtree(work, ignore_errors=True)  # broker data, worker data (GBs on noida-db)
    embedded = results["embedded_ingest_events_per_s"]
    for metric in ("pipeline", "replay", "reindex"):
        results[f"{metric}_ratio_vs_embedded"] = round(
            results[f"{metric}_events_per_s"] / embedded, 3)
    # what the reindex's CPU would allow with every core busy: the bound where a build on this
    # machine is CPU-bound (broker included, as it shares the cores here)
    cpu = [results[f"reindex_cpu_s_{part}"] for part in ("job", "worker", "broker")]
    cores = os.cpu_count() or 1
    results["reindex_ratio_vs_embedded_at_full_cores"] = round(
        results["pipeline_events"] / (sum(cpu) / cores) / embedded, 3)
    results["reindex_cpu_ratio_vs_embedded"] = round(
        (cpu[0] + cpu[1]) / results["embedded_ingest_cpu_s"], 3)
    # the baseline of issue 17's text: raw consume of one event per record (the old wire format)
    results["pipeline_ratio_vs_raw_consume_single_records"] = round(
        results["pipeline_events_per_s"] / results["raw_consume_events_per_s_single_records"], 4)
    return results


def run() -> dict[str, Any]:
    sessions = max(8, round(SESSIONS * scale()))
    results: dict[str, Any] = {}
    for name in brokers():
        suffix = "" if name == "apache" else f"_{name}"
        measured = run_broker(name, sessions)
        results.update({f"{key}{suffix}": value for key, value in measured.items()})
    return results
