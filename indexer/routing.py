"""Storage and read side: session id → shard number, and shard file names (never the id itself)."""

from __future__ import annotations

import zlib


def shard_of(session_id: str, shard_count: int) -> int:
    """Stable across processes and Python versions (crc32 of the UTF-8 id, unlike salted hash())."""
    return zlib.crc32(session_id.encode("utf-8")) % shard_count


def shard_file_name(index: int) -> str:
    """File name of shard `index`; ids stay out of file names so a listing leaks nothing."""
    return f"shard-{index:04d}.sqlite"
