"""Storage and read side: session id → shard number, and shard file names (never the id itself).

Shard k holds exactly the sessions Kafka's default partitioner sends to partition k (murmur2 of
the UTF-8 session id, the Java client's algorithm), so an index worker that owns partition k of
the events and documents topics owns shard k, and the embedded runtime lays sessions out alike.
"""

from __future__ import annotations

import functools

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as an unsigned 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    base = length - tail
    if tail >= 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


@functools.lru_cache(maxsize=65_536)
def shard_of(session_id: str, shard_count: int) -> int:
    """Stable across processes (never the salted hash()); equals Kafka's default partition.
    Cached: every record of a batch asks, and the pure-Python murmur2 is not free."""
    return (murmur2(session_id.encode("utf-8")) & 0x7FFFFFFF) % shard_count


def shard_file_name(index: int) -> str:
    """File name of shard `index`; ids stay out of file names so a listing leaks nothing."""
    return f"shard-{index:04d}.sqlite"
