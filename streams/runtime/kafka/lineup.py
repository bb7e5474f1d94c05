"""Transport: a worker obeying the fleet's generation lineup (the `<p>.control` topic).

`LineupFollower` runs in the supervisor (streams.runtime.kafka.supervisor): the only consumer of the
lineup that waits on it closely. On a change it
- runs the fold role of the new live generation (a faust app's group and changelog are fixed
  when it is built), promoting the standby it prepared while that generation was being built,
  and only then stops the old one, so the switch costs no process start and no shutdown wait;
- tells the other roles (SIGUSR1), whose `LineupWatcher` then reads the lineup at once.
`LineupWatcher` runs in the index and query roles:
- the live generation changed: `on_live_change(generation)` tells the role (the query role
  scatters to it from its next request on);
- an index role indexes the live generation and the next one (the one being built, else the
  one the next reindex or replay will build: its topics created and its consumer group joined
  ahead, idle until a job writes to it), each into its own shard files (`kafka-index-g<n>/`)
  in that generation's consumer group, so a job's documents are indexed from its first second
  (not after a group join) and when a built
  generation goes live its indexer simply keeps running; the generation that stopped being
  live keeps answering for `RETIRING_S` (coordinators that have not seen the swap yet still
  ask it);
- a retired generation's retention window passed: its shard files (and, from a query role,
  its topics, once no index role reads them any more: `TOPICS_KEPT_S`) are deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import threading
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.core.settings import Settings
from streams.runtime.kafka import seam
from streams.runtime.kafka.connection import IDLE_TURN_MS, client_options, connect_kwargs
from streams.runtime.kafka.fleet import LINEUP_KEY, Lineup, control_topic
from streams.runtime.kafka.indexing import GATHER_S, DocumentIndexer
from streams.runtime.kafka.topics import Topics

log = logging.getLogger("recall.lineup")
#: How often a worker looks for retired generations whose retention window has ended.
CLEANUP_EVERY_S = 2.0
#: How long an index role keeps serving a generation after it stopped being live.
RETIRING_S = 10.0
#: Idle fetch wait of a role's lineup watcher (woken by the supervisor on a change) and of the
#: supervisor's follower (the one that notices changes).
WATCH_WAIT_MS = 5000
FOLLOW_WAIT_MS = 200
#: How long a retired generation's topics outlive its retirement at least: an index role
#: serves it for RETIRING_S from when it saw the swap (at the latest a watcher's idle wait
#: after it).
TOPICS_KEPT_S = RETIRING_S + WATCH_WAIT_MS / 1000


class LineupWatcher:
    """Tails the control topic for the whole life of a worker."""

    def __init__(self, settings: Settings, roles: Sequence[str], lineup: Lineup) -> None:
        self.settings = settings
        self.roles = tuple(roles)
        self.lineup = lineup
        self.live = lineup.live
        self.on_live_change: Callable[[int], None] = lambda generation: None
        self.bootstrap = client_options(settings)
        #: The index role's indexers, per generation (live, building, retiring).
        self.indexers: dict[int, tuple[DocumentIndexer, asyncio.Task[None], asyncio.Event]] = {}
        self._retiring: dict[int, float] = {}
        self._next_cleanup = 0.0
        self._failed: BaseException | None = None
        self._consumer: AIOKafkaConsumer | None = None

    def wake(self) -> None:
        """The supervisor saw the lineup change: read it now (from the role's event loop)."""
        if self._consumer is not None:
            seam.wake(self._consumer)
        for indexer, _, _ in self.indexers.values():
            # a job may be about to write the next generation's documents
            seam.wake(indexer.consumer)

    async def run(self, stop: asyncio.Event) -> None:
        await self.obey(self.lineup)
        try:
            # A long idle wait: the supervisor wakes the watcher when the lineup changes.
            async with contextlib.aclosing(follow_lineups(
                    self.settings, WATCH_WAIT_MS, stop.is_set, self._started)) as lineups:
                async for latest in lineups:
                    if self._failed is not None:
                        raise self._failed  # the supervisor restarts the role
                    if latest is not None:
                        self.lineup = latest
                        await self.obey(latest)
                    elif time.monotonic() >= self._next_cleanup:
                        # retention windows (and retiring generations' grace) end between
                        # records
                        await self.obey(self.lineup)
        finally:
            for _, _, task_stop in self.indexers.values():
                task_stop.set()
            for _, task, _ in self.indexers.values():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 15)

    def _started(self, consumer: AIOKafkaConsumer) -> None:
        self._consumer = consumer

    async def obey(self, lineup: Lineup) -> None:
        if lineup.live != self.live:
            log.info("%s: the live generation is now %s", "/".join(self.roles), lineup.live)
            self._retiring[self.live] = time.monotonic() + RETIRING_S
            self.live = lineup.live
            self.on_live_change(lineup.live)
        if "index" in self.roles:
            self._follow(lineup)
        await self._clean_up(lineup)

    async def _clean_up(self, lineup: Lineup) -> None:
        self._next_cleanup = time.monotonic() + CLEANUP_EVERY_S
        if "index" in self.roles:
            self._remove_expired_shards(lineup)
        if "query" in self.roles:
            await self._delete_expired_topics(lineup)

    def _follow(self, lineup: Lineup) -> None:
        now = time.monotonic()
        self._retiring = {g: until for g, until in self._retiring.items() if until > now}
        upcoming = lineup.upcoming()
        wanted = {lineup.live, upcoming, *self._retiring}
        for generation in set(self.indexers) - wanted:
            self.indexers.pop(generation)[2].set()
        for generation in sorted(wanted - set(self.indexers)):
            task_stop = asyncio.Event()
            indexer = DocumentIndexer.for_generation(self.settings, generation)
            task = asyncio.create_task(self._index(indexer, task_stop, generation))
            self.indexers[generation] = (indexer, task, task_stop)
        for generation, (indexer, _, _) in self.indexers.items():
            # a generation no one searches yet writes in fewer, larger transactions
            indexer.gather_s = GATHER_S if generation == upcoming else 0.0

    async def _index(self, indexer: Any, stop: asyncio.Event, generation: int) -> None:
        try:
            await indexer.run(stop)
        except Exception as exc:
            log.exception("indexing generation %s failed", generation)
            self._failed = exc

    def _expired(self, lineup: Lineup, *, at_least_s: float = 0.0) -> list[int]:
        now_ms = int(time.time() * 1000)
        window_ms = max(self.settings.snapshot_retention_s, at_least_s) * 1000
        return [g for g, at in lineup.retired if now_ms - at >= window_ms and g != lineup.live
                and g not in self.indexers]

    def _remove_expired_shards(self, lineup: Lineup) -> None:
        for generation in self._expired(lineup):
            path = Topics.of(self.settings, generation).index_dir(self.settings.data_dir)
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
                log.warning("removed the shard files of retired generation %s", generation)

    async def _delete_expired_topics(self, lineup: Lineup) -> None:
        # Not before every index role stopped reading the generation: its consumer's metadata
        # requests would create a deleted topic again (Kafka auto-creates topics by default,
        # with one partition), and it would rejoin its group with each deletion.
        expired = self._expired(lineup, at_least_s=TOPICS_KEPT_S)
        if not expired:
            return
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(**connect_kwargs(self.bootstrap))
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


