"""Transport: a worker obeying the fleet's generation lineup (the `<p>.control` topic).

- the live generation changed: the worker restarts itself into the new one;
- a generation is being built: an index worker also indexes its documents topic into its own
  shard files (`kafka-index-g<n>/`), in that generation's consumer group;
- a retired generation's retention window passed: its shard files (and, from a query worker,
  its topics) are deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.kafka.fleet import LINEUP_KEY, Lineup, control_topic
from streams.kafka.indexing import DocumentIndexer
from streams.settings import Settings
from streams.topics import Topics, bootstrap_servers

log = logging.getLogger("recall.lineup")
#: How often a worker looks for retired generations whose retention window has ended.
CLEANUP_EVERY_S = 2.0


class LineupWatcher:
    """Tails the control topic for the whole life of a worker."""

    def __init__(self, settings: Settings, roles: Sequence[str], lineup: Lineup) -> None:
        self.settings = settings
        self.roles = tuple(roles)
        self.lineup = lineup
        self.started_live = lineup.live
        self.restart = False
        self.on_live_change: Callable[[], None] = lambda: None
        self.bootstrap = bootstrap_servers(str(settings.broker))
        self._building: dict[int, tuple[asyncio.Task[None], asyncio.Event]] = {}
        self._next_cleanup = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                    enable_auto_commit=False, fetch_max_wait_ms=200)
        await consumer.start()
        try:
            tp = TopicPartition(control_topic(self.settings.topic_prefix), 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            await self.obey(self.lineup)
            while not stop.is_set():
                batch = await consumer.getmany(tp, timeout_ms=500)
                latest = None
                for record in batch.get(tp, []):
                    if record.key == LINEUP_KEY and record.value:
                        latest = Lineup.from_json(bytes(record.value))
                if latest is not None:
                    self.lineup = latest
                    await self.obey(latest)
                elif time.monotonic() >= self._next_cleanup:
                    await self._clean_up(self.lineup)  # retention windows end between records
                if self.restart:
                    return
        finally:
            for task, task_stop in self._building.values():
                task_stop.set()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 15)
            await consumer.stop()

    async def obey(self, lineup: Lineup) -> None:
        if lineup.live != self.started_live:
            if not self.restart:
                self.restart = True
                self.on_live_change()
            return
        if "index" in self.roles:
            self._follow_building(lineup)
        await self._clean_up(lineup)

    async def _clean_up(self, lineup: Lineup) -> None:
        self._next_cleanup = time.monotonic() + CLEANUP_EVERY_S
        if "index" in self.roles:
            self._remove_expired_shards(lineup)
        if "query" in self.roles:
            await self._delete_expired_topics(lineup)

    def _follow_building(self, lineup: Lineup) -> None:
        wanted = {lineup.building} if lineup.building and lineup.building != lineup.live else set()
        for generation in set(self._building) - wanted:
            self._building.pop(generation)[1].set()
        for generation in wanted - set(self._building):
            task_stop = asyncio.Event()
            indexer = DocumentIndexer.for_generation(self.settings, generation)
            task = asyncio.create_task(self._index(indexer, task_stop, generation))
            self._building[generation] = (task, task_stop)

    @staticmethod
    async def _index(indexer: Any, stop: asyncio.Event, generation: int) -> None:
        try:
            await indexer.run(stop)
        except Exception:
            log.exception("indexing building generation %s failed", generation)

    def _expired(self, lineup: Lineup) -> list[int]:
        now_ms = int(time.time() * 1000)
        window_ms = self.settings.snapshot_retention_s * 1000
        return [g for g, at in lineup.retired if now_ms - at >= window_ms and g != lineup.live]

    def _remove_expired_shards(self, lineup: Lineup) -> None:
        for generation in self._expired(lineup):
            path = Topics.of(self.settings, generation).index_dir(self.settings.data_dir)
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
                log.warning("removed the shard files of retired generation %s", generation)

    async def _delete_expired_topics(self, lineup: Lineup) -> None:
        expired = self._expired(lineup)
        if not expired:
            return
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            existing = set(await admin.list_topics())
            doomed = [t for g in expired for t in Topics.of(self.settings, g).derived()
                      if t in existing]
            if doomed:
                with contextlib.suppress(Exception):  # another worker deleted them first
                    await admin.delete_topics(doomed)
        finally:
            await admin.close()
