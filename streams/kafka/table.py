"""Transport: a faust Table whose writes name their changelog partition explicitly."""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any

import faust

_PARTITION: ContextVar[int | None] = ContextVar("recall_changelog_partition", default=None)


class PartitionedTable(faust.Table):  # type: ignore[misc]
    """A Table for batch agents. faust picks a changelog partition from `current_event()`, which
    inside `take_events()` is some other event of the batch (faust-streaming#497), and
    `use_partitioner=True` would hash our compound keys away from the source partition. `write`
    pins every record to the partition of the source record that caused it, so recovery of
    changelog partition k rebuilds exactly the sessions of events partition k."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # str keys travel as their UTF-8 bytes (faust would JSON-quote a str key type); this
        # must be set before the store and changelog topic, which faust creates lazily.
        self.key_serializer = "raw"

    def write(self, partition: int, records: Iterable[tuple[str, bytes | None]]) -> None:
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

    def partition_for_key(self, key: Any) -> int | None:
        pinned = _PARTITION.get()
        return pinned if pinned is not None else super().partition_for_key(key)
