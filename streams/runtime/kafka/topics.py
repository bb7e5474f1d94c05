"""Transport: topic names, partitioning and configs, and an idempotent `ensure_topics`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from projections.errors import RecallError
from streams.core.settings import Settings
from streams.runtime.kafka.brokers import bootstrap_servers as bootstrap_servers

#: faust names a table's changelog `<app id>-<table>-changelog`; both parts are fixed here so the
#: name is known before any faust object exists (tests and the indexer read it).
FOLD_APP_SUFFIX = "fold"
FOLD_TABLE = "state"

# Kafka error codes create_topics can answer with that still mean "the topic is there".
_TOPIC_ALREADY_EXISTS = 36
_TOPIC_AUTHORIZATION_FAILED = 29

_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
#: Requests and replies are worthless after their deadline; an hour covers any sane one.
_EPHEMERAL = {"retention.ms": str(60 * 60 * 1000)}


class TopicSetupError(RecallError):
    """A topic could not be created, or exists with the wrong partition count.

    Operator action: delete the mismatched topic or pick another RECALL_TOPIC_PREFIX; partition
    counts must equal RECALL_SHARDS because shard k follows partition k."""

    code = "STREAM_TOPIC_SETUP"


@dataclass(frozen=True, slots=True)
class Topics:
    """Every topic name of one deployment, derived from the prefix and the index generation.

    Events, dead letters, requests, replies and the control topic are the fleet's record of
    fact and its wires: one of each. Everything derived from the events (the fold table and its
    changelog, the documents topic, the index consumer group, its shard-request topic and the
    shard files) belongs to one generation, so a replay or reindex builds the next generation
    beside the live one. Generation 1 keeps the unsuffixed names."""

    prefix: str
    partitions: int
    generation: int = 1
    #: replicas of every topic created, and their `min.insync.replicas` (None: the broker's)
    replication: int = 1
    min_insync_replicas: int | None = None

    @classmethod
    def of(cls, settings: Settings, generation: int = 1) -> Topics:
        return cls(settings.topic_prefix, settings.shards, generation,
                   settings.kafka_replication_factor, settings.kafka_min_insync_replicas)

    def _derived(self, name: str) -> str:
        return name if self.generation == 1 else f"{name}.g{self.generation}"

    @property
    def events(self) -> str:
        return f"{self.prefix}.events"

    @property
    def documents(self) -> str:
        return self._derived(f"{self.prefix}.documents")

    @property
    def shard_requests(self) -> str:
        """Query coordinators → the owner of shard k (co-partitioned with the documents)."""
        return self._derived(f"{self.prefix}.shard-requests")

    @property
    def index_group(self) -> str:
        return self._derived(f"{self.prefix}.index")

    def index_dir(self, data_dir: Path) -> Path:
        """Where an index worker keeps this generation's shard files."""
        return data_dir / ("kafka-index" if self.generation == 1
                           else f"kafka-index-g{self.generation}")

    @property
    def requests(self) -> str:
        return f"{self.prefix}.requests"

    @property
    def replies(self) -> str:
        return f"{self.prefix}.replies"

    @property
    def dead_letter(self) -> str:
        return f"{self.prefix}.dead-letter"

    @property
    def fold_app_id(self) -> str:
        """The fold processor's faust app id, which is also its consumer group."""
        return self._derived(f"{self.prefix}.{FOLD_APP_SUFFIX}")

    @property
    def changelog(self) -> str:
        return f"{self.fold_app_id}-{FOLD_TABLE}-changelog"

    def configs(self) -> dict[str, dict[str, str]]:
        """Topic name → broker config. Events and dead letters are the record of fact: kept
        forever. Documents are compacted by `sessionId:seq`, so rebuilding a shard reads each
        event's latest document once, not every redelivery. The changelog is compacted too."""
        configs = {
            self.events: dict(_FOREVER),
            self.documents: {"cleanup.policy": "compact"},
            self.dead_letter: dict(_FOREVER),
            self.requests: dict(_EPHEMERAL),
            self.replies: dict(_EPHEMERAL),
            self.changelog: {"cleanup.policy": "compact"},
            self.shard_requests: dict(_EPHEMERAL),
        }
        if self.min_insync_replicas is not None:
            for config in configs.values():
                config["min.insync.replicas"] = str(self.min_insync_replicas)
        return configs

    def shared(self) -> list[str]:
        """The topics every generation uses (what a client needs)."""
        return [self.events, self.dead_letter, self.requests, self.replies]

    def derived(self) -> list[str]:
        """The topics of this generation alone (what retiring it deletes)."""
        return [self.documents, self.changelog, self.shard_requests]


