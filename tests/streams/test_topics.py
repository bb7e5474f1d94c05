"""Unit: streams.runtime.kafka.topics names, configs and broker-URL parsing (ensure_topics runs in integration)."""

from __future__ import annotations

from pathlib import Path

from streams.core.settings import Settings
from streams.runtime.kafka.fleet import Lineup
from streams.runtime.kafka.membership import instance_id
from streams.runtime.kafka.topics import Topics, bootstrap_servers


def test_names_follow_the_prefix_and_partitions_the_shards() -> None:
    topics = Topics.of(Settings(topic_prefix="fleet", shards=6))
    assert topics.partitions == 6
    assert (topics.events, topics.documents, topics.requests, topics.replies,
            topics.dead_letter) == ("fleet.events", "fleet.documents", "fleet.requests",
                                    "fleet.replies", "fleet.dead-letter")
    # faust's own naming: <app id>-<table>-changelog, the app id being the consumer group.
    assert topics.fold_app_id == "fleet.fold"
    assert topics.changelog == "fleet.fold-state-changelog"


def test_replication_settings_reach_every_topic_made() -> None:
    single = Topics.of(Settings(topic_prefix="p", shards=4))
    assert single.replication == 1
    assert not any("min.insync.replicas" in c for c in single.configs().values())
    replicated = Topics.of(Settings(topic_prefix="p", shards=4, kafka_replication_factor=3,
                                    kafka_min_insync_replicas=2), generation=2)
    assert replicated.replication == 3
    configs = replicated.configs()
    assert {c["min.insync.replicas"] for c in configs.values()} == {"2"}
    assert configs["p.events"]["retention.ms"] == "-1"  # added to, not replacing, the others
    assert configs["p.documents.g2"]["cleanup.policy"] == "compact"


def test_configs_keep_facts_forever_and_compact_derived_topics() -> None:
    configs = Topics("p", 4).configs()
    assert set(configs) == {"p.events", "p.documents", "p.requests", "p.replies",
                            "p.dead-letter", "p.fold-state-changelog", "p.shard-requests"}
    assert configs["p.events"]["retention.ms"] == "-1"
    assert configs["p.dead-letter"]["retention.ms"] == "-1"
    assert configs["p.documents"]["cleanup.policy"] == "compact"
    assert configs["p.fold-state-changelog"]["cleanup.policy"] == "compact"
    assert int(configs["p.requests"]["retention.ms"]) > 0


def test_bootstrap_servers_accepts_faust_broker_urls() -> None:
    assert bootstrap_servers("kafka://127.0.0.1:9092") == "127.0.0.1:9092"
    assert bootstrap_servers("kafka://a:1;kafka://b:2") == "a:1,b:2"
    assert bootstrap_servers("a:1,b:2") == "a:1,b:2"


def test_derived_names_are_per_generation_and_facts_are_shared(tmp_path: Path) -> None:
    first, third = Topics("p", 4), Topics("p", 4, generation=3)
    assert (first.documents, first.fold_app_id, first.index_group, first.shard_requests) == (
        "p.documents", "p.fold", "p.index", "p.shard-requests")
    assert (third.documents, third.changelog, third.index_group, third.shard_requests) == (
        "p.documents.g3", "p.fold.g3-state-changelog", "p.index.g3", "p.shard-requests.g3")
    assert (third.events, third.dead_letter, third.requests) == (
        first.events, first.dead_letter, first.requests)
    assert third.derived() == ["p.documents.g3", "p.fold.g3-state-changelog",
                               "p.shard-requests.g3"]
    assert first.index_dir(tmp_path) == tmp_path / "kafka-index"
    assert third.index_dir(tmp_path) == tmp_path / "kafka-index-g3"


def test_lineup_round_trips_and_knows_its_newest_and_upcoming_generations() -> None:
    lineup = Lineup(live=2, building=4, retired=((1, 1_700_000_000_000), (3, 1_700_000_001_000)))
    assert Lineup.from_json(lineup.to_json()) == lineup
    assert lineup.newest() == 4
    assert Lineup() == Lineup(live=1) and Lineup().newest() == 1
    # the generation the index roles prepare: the one being built, else the next one
    assert lineup.upcoming() == 4 and Lineup().upcoming() == 2
    assert Lineup(live=3, retired=((1, 0), (2, 0))).upcoming() == 4


def test_worker_identity_is_stable_per_data_dir(tmp_path: Path) -> None:
    a = Settings(data_dir=tmp_path / "a")
    assert instance_id(a, "fold") == instance_id(Settings(data_dir=tmp_path / "a"), "fold")
    assert instance_id(a, "fold") != instance_id(Settings(data_dir=tmp_path / "b"), "fold")
    assert instance_id(a, "fold") != instance_id(a, "index.g1")
    assert instance_id(Settings(worker_id="w7"), "query") == "w7.query"
