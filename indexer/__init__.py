"""Storage and read side: surface-tagged documents → sharded SQLite FTS5 → search / reference."""

from indexer.config import IndexConfig
from indexer.errors import SourceConflict
from indexer.maintenance import check_integrity, optimize_shards, shard_stats
from indexer.ranking import merge_page
from indexer.routing import shard_of
from indexer.search import search_shard
from indexer.service import QueryService
from indexer.shardset import ShardSet
from indexer.snippet import make_snippet

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
