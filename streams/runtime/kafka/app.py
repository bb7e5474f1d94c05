"""Transport: `build_app(settings)` — the faust app of the fold processor, no import side effects."""

from __future__ import annotations

from typing import Any

import faust

from projections.errors import RecallError
from streams.core.settings import Settings
from streams.runtime.kafka.membership import instance_id
from streams.runtime.kafka.producer import COMPRESSION
from streams.runtime.kafka.topics import Topics


def faust_options(settings: Settings) -> dict[str, Any]:
    """The faust settings we rely on; docs/ENGINE-NOTES.md says why each one."""
    from streams.runtime.kafka.connection import faust_broker

    options: dict[str, Any] = {
        # every bootstrap host and the RECALL_KAFKA_* credentials (streams.runtime.kafka.connection)
        **faust_broker(settings),
        "store": "memory://",
        "datadir": str(settings.data_dir / "faust"),
        # Session timeout bounds the takeover after a crash; noida-db and a default Kafka
        # reject anything below 6 s.
        "broker_session_timeout": settings.session_timeout_s,
        "broker_heartbeat_interval": settings.heartbeat_s,
        # A rebalance waits this long for known members to rejoin; noida-db waits it out in full
        # for a SIGKILLed member (faust's 60 s default stalled the takeover for a minute).
        "broker_rebalance_timeout": max(10.0, 2 * settings.session_timeout_s),
        "topic_partitions": settings.shards,
        # faust's own topics (none today: ensure_topics makes the changelog) follow ours
        "topic_replication_factor": settings.kafka_replication_factor,
        # Deliberately not exactly_once: every stage is idempotent instead (the fold resumes at
        # the read positions its table records, an index shard records its own), and the fold's
        # documents go out on a producer of its own (streams.runtime.kafka.agents), which
        # faust's per-partition transactions would not cover.
        "processing_guarantee": "at_least_once",
        "web_enabled": False,
        # Topics carry raw bytes; streams.runtime.kafka.codec is the only place that parses them.
        "key_serializer": "raw",
        "value_serializer": "raw",
        # Standbys would double the changelog reads on a 2-core box; recovery replays instead.
        "table_standby_replicas": 0,
        "autodiscover": False,
        # Static membership: a restarted worker takes its partitions back at once (see
        # streams.runtime.kafka.membership; noida-db never expires a SIGKILLed dynamic member).
        "consumer_group_instance_id": instance_id(settings, "fold"),
    }
    # The changelog's batches compressed like every other output (streams.runtime.kafka.producer).
    options["producer_compression_type"] = COMPRESSION
    return options


def build_app(settings: Settings, *, generation: int = 1) -> faust.App:
    """A fresh faust App with the fold agent registered; nothing connects until it is started.
    Installs the seam's process-wide behaviours (streams.runtime.kafka.seam), which the fold relies on."""
    from streams.runtime.kafka import seam
    from streams.runtime.kafka.agents import register_fold_agent

    seam.install()
    if not settings.broker:
        raise RecallError("the Kafka runtime needs RECALL_BROKER (e.g. kafka://127.0.0.1:9092)",
                          code="STREAM_NO_BROKER")
    topics = Topics.of(settings, generation)
    app = faust.App(topics.fold_app_id, **faust_options(settings))
    # Exposed for the worker's stats line and for tests; faust Apps accept extra attributes.
    app.recall_fold = register_fold_agent(app, settings, topics)  # type: ignore[attr-defined]
    return app
