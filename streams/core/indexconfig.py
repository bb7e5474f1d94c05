"""Edge configuration: the index's configuration from the settings, for either runtime."""

from __future__ import annotations

from indexer import IndexConfig
from streams.core.detectors import build_redactor
from streams.core.settings import Settings


def index_config(settings: Settings) -> IndexConfig:
    """The shard set's configuration: its layout, limits and the redaction rules' fingerprint
    (an index built under other rules is rebuilt)."""
    return IndexConfig(shards=settings.shards, default_limit=settings.default_limit,
                       redaction=build_redactor(settings).fingerprint,
                       max_limit=settings.max_limit, snippet_chars=settings.snippet_chars,
                       read_window_max=settings.read_window_max,
                       live_window_ms=settings.live_window_ms,
                       snapshot_retention_s=settings.snapshot_retention_s,
                       substring=settings.substring)
