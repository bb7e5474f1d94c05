"""Unit: the fold agent as `build_app` registers it, on the real faust library (no broker):
the app is complete without any other module's help, and its table and hooks are the seam's."""

from __future__ import annotations

import asyncio

import faust
from aiokafka.consumer.fetcher import Fetcher
from faust.transport import consumer as faust_consumer
from faust.types import TP

from streams.core.settings import Settings
from streams.runtime.kafka import seam
from streams.runtime.kafka.app import build_app
from streams.runtime.kafka.folding import Fold
from streams.runtime.kafka.topics import FOLD_TABLE, Topics

SETTINGS = Settings(broker="kafka://127.0.0.1:9", shards=4, topic_prefix="unit")


def test_build_app_alone_installs_the_seam_it_relies_on() -> None:
    app = build_app(SETTINGS)
    assert Fetcher._proc_fetch_request is seam._fetch_waiting
    assert faust_consumer.Consumer.perform_seek is seam._perform_seek_then_place
    # faust's consumer delivers every record: no read offsets to drop or skip by
    assert isinstance(app.consumer._read_offset, seam._NothingRead)
    assert app.consumer._read_offset[object()] is None


def test_the_fold_agent_reads_the_events_topic_into_the_fold_table() -> None:
    app = build_app(SETTINGS, generation=2)
    topics = Topics.of(SETTINGS, 2)
    assert app.conf.id == topics.fold_app_id
    [agent] = app.agents.values()
    assert list(agent.channel.topics) == [topics.events]
    table = app.tables[FOLD_TABLE]
    assert isinstance(table, seam.FoldTable)
    assert table.changelog_topic.get_topic_name() == topics.changelog
    driver = app.recall_fold
    assert isinstance(driver, seam.FaustFold) and isinstance(driver.processor, Fold)
    assert driver.processor.topic == topics.events and driver.app is app


def test_a_revoked_partitions_keys_leave_the_table_however_they_were_written() -> None:
    """faust's memory store drops the keys of partitions no longer assigned once a recovery
    completes, by the partition it noted for each key — noted only when it recovers a key.
    The fold's writes note it too: a key kept past its partition's revocation (a session's
    meta record written here, its pages recovered) would later stand for a state the
    changelog does not hold. (The producer is not started here: its sends are counted.)"""
    async def run() -> tuple[dict[str, bytes], dict[str, bytes], list[int]]:
        app = build_app(SETTINGS)
        table = app.tables[FOLD_TABLE]
        sent: list[int] = []

        async def send(topic: str, key: bytes, value: bytes | None, partition: int,
                       *rest: object) -> None:
            sent.append(partition)

        app.producer.send = send  # type: ignore[method-assign]
        await table.write(2, [("s\x00p0", b"page"), ("s\x00m", b"meta")])
        await table.write(3, [("t\x00m", b"meta"), ("t\x00p0", b"page")])
        await table.write(3, [("t\x00p0", None)])
        store = table.data
        before = dict(store.data)
        changelog = table.changelog_topic.get_topic_name()
        await store.on_recovery_completed({TP(changelog, 3)}, set())
        return before, dict(store.data), sent

    before, after, sent = asyncio.run(run())
    assert before == {"s\x00p0": b"page", "s\x00m": b"meta", "t\x00m": b"meta"}
    assert after == {"t\x00m": b"meta"}
    assert sent == [2, 2, 3, 3, 3]


def test_each_app_is_built_fresh() -> None:
    first, second = build_app(SETTINGS), build_app(SETTINGS)
    assert first is not second and isinstance(first, faust.App)
    assert first.recall_fold is not second.recall_fold
