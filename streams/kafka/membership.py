"""Transport: consumer-group behaviour of a worker — static membership, leaving on a clean stop,
and re-reading uncommitted partitions after a rebalance.

Measured on noida-db 0.2.3 (ENGINE notes, tests/integration): a group member that dies without a
LeaveGroup is never expired, so a SIGKILLed worker would hold its partitions forever. With
static membership (KIP-345, `group.instance.id`) the restarted worker rejoins under the same
instance id and takes its partitions back at once, on any Kafka-protocol broker. Kafka clients
skip LeaveGroup for static members (they expect to come back); our workers leave on a clean stop
so a scale-in hands partitions over immediately instead of after a session timeout.

After a rebalance faust drops the records it had fetched but not processed and seeks every
partition back to its committed offset. aiokafka's `seek_to_committed` skips partitions whose
committed offset is missing or 0, so they kept their fetch position *past* the dropped records;
faust then committed the later ones and the dropped records were never folded (INGEST_SEQ_GAP
for every later event of their sessions, measured in the add/remove-worker test). A partition
without a commit is therefore sought to its beginning, as `auto_offset_reset=earliest` means.

faust also remembers the last offset it read per partition: a record below it is dropped as
already seen, and a jump above it marks the skipped offsets as a "gap" that counts as acked. A
record fetched before a rebalance's seek but delivered after it moves that mark forward, so the
re-fetched records are dropped *and* their offsets committed: one lost event per such race,
measured (an event never folded, the session's later events parked as INGEST_SEQ_GAP). Our fold
is idempotent (a redelivered event is recognised by seq and digest), so the worker turns that
bookkeeping off: every fetched record is delivered, and no gap is ever assumed acked.

Even so, faust was measured delivering records past a hole (fetched before its post-rebalance
seek, delivered during it, the records before them dropped) and committing past the hole (its
gap check is off by one). The fold therefore keeps its own read position per events partition
in its table (streams.agents.FoldPositions), and faust's post-rebalance seek is extended to go
there rather than to the committed offsets.
"""

from __future__ import annotations

import hashlib
import logging
import socket
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.consumer import group_coordinator
from aiokafka.errors import KafkaError
from aiokafka.protocol.group import LeaveGroupRequest
from faust.transport import consumer as faust_consumer

from streams.settings import Settings

log = logging.getLogger("recall.membership")


def worker_id(settings: Settings) -> str:
    """RECALL_WORKER_ID, else host name + a hash of the data dir: stable across restarts of the
    same worker, distinct for two workers on one host (they must not share a data dir)."""
    if settings.worker_id:
        return settings.worker_id
    where = str(settings.data_dir.expanduser().resolve()).encode()
    return f"{socket.gethostname()}-{hashlib.blake2b(where, digest_size=5).hexdigest()}"


def instance_id(settings: Settings, role: str) -> str | None:
    """The `group.instance.id` of this worker in one role's group; None (dynamic membership)
    on tansu, which expires dead members by session timeout and has no static membership."""
    if settings.broker_flavor == "tansu":
        return None
    return f"{worker_id(settings)}.{role}"


async def _leave_group(self: Any) -> None:
    # aiokafka's own version returns early for static members; this one always leaves.
    if self.generation > 0:
        try:
            await self._send_req(LeaveGroupRequest(self.group_id, self.member_id))
        except KafkaError as exc:
            log.info("LeaveGroup failed (the group will rebalance when the member is fenced): "
                     "%s", exc)
    self.reset_generation()




_seek_to_committed = AIOKafkaConsumer.seek_to_committed


async def _seek_to_committed_or_beginning(self: Any, *partitions: Any) -> Any:
    committed = await _seek_to_committed(self, *partitions)
    uncommitted = [tp for tp, offset in committed.items() if not offset]
    if uncommitted:
        await self.seek_to_beginning(*uncommitted)
    return committed


class _NothingRead(dict[Any, Any]):
    """faust's per-partition read offsets, always unknown: nothing is dropped as already read
    and no skipped offsets are taken as acked."""

    def __getitem__(self, key: Any) -> None:
        return None


_faust_consumer_init = faust_consumer.Consumer.__init__
_faust_perform_seek = faust_consumer.Consumer.perform_seek


async def _perform_seek_to_fold_positions(self: Any) -> None:
    # faust seeks every assigned partition to its committed offset after a rebalance; the fold
    # reads the events topic from the positions recorded in its table instead (see
    # streams.agents.FoldPositions), which committed offsets can overtake.
    await _faust_perform_seek(self)
    positions = getattr(self.app, "fold_positions", None)
    if positions is not None:
        await positions.seek(self)


def _init_without_read_offsets(self: Any, *args: Any, **kwargs: Any) -> None:
    _faust_consumer_init(self, *args, **kwargs)
    self._read_offset = _NothingRead()


def patch_consumers() -> None:
    """The process-wide behaviours above, for every consumer of a worker process (faust builds
    its consumer itself, so a patch is the only seam)."""
    from streams.kafka import seam

    seam.install()
    group_coordinator.GroupCoordinator._maybe_leave_group = _leave_group
    AIOKafkaConsumer.seek_to_committed = _seek_to_committed_or_beginning
    faust_consumer.Consumer.__init__ = _init_without_read_offsets  # type: ignore[method-assign]
    faust_consumer.Consumer.perform_seek = _perform_seek_to_fold_positions  # type: ignore[method-assign]
