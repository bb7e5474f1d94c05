"""Unit: the fold agent as `build_app` registers it, on the real faust library (no broker):
the app is complete without any other module's help, and its table and hooks are the seam's."""

from __future__ import annotations

import faust
from aiokafka.consumer.fetcher import Fetcher
from faust.transport import consumer as faust_consumer

from streams.app import build_app
from streams.kafka import seam
from streams.kafka.folding import Fold
from streams.settings import Settings
from streams.topics import FOLD_TABLE, Topics

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
    assert isinstance(table, seam.FoldTable) and not table.paced
    assert table.changelog_topic.get_topic_name() == topics.changelog
    driver = app.recall_fold
    assert isinstance(driver, seam.FaustFold) and isinstance(driver.processor, Fold)
    assert driver.processor.topic == topics.events and driver.app is app


def test_on_tansu_the_table_writes_one_record_per_producer_batch() -> None:
    app = build_app(SETTINGS, flavor="tansu")
    assert app.conf.producer_max_batch_size == 1
    assert app.tables[FOLD_TABLE].paced


def test_each_app_is_built_fresh() -> None:
    first, second = build_app(SETTINGS), build_app(SETTINGS)
    assert first is not second and isinstance(first, faust.App)
    assert first.recall_fold is not second.recall_fold