class LineupFollower:
    """Tails the lineup for a supervisor (in a thread of its own) and calls `on_change(old,
    new)` with every change after the lineup it started from."""

    def __init__(self, settings: Settings, lineup: Lineup,
                 on_change: Callable[[Lineup, Lineup], None]) -> None:
        self.settings = settings
        self.lineup = lineup
        self.on_change = on_change
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recall-lineup", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            asyncio.run(self._follow())
        except Exception:
            log.exception("following the lineup failed")

    async def _follow(self) -> None:
        async with contextlib.aclosing(follow_lineups(
                self.settings, FOLLOW_WAIT_MS, self._stop.is_set)) as lineups:
            async for latest in lineups:
                if latest is None:
                    continue
                old, self.lineup = self.lineup, latest
                if (old.live, old.building, old.folded) != (
                        latest.live, latest.building, latest.folded):
                    self.on_change(old, latest)


async def follow_lineups(settings: Settings, wait_ms: int, stopped: Callable[[], bool],
                         started: Callable[[AIOKafkaConsumer], None] = lambda consumer: None,
                         ) -> AsyncGenerator[Lineup | None, None]:
    """Tails `<p>.control` from its beginning until `stopped()`: after each read, the latest
    lineup read (once the reader caught up with the topic's end as of its start: older lineups
    are history, and one read on its own would look like a change) or None (nothing new).
    `started(consumer)` sees the reader's consumer before it starts (to `seam.wake` it)."""
    consumer = AIOKafkaConsumer(**client_options(settings),
                                group_id=None, enable_auto_commit=False,
                                fetch_max_wait_ms=wait_ms, consumer_timeout_ms=IDLE_TURN_MS)
    started(consumer)
    await consumer.start()
    try:
        tp = TopicPartition(control_topic(settings.topic_prefix), 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        caught_up = (await consumer.end_offsets([tp]))[tp]
        latest: Lineup | None = None
        while not stopped():
            batch = await consumer.getmany(tp, timeout_ms=IDLE_TURN_MS)
            for record in batch.get(tp, []):
                if record.key == LINEUP_KEY and record.value:
                    latest = Lineup.from_json(bytes(record.value))
            if latest is not None and await consumer.position(tp) >= caught_up:
                yield latest
                latest = None
            else:
                yield None
    finally:
        await consumer.stop()
