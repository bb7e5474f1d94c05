"""Integration: reindex and replay over Kafka — a new generation, an atomic swap all workers
obey, answers unchanged, old cursors STALE; and kill -9 of either job midway, then resume."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from contract import answers, embedded_expectation
from factories import fleet, header, user, write_fleet

from projections.errors import RecallError
from streams.core.settings import Settings
from streams.facade import Recall
from streams.runtime.kafka.codec import split_segment
from streams.runtime.kafka.fleet import read_lineup
from streams.runtime.kafka.foldstep import position_key
from streams.runtime.kafka.topics import Topics, bootstrap_servers, ensure_topics
from tests.integration.kafkaio import (
    REPO,
    WorkerProcess,
    group_members,
    publish,
    read_topic,
    topic_names,
    worker_env,
)
from tests.integration.test_kafka_contract import cli_env, expected_counts, wait_indexed

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(360)]


class _Searcher(threading.Thread):
    """Keeps asking one question during a job; every answer must be the expected page."""

    def __init__(self, settings: Settings, expected: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.settings, self.expected = settings, expected
        self.done = threading.Event()
        self.answered = 0
        self.wrong: list[Any] = []

    def run(self) -> None:
        with Recall.connect(str(self.settings.broker), settings=self.settings) as recall:
            while not self.done.is_set():
                try:
                    page = recall.search_sessions("needle", limit=2)
                except RecallError as exc:
                    self.wrong.append(exc.code)
                    continue
                page.pop("nextCursor", None)
                if page != self.expected:
                    self.wrong.append(page)
                self.answered += 1


def test_reindex_and_replay_over_kafka_swap_generations_and_keep_every_answer(
        settings: Settings, worker_factory: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    files, expected, expected_digest = embedded_expectation(tmp_path)
    # retired generations are deleted one second after they retire
    worker = worker_factory(RECALL_SNAPSHOT_RETENTION_S=1)
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        recall.ingest(files)
        wait_indexed(recall, expected_counts(files), worker)
        assert recall.index_generation() == "gen-000001"
        assert (tmp_path / "data-0" / "kafka-index").is_dir()
        # the index role prepared generation 2 ahead of any job: its topics, its group joined
        _eventually(lambda: _prepared(settings, 2, tmp_path / "data-0"))
        parked_before = _parked_keys(settings)
        first = recall.search_sessions("needle", limit=2)
        expected_page = {k: v for k, v in first.items() if k != "nextCursor"}
        searcher = _Searcher(settings, expected_page)
        searcher.start()
        result = recall.reindex()
        searcher.done.set()
        searcher.join(60)
        # queries were answered throughout (from gen 1, then gen 2) and never differed
        assert searcher.answered > 0 and searcher.wrong == [], searcher.wrong[:3]
        assert result["generation"] == "gen-000002" and result["previous"] == "gen-000001"
        assert result["digest"] == expected_digest["digest"]
        assert result["eventsIndexed"] == sum(1 + n for n in expected_counts(files).values())
        assert recall.index_generation() == "gen-000002"
        assert recall.index_digest() == expected_digest
        _eventually(lambda: _prepared(settings, 3, tmp_path / "data-0"))
        # generation 1 is gone: its shard files and its derived topics
        _eventually(lambda: not (tmp_path / "data-0" / "kafka-index").exists()
                    and not set(Topics.of(settings, 1).derived()) & _topics(settings))
        assert {Topics.of(settings).events, *Topics.of(settings, 2).derived()} <= _topics(settings)
        assert orjson.dumps(answers(recall)) == orjson.dumps(expected)
        with pytest.raises(RecallError) as info:  # gen 1's cursors are STALE in gen 2
            recall.search_sessions("needle", limit=2, cursor=first["nextCursor"])
        assert info.value.code == "SESSION_QUERY_STALE_CURSOR"
        # gen 2 is maintained live: the restarted fold continues from the job's offsets
        # (an existing session continues on the job's fold state: its changelog was recovered)
        counts = expected_counts(files)
        grown = {**counts, "late": 1, "child": counts["child"] + 1}
        publish(recall, [("late", header("late", cwd="/w/late")), ("late", user(0, "zebra")),
                         ("child", user(counts["child"], "zebra child after the swap"))])
        wait_indexed(recall, grown, worker)
        with_late = recall.index_digest()
        # replay: a fresh generation rebuilt by the fleet from the earliest offsets
        replayed = recall.replay()
        assert replayed["generation"] == "gen-000003"
        assert recall.index_generation() == "gen-000003"
        assert recall.index_digest() == with_late
        _eventually(lambda: _prepared(settings, 4, tmp_path / "data-0"))
        assert sorted(h["header"]["id"] for h in recall.search_sessions("zebra")["items"]) == [
            "child", "late"]
    # the folds of generations 2 and 3 recovered their whole state: nothing new was parked
    # (a fold recovered only in part parks INGEST_MISSING_HEADER for events it folds again)
    assert _parked_keys(settings) == parked_before
    lineup = _lineup(settings)
    assert lineup.live == 3 and lineup.building is None and not lineup.replaying
    assert [g for g, _ in lineup.retired] == [1, 2]


def _prepared(settings: Settings, generation: int, data_dir: Path) -> bool:
    """The index role made ready for `generation` before a job builds it: its documents and
    shard-request topics, its shard files, one member in its index group."""
    topics = Topics.of(settings, generation)
    bootstrap = bootstrap_servers(str(settings.broker))
    return ({topics.documents, topics.shard_requests} <= _topics(settings)
            and topics.index_dir(data_dir).is_dir()
            and asyncio.run(group_members(bootstrap, topics.index_group)) == 1)


def _topics(settings: Settings) -> set[str]:
    return asyncio.run(topic_names(bootstrap_servers(str(settings.broker))))


def _eventually(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.2)


def _job(settings: Settings, broker_env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "streams", "--broker", str(settings.broker),
                             name, "--json"], cwd=REPO, env={**broker_env, **cli_env(settings)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.chaos
def test_kill_minus_nine_during_kafka_reindex_and_replay_then_resume(
        settings: Settings, settings_env: dict[str, Any], broker: Any,
        worker_factory: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    logs = fleet(150, 40, prefix="jobs")
    with Recall.open(tmp_path / "clean", shards=settings.shards) as clean:
        clean.ingest(write_fleet(tmp_path / "logs", logs))
        expected = clean.index_digest()
    worker = worker_factory()
    # a lease long enough that the refused job below starts and checks it on a loaded machine
    # (at 10 s it sometimes expired first under a load average of 7 on 2 cores)
    env = {**worker_env(broker, settings_env), "RECALL_JOB_LEASE_S": "25"}
    rng = random.Random(6)
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        publish(recall, [(sid, line) for sid, lines in logs.items() for line in lines])
        wait_indexed(recall, {sid: len(lines) - 1 for sid, lines in logs.items()}, worker, 180)
        assert recall.index_digest() == expected
        total = sum(len(lines) for lines in logs.values())
        for name, generation in (("reindex", 2), ("replay", 3)):
            job = _job(settings, env, name)
            # kill it once its generation is under way (building / live), at a random moment
            _wait_for(lambda g=generation: _lineup(settings).newest() >= g, job)
            time.sleep(rng.uniform(0.0, 0.4))
            assert job.poll() is None, job.communicate()
            os.kill(job.pid, signal.SIGKILL)
            job.wait(30)
            left = _lines_after_recorded_positions(settings, generation)
            # the killed job's lease still stands: a second job is refused until it expires
            refused = _job(settings, env, name)
            out, _ = refused.communicate(timeout=120)
            assert refused.returncode == 1, out
            assert orjson.loads(out)["error"]["code"] == "STREAM_JOB_RUNNING"
            lease = _lineup(settings).job
            assert lease is not None
            time.sleep(max(0.0, lease[2] / 1000 - time.time()) + 0.2)
            again = _job(settings, env, name)
            out, err = again.communicate(timeout=240)
            assert again.returncode == 0, (out + err).decode()
            result = orjson.loads(out)
            # the rerun continued the same generation instead of starting another
            assert result["generation"] == f"gen-{generation:06d}", result
            if name == "reindex":  # and folded only what the killed run had not recorded
                assert result["eventsIndexed"] == left <= total, (result, left, total)
            assert result["digest"] == expected["digest"]
            assert recall.index_digest() == expected


def _parked_keys(settings: Settings) -> set[bytes | None]:
    topics = Topics.of(settings)
    letters = asyncio.run(read_topic(bootstrap_servers(str(settings.broker)), topics.dead_letter,
                                     expect=10**9, timeout_s=2.0, distinct=False,
                                     partitions=topics.partitions))
    return {r.key for r in letters}


def _lineup(settings: Settings) -> Any:
    return asyncio.run(read_lineup(bootstrap_servers(str(settings.broker)), settings.topic_prefix))


def _lines_after_recorded_positions(settings: Settings, generation: int) -> int:
    """Lines of the events topic past the read positions the generation's fold table recorded
    (its changelog's last `position_key` records): what a resumed reindex folds."""
    bootstrap = bootstrap_servers(str(settings.broker))
    topics = Topics.of(settings, generation)
    changelog = asyncio.run(read_topic(bootstrap, topics.changelog, expect=10**9, timeout_s=3.0,
                                       distinct=False, partitions=topics.partitions))
    recorded = {p: 0 for p in range(topics.partitions)}
    for record in changelog:
        for p in range(topics.partitions):
            if record.key == position_key(p).encode() and record.value is not None:
                recorded[p] = int(record.value)
    events = asyncio.run(read_topic(bootstrap, topics.events, expect=10**9, timeout_s=3.0,
                                    distinct=False, partitions=topics.partitions))
    return sum(len(split_segment(r.value)) for r in events if r.offset >= recorded[r.partition])


def _wait_for(condition: Callable[[], bool], job: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()
        time.sleep(0.05)


def test_a_job_without_index_workers_stalls_clearly_and_resumes_later(
        settings: Settings, worker_factory: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    files, _, expected_digest = embedded_expectation(tmp_path)
    quick = settings.model_copy(update={"job_stall_s": 3.0})
    with Recall.connect(str(settings.broker), settings=quick) as recall:
        recall.ingest(files)
        with pytest.raises(RecallError) as info:  # the job folds, but nobody indexes gen 2
            recall.reindex()
        assert info.value.code == "STREAM_JOB_STALLED"
        assert _lineup(settings).job is None  # the lease was handed back
        worker = worker_factory()
        wait_indexed(recall, expected_counts(files), worker)
        result = recall.reindex()  # resumes generation 2: everything was folded already
        assert result["generation"] == "gen-000002" and result["eventsIndexed"] == 0
        assert recall.index_digest() == expected_digest


def test_a_reindex_swaps_only_once_the_workers_fold_of_the_new_generation_runs(
        settings: Settings, worker_factory: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    """Swapped before the workers' fold of the new generation runs, the new generation would
    hold back every event appended meanwhile. Index and query workers alone index what the job
    folded, and the swap still waits for a fold; a worker with the fold role lets it resume."""
    files, _, expected_digest = embedded_expectation(tmp_path)
    quick = settings.model_copy(update={"job_stall_s": 4.0})
    with Recall.connect(str(settings.broker), settings=quick) as recall:
        folding = worker_factory()
        recall.ingest(files)
        wait_indexed(recall, expected_counts(files), folding)
        folding.stop()
        indexing = worker_factory(("index", "query"))
        wait_indexed(recall, expected_counts(files), indexing)  # up, gen 2's group joined
        with pytest.raises(RecallError) as info:  # indexed, but no fold of gen 2 joined
            recall.reindex()
        assert info.value.code == "STREAM_JOB_STALLED"
        assert "fold" in info.value.message
        lineup = _lineup(settings)
        assert lineup.live == 1 and lineup.building == 2 and lineup.folded
        assert lineup.job is None  # the lease was handed back
        worker_factory(("fold",))
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        result = recall.reindex()  # resumes generation 2 once its fold has joined
        assert result["generation"] == "gen-000002" and result["eventsIndexed"] == 0
        assert recall.index_digest() == expected_digest


# --- a job reads to a topic's end, records written in large batches ------------------------

async def _produce_one_batch(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]],
                             partition: int = 0) -> None:
    """Every record in as few producer batches as the broker takes."""
    from aiokafka import AIOKafkaProducer

    # compressed: one batch stays under the broker's message size limit
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=500,
                                compression_type="zstd", max_batch_size=16 << 20,
                                max_request_size=32 << 20)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=v, key=k, partition=partition)
                   for k, v in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _reported_end(bootstrap: str, topic: str) -> int:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


