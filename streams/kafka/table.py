"""Transport: a faust Table written in batches, each record pinned to its source partition."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from contextvars import ContextVar
from typing import Any

import faust

_PARTITION: ContextVar[int | None] = ContextVar("recall_changelog_partition", default=None)


class PartitionedTable(faust.Table[str, bytes]):
    """The fold table. Writes bypass faust's per-key path for two measured reasons:
    - faust picks the changelog partition from `current_event()`, which inside `take_events()`
      is some other event of the batch (faust-streaming#497), and `use_partitioner=True` would
      hash our compound keys away from the source partition; `write` names the partition, so
      recovering changelog partition k rebuilds exactly the sessions of events partition k;
    - every `table[k] = v` goes through faust's ProducerBuffer one message at a time, which
      became the bottleneck ("producer buffer full"); `write` hands records straight to the
      producer. faust's commit still flushes the producer before committing source offsets.
    Only the memory store is supported (persisted changelog offsets are not tracked).

    `paced=True` keeps faust's per-key path (partition still pinned): on tansu, whose ListOffsets
    under-reports the changelog end after a burst of writes, only that path recovered exactly
    (ENGINE.md); the direct burst lost recovered state after a SIGKILL."""

    def __init__(self, *args: Any, paced: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.paced = paced
        # str keys travel as their UTF-8 bytes (faust would JSON-quote a str key type); this
        # must be set before the store and changelog topic, which faust creates lazily.
        self.key_serializer = "raw"

    async def write(self, partition: int,
                    records: Iterable[tuple[str, bytes | None]]) -> list[Awaitable[Any]]:
        """Apply `records` locally and send them to changelog partition `partition`, in order;
        return the send futures (callers may await the acks; commits flush them anyway)."""
        if self.paced:
            return self._write_paced(partition, records)
        producer = self.app.producer
        topic = self.changelog_topic.get_topic_name()
        store = self.data
        # The memory store forgets keys of revoked partitions by this map after a recovery.
        key_partition = getattr(store, "_key_partition", None)
        futures: list[Awaitable[Any]] = []
        for key, value in records:
            futures.append(await producer.send(topic, key.encode(), value, partition,
                                               None, None))
            if value is None:
                if key in store:
                    del store[key]
            else:
                store[key] = value
            if key_partition is not None:
                key_partition[key] = partition
        return futures

    def _write_paced(self, partition: int,
                     records: Iterable[tuple[str, bytes | None]]) -> list[Awaitable[Any]]:
        token = _PARTITION.set(partition)
        try:
            for key, value in records:
                if value is None:
                    if key in self.data:
                        del self[key]
                else:
                    self[key] = value
        finally:
            _PARTITION.reset(token)
        return []

    def partition_for_key(self, key: Any) -> int | None:
        pinned = _PARTITION.get()
        return pinned if pinned is not None else super().partition_for_key(key)
