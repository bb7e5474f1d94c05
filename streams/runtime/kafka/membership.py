"""Transport: a worker's identity in its consumer groups (static membership).

Measured on noida-db 0.2.3 (ENGINE notes, tests/integration): a group member that dies without a
LeaveGroup is never expired, so a SIGKILLed worker would hold its partitions forever. With
static membership (KIP-345, `group.instance.id`) the restarted worker rejoins under the same
instance id and takes its partitions back at once, on any Kafka-protocol broker. Kafka clients
skip LeaveGroup for static members (they expect to come back); our workers leave on a clean stop
so a scale-in hands partitions over immediately instead of after a session timeout.
The behaviours that need faust's and aiokafka's internals (leaving on a clean stop, re-reading
after a rebalance) live in streams.runtime.kafka.seam.
"""

from __future__ import annotations

import hashlib
import socket

from streams.core.settings import Settings


def worker_id(settings: Settings) -> str:
    """RECALL_WORKER_ID, else host name + a hash of the data dir: stable across restarts of the
    same worker, distinct for two workers on one host (they must not share a data dir)."""
    if settings.worker_id:
        return settings.worker_id
    where = str(settings.data_dir.expanduser().resolve()).encode()
    return f"{socket.gethostname()}-{hashlib.blake2b(where, digest_size=5).hexdigest()}"


def instance_id(settings: Settings, role: str) -> str:
    """The `group.instance.id` of this worker in one role's group."""
    return f"{worker_id(settings)}.{role}"
