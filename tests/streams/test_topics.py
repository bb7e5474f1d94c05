"""Unit: streams.topics names, configs and broker-URL parsing (ensure_topics runs in integration)."""

from __future__ import annotations

from streams.settings import Settings
from streams.topics import Topics, bootstrap_servers


def test_names_follow_the_prefix_and_partitions_the_shards() -> None:
    topics = Topics.of(Settings(topic_prefix="fleet", shards=6))
    assert topics.partitions == 6
    assert (topics.events, topics.documents, topics.requests, topics.replies,
            topics.dead_letter) == ("fleet.events", "fleet.documents", "fleet.requests",
                                    "fleet.replies", "fleet.dead-letter")
    # faust's own naming: <app id>-<table>-changelog, the app id being the consumer group.
    assert topics.fold_app_id == "fleet.fold"
    assert topics.changelog == "fleet.fold-state-changelog"


def test_configs_keep_facts_forever_and_compact_derived_topics() -> None:
    configs = Topics("p", 4).configs()
    assert set(configs) == {"p.events", "p.documents", "p.requests", "p.replies",
                            "p.dead-letter", "p.fold-state-changelog"}
    assert configs["p.events"]["retention.ms"] == "-1"
    assert configs["p.dead-letter"]["retention.ms"] == "-1"
    assert configs["p.documents"]["cleanup.policy"] == "compact"
    assert configs["p.fold-state-changelog"]["cleanup.policy"] == "compact"
    assert int(configs["p.requests"]["retention.ms"]) > 0


def test_bootstrap_servers_accepts_faust_broker_urls() -> None:
    assert bootstrap_servers("kafka://127.0.0.1:9092") == "127.0.0.1:9092"
    assert bootstrap_servers("kafka://a:1;kafka://b:2") == "a:1,b:2"
    assert bootstrap_servers("a:1,b:2") == "a:1,b:2"
