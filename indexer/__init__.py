"""Storage and read side: surface-tagged documents → sharded SQLite FTS5 → search / reference."""

from __future__ import annotations

from typing import TYPE_CHECKING

from projections.lazy import lazy_getattr

if TYPE_CHECKING:
    from indexer.config import IndexConfig
    from indexer.errors import SourceConflict
    from indexer.maintenance import check_integrity, optimize_shards, shard_stats
    from indexer.ranking import merge_page
    from indexer.routing import shard_of
    from indexer.search import search_shard
    from indexer.service import QueryService
    from indexer.shardset import ShardSet
    from indexer.snippet import make_snippet

# Loaded on first use: a command that reads one module (indexer.normalize) skips the rest.
_WHERE = {
    "IndexConfig": "indexer.config",
    "SourceConflict": "indexer.errors",
    "check_integrity": "indexer.maintenance",
    "optimize_shards": "indexer.maintenance",
    "shard_stats": "indexer.maintenance",
    "merge_page": "indexer.ranking",
    "shard_of": "indexer.routing",
    "search_shard": "indexer.search",
    "QueryService": "indexer.service",
    "ShardSet": "indexer.shardset",
    "make_snippet": "indexer.snippet",
}


__getattr__ = lazy_getattr(globals(), _WHERE)

__all__ = [
    "IndexConfig",
    "QueryService",
    "ShardSet",
    "SourceConflict",
    "check_integrity",
    "make_snippet",
    "merge_page",
    "optimize_shards",
    "search_shard",
    "shard_of",
    "shard_stats",
]