def _topic_errors(response: Any) -> list[tuple[str, int, str]]:
    out = []
    for item in getattr(response, "topic_errors", []):
        topic, code = item[0], item[1]
        message = item[2] if len(item) > 2 and item[2] else ""
        out.append((str(topic), int(code), str(message)))
    return out


def _creation_failed(name: str, code: int, message: str) -> Exception:
    """A CreateTopics error code as the error to raise: one aiokafka marks retriable (the
    controller moved, a request timed out: a cluster losing a broker answers these) as that
    aiokafka error, which a start-up asks again on (`connection.asked_again`); any other as
    TopicSetupError, which asking again would not mend."""
    from aiokafka.errors import for_code

    error = for_code(code)
    if error.retriable:
        retriable: Exception = error(f"creating topic {name}: {message}" if message
                                     else f"creating topic {name}")
        return retriable
    return TopicSetupError(f"creating topic {name} failed: error {code} {message}")


async def _partition_counts(admin: Any, names: list[str]) -> dict[str, int]:
    """Partition count per topic, waiting briefly for freshly created topics to show up in
    metadata (brokers answer with an empty or erroring entry for a moment after creation)."""
    deadline = asyncio.get_running_loop().time() + 10.0
    while True:
        counts = {str(info.get("topic")): len(info.get("partitions") or [])
                  for info in await admin.describe_topics(names)
                  if not info.get("error_code")}
        if all(counts.get(n) for n in names) or asyncio.get_running_loop().time() > deadline:
            return {n: counts.get(n, 0) for n in names}
        await asyncio.sleep(0.1)


async def ensure_topics(bootstrap: str | Mapping[str, Any], topics: Topics, *,
                        names: list[str] | None = None, replication: int | None = None,
                        skip_unauthorized: bool = False) -> list[str]:
    """Create the missing topics (all by default) and check partition counts; return the names
    created. Safe to call from several processes at once. `replication` overrides
    `topics.replication` (RECALL_KAFKA_REPLICATION_FACTOR). `skip_unauthorized`: a topic this
    principal may neither see nor create (a secured cluster's ACLs) is left to the workers."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from streams.runtime.kafka.connection import connect_kwargs

    wanted = topics.configs()
    selected = names if names is not None else list(wanted)
    admin = AIOKafkaAdminClient(**connect_kwargs(bootstrap), request_timeout_ms=15000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [n for n in selected if n not in existing]
        created: list[str] = []
        denied: set[str] = set()
        if missing:
            response = await admin.create_topics([
                NewTopic(name, topics.partitions, replication or topics.replication,
                         topic_configs=wanted.get(name, {}))
                for name in missing])
            for name, code, message in _topic_errors(response):
                if code == _TOPIC_AUTHORIZATION_FAILED and skip_unauthorized:
                    denied.add(name)
                    continue
                if code == _TOPIC_AUTHORIZATION_FAILED:
                    from streams.runtime.kafka.connection import KafkaNotAuthorized

                    raise KafkaNotAuthorized(f"not authorized to create topic {name}",
                                             hint="create the topics as a principal allowed "
                                             "to, or grant CREATE on them")
                if code not in (0, _TOPIC_ALREADY_EXISTS):
                    raise _creation_failed(name, code, message)
                if code == 0:
                    created.append(name)
        counts = await _partition_counts(admin, [n for n in selected if n not in denied])
        for name, count in counts.items():
            if count != topics.partitions:
                raise TopicSetupError(f"topic {name} has {count} partitions; "
                                      f"expected {topics.partitions} (RECALL_SHARDS)")
        return created
    finally:
        await admin.close()