async def _make_topic(bootstrap: str, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()


def test_a_job_waits_until_the_group_has_committed_the_topics_end(settings: Settings) -> None:
    """The index wait before a swap: the group must have committed the topic's end (a swap
    before it answers queries from a generation that lacks the last records). The records
    come in one large batch, and ListOffsets reports its end exactly."""
    from streams.runtime.kafka.rebuild import JobStalled, wait_caught_up
    from tests.integration.kafkaio import commit_group

    bootstrap = bootstrap_servers(str(settings.broker))
    topic, group, real = f"{settings.topic_prefix}.ends", f"{settings.topic_prefix}.g", 3000
    asyncio.run(_make_topic(bootstrap, topic))
    asyncio.run(_produce_one_batch(bootstrap, topic, [(b"k", b"x" * 50)] * real))
    assert asyncio.run(_reported_end(bootstrap, topic)) == real
    asyncio.run(commit_group(bootstrap, group, topic, {0: real - 1}))
    # one record short of the end: the job keeps waiting (and stalls here)
    with pytest.raises(JobStalled):
        asyncio.run(wait_caught_up(bootstrap, group, topic, 1, poll_s=0.1, stall_s=1.5))
    asyncio.run(commit_group(bootstrap, group, topic, {0: real}))
    assert asyncio.run(wait_caught_up(bootstrap, group, topic, 1, poll_s=0.1,
                                      stall_s=10)) == real


def test_the_reindex_fold_folds_every_line_of_a_batch_larger_than_a_job_fetch(
        settings: Settings) -> None:
    """One event per record, all in one producer batch larger than a job fetch: the reindex
    fold reads on to the topic's end, so it folds every line."""
    from streams.runtime.kafka.codec import encode_event_value
    from streams.runtime.kafka.rebuild import BATCH_MAX, fold_generation

    bootstrap = bootstrap_servers(str(settings.broker))
    topics = Topics.of(settings, 2)
    asyncio.run(ensure_topics(bootstrap, topics))
    # every session on partition 0 (the producer picks the partition here, not the key)
    sessions = [f"s{n}" for n in range(4)]
    per_session = BATCH_MAX // 2
    records = [(sid.encode(), encode_event_value(header(sid, cwd=f"/w/{sid}")))
               for sid in sessions]
    records += [(sid.encode(), encode_event_value(user(seq, f"line {seq} of {sid}")))
                for seq in range(per_session) for sid in sessions]
    asyncio.run(_produce_one_batch(bootstrap, topics.events, records))
    assert asyncio.run(fold_generation(settings, 2)) == len(records)


def test_a_resumed_build_reads_its_whole_fold_table_back_from_the_changelog(
        settings: Settings) -> None:
    """A resumed reindex reads the fold table it had written back from the changelog, whole:
    written in large batches, with a tombstone and a rewrite after."""
    from streams.runtime.kafka.rebuild import _read_table

    bootstrap = bootstrap_servers(str(settings.broker))
    topics = Topics.of(settings, 2)
    asyncio.run(ensure_topics(bootstrap, topics))
    written = {f"session-{n}": orjson.dumps({"n": n}) for n in range(500)}
    asyncio.run(_produce_one_batch(bootstrap, topics.changelog,
                                   [(k.encode(), v) for k, v in written.items()]))
    later: list[Any] = [(b"session-7", None), (b"session-8", b"again")]  # a tombstone, a rewrite
    asyncio.run(_produce_one_batch(bootstrap, topics.changelog, later))
    expected = {**written, "session-8": b"again"}
    del expected["session-7"]
    assert asyncio.run(_read_table(bootstrap, topics)) == expected
